#!/usr/bin/env bash
# Writes the backend node cases of the current onnx wheel (onnx 1.23.2 from PyPI: opset 28,
# IR 14) into BUILD_DIR/onnx-wheel-cases/node/, for the ConformanceWheel suite
# (tests/conformance_wheel_test.cpp). The cases come from the wheel's own case generators
# (onnx.backend.test.case.node, written by cmd_tools' generate-data: make_cases.py), run in a venv this script makes at
# BUILD_DIR/onnx-wheel-venv from Debian's python3; onnxruntime is installed there too, only for
# the peer count (tests/onnx_wheel/count_ort.py). A stamp file names the wheel version: a second
# run with the same version does nothing. A pip failure fails the script with a message saying
# so; nothing is skipped silently.
#   usage: tests/onnx_wheel/make_cases.sh BUILD_DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(mkdir -p "$1" && cd "$1" && pwd)"
onnx_version=1.23.2
ort_version=1.32.0
venv="$build/onnx-wheel-venv"
cases="$build/onnx-wheel-cases"
stamp="$cases/.stamp"
want="onnx==$onnx_version onnxruntime==$ort_version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$cases/node" ]; then
  echo "onnx-wheel cases: up to date ($want) in $cases"
  exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" || { echo "make_cases.sh: cannot make the venv $venv ($py -m venv failed)" >&2; exit 1; }
fi
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "onnx==$onnx_version" "onnxruntime==$ort_version"; then
  echo "make_cases.sh: pip could not install onnx==$onnx_version / onnxruntime==$ort_version from PyPI into $venv;" \
       "the ConformanceWheel cases cannot be made (is PyPI reachable?)" >&2
  exit 1
fi
rm -rf "$cases.tmp"
mkdir -p "$cases.tmp"
# The generators' numpy warnings go to a log, shown only when the generation fails.
if ! "$venv/bin/python" "$here/make_cases.py" "$cases.tmp" >"$build/onnx-wheel-cases.log" 2>&1; then
  cat "$build/onnx-wheel-cases.log" >&2
  echo "make_cases.sh: the onnx $onnx_version case generators failed (log above)" >&2
  exit 1
fi
[ -d "$cases.tmp/node" ] || { echo "make_cases.sh: generate-data wrote no node/ folder in $cases.tmp" >&2; exit 1; }
rm -rf "$cases"
mv "$cases.tmp" "$cases"
echo "$want" > "$stamp"
echo "onnx-wheel cases: $(ls "$cases/node" | wc -l) node cases from onnx $onnx_version in $cases"
