#!/usr/bin/env bash
# Starts a cuvil package behind Ray Serve (docs/serving.md). Makes build/serve-venv (Debian's
# python3, --system-site-packages) with this repository's cuvil package and ray[serve] (pinned
# in serving/common.sh) from PyPI when it is missing, compiles the digits example when no package is given, and serves
# on 127.0.0.1:8000 until interrupted.
#   usage: serving/start_ray_serve.sh [PACKAGE.cuvir] [ray_serve.py options, e.g. --port 8000]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/serving/common.sh"
serving_setup serve-venv ray.serve "$RAY_SERVE_SPEC" "${1:-}"
[ "$package_args" -eq 1 ] && shift
exec "$venv/bin/python" "$here/serving/ray_serve.py" "$package" "$@"
