#!/usr/bin/env bash
# Starts a cuvil package behind Triton Inference Server through PyTriton (docs/serving.md),
# CPU only. Makes build/triton-venv with Debian's python3 (Triton's Python stub fails to start
# under another Python 3.11 that comes first on PATH, e.g. pyenv's) with this repository's
# cuvil package and nvidia-pytriton from PyPI when missing, compiles the digits example when
# no package is given, and serves on 127.0.0.1 (HTTP 8000, gRPC 8001, metrics 8002).
#   usage: serving/start_pytriton.sh [PACKAGE.cuvir] [pytriton_serve.py options]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/build/triton-venv"
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cuvil, pytriton' 2>/dev/null; then
  "$py" -m venv --system-site-packages "$venv"
  export SKBUILD_BUILD_DIR="$here/build-python"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here" "nvidia-pytriton>=0.7"
fi
package="${1:-}"
if [ -z "$package" ] || [ "${package#--}" != "$package" ]; then
  package="$here/build/digits-serve.cuvir"
  "$venv/bin/python" -c "import cuvil, sys; cuvil.compile(sys.argv[1], sys.argv[2], dim={'batch': '1:256'})" \
    "$here/examples/digits/digits.onnx" "$package"
else
  shift
fi
# Debian's python first on PATH for Triton's Python stub, whatever the caller's PATH says.
export PATH="$venv/bin:/usr/bin:$PATH"
exec "$venv/bin/python" "$here/serving/pytriton_serve.py" "$package" "$@"
