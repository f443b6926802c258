#!/usr/bin/env bash
# The Python package's check (docs/python.md): makes a fresh venv under build/ with Debian's
# python3 (its numpy and onnx are visible through --system-site-packages), runs `pip install .`
# there (scikit-build-core and nanobind come from PyPI into pip's isolated build environment),
# installs pytest and runs python/tests/ except the tests that need a serving engine
# (marked serving_engine: scripts/test_serving.sh runs them in venvs with Ray Serve and
# PyTriton). Needs PyPI; the C++ build and tests never do.
#   usage: scripts/test_python.sh [pytest arguments]
# The CMake build tree of the wheel persists in build-python/ (SKBUILD_BUILD_DIR; at the depth
# of build/, so that ccache finds the same relative paths and reuses its objects), so a
# second run rebuilds only what changed; ccache, when present, is the compiler launcher.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/build/python-venv"
# Debian's python3: a pyenv shim first on PATH would make a venv of another Python.
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"

rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv"
export SKBUILD_BUILD_DIR="$here/build-python"
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  # As setup.sh: paths hashed relative to the checkout, so a clone elsewhere hits the cache.
  export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest
# From outside the source tree, so that `import cuvil` finds the installed package.
cd "$here/build"
CUVIL_SOURCE_DIR="$here" "$venv/bin/python" -m pytest -q -m "not serving_engine" "$here/python/tests" "$@"
