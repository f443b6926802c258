#!/usr/bin/env bash
# The serving deployments' check (docs/serving.md), the `serving` stage of scripts/test.sh:
# builds this tree's cuvil wheel once (reusing build-python/ from scripts/test_python.sh), puts
# it with the pinned engines (serving/common.sh) into the venvs that serving/start_ray_serve.sh
# and serving/start_pytriton.sh use (build/serve-venv, build/triton-venv: Debian's python3),
# and runs python/tests/test_serving.py's engine tests there: the Ray Serve deployment in the
# one, the PyTriton deployment in the other, each on loopback with 8 concurrent clients.
# CUVIL_SERVING_REQUIRE makes a missing engine an error instead of a skip, and -k selects the
# engine's tests (none selected: pytest exits 5), so nothing here passes by being skipped. A
# pip failure fails the run with pip's message. Needs PyPI.
#   usage: scripts/test_serving.sh [pytest arguments]
# Kept venvs are reused (only cuvil is reinstalled); remove build/serve-venv and
# build/triton-venv for a cold run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/serving/common.sh"
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"

step() { echo "-- $1 ($((SECONDS - t0))s so far)"; }
t0=$SECONDS

# One wheel for both venvs (the build is skipped when build-python/ is up to date).
wheels="$here/build/serving-wheel"
rm -rf "$wheels"
step "building the cuvil wheel"
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
SKBUILD_BUILD_DIR="$here/build-python" "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps \
  --wheel-dir "$wheels" "$here"
wheel="$(ls "$wheels"/cuvil-*.whl)"

run_engine_tests() {
  local name="$1" spec="$2" module="$3" select="$4"
  step "installing $spec into build/$name"
  serving_install "$name" "$spec" "$wheel"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest
  step "pytest -k $select in build/$name"
  # From outside the source tree, so that `import cuvil` finds the installed package. Debian's
  # python first on PATH: Triton's Python stub starts whatever python3 PATH finds first.
  (cd "$here/build" && PATH="$venv/bin:/usr/bin:$PATH" CUVIL_SOURCE_DIR="$here" CUVIL_SERVING_REQUIRE="$module" \
    "$venv/bin/python" -m pytest -q -rs -W ignore::DeprecationWarning "$here/python/tests/test_serving.py" -k "$select" "${@:5}")
}

run_engine_tests serve-venv "$RAY_SERVE_SPEC" ray ray_serve "$@"
run_engine_tests triton-venv "$PYTRITON_SPEC" pytriton triton "$@"
step "done"
