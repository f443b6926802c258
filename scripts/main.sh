#!/usr/bin/env bash
# The README's main job: set up (install missing packages, build), compile the bundled
# example model (a small CNN trained on scikit-learn's 8x8 digits, examples/digits/) into a
# .cuvir package, and run it on a sample image; the output's argmax is the predicted digit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh" --build-dir "$here/build"
example="$here/examples/digits"
"$here/build/cuvilc" compile "$example/digits.onnx" -o "$here/build/digits.cuvir"
"$here/build/cuvil-run" "$here/build/digits.cuvir" --input "image=$example/sample.npy" | tee "$here/build/digits.out"
predicted=$(sed -n 's/^  argmax: //p' "$here/build/digits.out")
echo "predicted digit: $predicted (true label: $(cat "$example/sample_label.txt"))"
