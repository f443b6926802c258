#!/usr/bin/env bash
# The README's main job: set up (install missing packages, build), then compile the bundled
# example model. Today that is the BERT-style encoder in testdata/models: `cuvilc inspect`
# summarises it and `cuvilc compile --emit ir` prints its IR after symbolic shape inference.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh" --build-dir "$here/build"
model="$here/testdata/models/bert_tiny.onnx"
"$here/build/cuvilc" inspect "$model"
"$here/build/cuvilc" compile "$model" --emit ir -o "$here/build/bert_tiny.ir"
echo "IR after shape inference: build/bert_tiny.ir ($(wc -l < "$here/build/bert_tiny.ir") lines)"
grep -E '^graph ' "$here/build/bert_tiny.ir"
