#!/usr/bin/env bash
# Makes .venv/ at the repository root with the Python tools cuvil compares itself against:
# onnxruntime (the peer, and the reference outputs in testdata/), openvino (the other CPU peer)
# and numpy/onnx. Never a dependency of the build or the tests: the scripts that read ORT
# outputs (testdata/scripts/*.py --reference, bench/) use it, and what they produce is checked
# in. Usage: bash scripts/make_venv.sh [--with-openvino] [--with-sklearn]
# (--with-sklearn: scikit-learn and skl2onnx, for bench/trees_vs_onnxruntime.py)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
# Debian's python3 (3.11 on Debian 12); a pyenv shim on PATH would make a venv without numpy.
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
pkgs=(numpy onnx onnxruntime)
for opt in "$@"; do
  case "$opt" in
    --with-openvino) pkgs+=(openvino) ;;
    --with-sklearn) pkgs+=(scikit-learn skl2onnx) ;;
    *) echo "make_venv.sh: unknown option $opt" >&2; exit 2 ;;
  esac
done
"$venv/bin/python" -m pip install --quiet "${pkgs[@]}"
"$venv/bin/python" -c 'import onnxruntime, numpy; print("onnxruntime", onnxruntime.__version__, "numpy", numpy.__version__)'
