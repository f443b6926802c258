#!/usr/bin/env bash
# Starts a cuvil package behind Triton Inference Server through PyTriton (docs/serving.md),
# CPU only. Makes build/triton-venv with Debian's python3 (Triton's Python stub fails to start
# under another Python 3.11 that comes first on PATH, e.g. pyenv's) with this repository's
# cuvil package and nvidia-pytriton (pinned in serving/common.sh) from PyPI when missing,
# compiles the digits example when no package is given, and serves on 127.0.0.1 (HTTP 8000,
# gRPC 8001, metrics 8002).
#   usage: serving/start_pytriton.sh [PACKAGE.cuvir] [pytriton_serve.py options]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/serving/common.sh"
serving_setup triton-venv pytriton "$PYTRITON_SPEC" "${1:-}"
[ "$package_args" -eq 1 ] && shift
# Debian's python first on PATH for Triton's Python stub, whatever the caller's PATH says.
export PATH="$venv/bin:/usr/bin:$PATH"
exec "$venv/bin/python" "$here/serving/pytriton_serve.py" "$package" "$@"
