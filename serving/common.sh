# Shared by serving/start_ray_serve.sh, serving/start_pytriton.sh and scripts/test_serving.sh
# (sourced, not run).
#
# The engines' versions, pinned: the ones the deployments and their tests were checked with.
RAY_SERVE_SPEC="ray[serve]==2.60.0"
PYTRITON_SPEC="nvidia-pytriton==0.7.0"

# serving_install VENV_NAME PIP_SPEC [CUVIL]
#   makes build/VENV_NAME with Debian's python3 (--system-site-packages: its numpy) when it is
#   missing, installs PIP_SPEC from PyPI (a no-op when the pinned version is there) and
#   (re)installs cuvil from CUVIL (a wheel; default: this repository, built in build-python/),
#   so the venv always runs this tree's cuvil. Sets `venv`. A failed install fails the caller
#   (set -e) with pip's message.
serving_install() {
  local name="$1" spec="$2" cuvil="${3:-}"
  local here py
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$here/build/$name"
  # Debian's python3: a pyenv shim first on PATH would make a venv of another Python, under
  # which Triton's Python stub fails to start.
  py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3)"
  [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
  SKBUILD_BUILD_DIR="$here/build-python" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --force-reinstall --no-deps "${cuvil:-$here}"
}

# serving_setup VENV_NAME IMPORT PIP_SPEC [PACKAGE.cuvir]
#   serving_install VENV_NAME PIP_SPEC unless `import cuvil, IMPORT` already works there (a
#   quick start; scripts/test_serving.sh reinstalls cuvil), and sets `venv`, `package`
#   (PACKAGE.cuvir, or the digits example compiled for batch 1..256 when the first argument is
#   missing or an option) and `package_args` (1 when the first argument was the package, so
#   the caller shifts it off).
serving_setup() {
  local name="$1" module="$2" spec="$3" first="${4:-}"
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$here/build/$name"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import cuvil, $module" 2>/dev/null; then
    serving_install "$name" "$spec"
  fi
  package="$first"
  package_args=1
  if [ -z "$package" ] || [ "${package#--}" != "$package" ]; then
    package="$here/build/digits-serve.cuvir"
    package_args=0
    "$venv/bin/python" -c "import cuvil, sys; cuvil.compile(sys.argv[1], sys.argv[2], dim={'batch': '1:256'})" \
      "$here/examples/digits/digits.onnx" "$package"
  fi
}
