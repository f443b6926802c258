# Shared by serving/start_ray_serve.sh and serving/start_pytriton.sh (sourced, not run):
# serving_setup VENV_NAME IMPORT PIP_SPEC [PACKAGE.cuvir]
#   makes build/VENV_NAME (Debian's python3, --system-site-packages) with this repository's
#   cuvil package and PIP_SPEC from PyPI unless `import cuvil, IMPORT` already works there, and
#   sets `venv`, `package` (PACKAGE.cuvir, or the digits example compiled for batch 1..256 when
#   the first argument is missing or an option) and `package_args` (1 when the first argument
#   was the package, so the caller shifts it off).
serving_setup() {
  local name="$1" module="$2" spec="$3" first="${4:-}"
  local here py
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$here/build/$name"
  py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3)"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import cuvil, $module" 2>/dev/null; then
    "$py" -m venv --system-site-packages "$venv"
    SKBUILD_BUILD_DIR="$here/build-python" \
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here" "$spec"
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
