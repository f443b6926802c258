#!/usr/bin/env bash
# Starts a cuvil package behind Ray Serve (docs/serving.md). Makes build/serve-venv (Debian's
# python3, --system-site-packages) with this repository's cuvil package and ray[serve] from
# PyPI when it is missing, compiles the digits example when no package is given, and serves
# on 127.0.0.1:8000 until interrupted.
#   usage: serving/start_ray_serve.sh [PACKAGE.cuvir] [ray_serve.py options, e.g. --port 8000]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/build/serve-venv"
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cuvil, ray.serve' 2>/dev/null; then
  "$py" -m venv --system-site-packages "$venv"
  export SKBUILD_BUILD_DIR="$here/build-python"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here" "ray[serve]"
fi
package="${1:-}"
if [ -z "$package" ] || [ "${package#--}" != "$package" ]; then
  package="$here/build/digits-serve.cuvir"
  "$venv/bin/python" -c "import cuvil, sys; cuvil.compile(sys.argv[1], sys.argv[2], dim={'batch': '1:256'})" \
    "$here/examples/digits/digits.onnx" "$package"
else
  shift
fi
exec "$venv/bin/python" "$here/serving/ray_serve.py" "$package" "$@"
