#!/usr/bin/env python3
"""A/B check of cuvil's W8A8 calibration against ONNX Runtime's quantize_static (issue 11).

Quantizes MODEL with ONNX Runtime (QDQ format, per-channel, QUInt8 activations, QInt8 weights,
MinMax calibration) on the same calibration directory cuvil reads (DIR/<input>.npy with a
leading sample axis, or a file of the input's own rank = samples of batch 1), then compares
with cuvil's export of the same model (`cuvilc quantize MODEL --calib DIR -o CUVIL.onnx`):

  - every activation scale and zero point both models have (same tensor names: cuvil names
    them as quantize_static does), as a ratio;
  - with --eval PIXELS LABELS (the digits data of testdata/quant/digits), the accuracy of the
    float model, ORT's QDQ model and cuvil's QDQ model, all run in ONNX Runtime.

Needs onnxruntime and numpy (not a ctest; ctest's ORT check is QuantQdq.ExportRunsInOnnxRuntime):
  PY bench/quant_ab_ort.py examples/digits/digits.onnx testdata/quant/digits/calib cuvil.qdq.onnx \\
     --eval testdata/quant/digits/eval_pixels.npy testdata/quant/digits/eval_labels.npy
"""
import argparse
import os
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)


class DirReader(CalibrationDataReader):
    def __init__(self, model, calib):
        inits = {t.name for t in model.graph.initializer}
        self.samples = []
        inputs = [i for i in model.graph.input if i.name not in inits]
        data = {}
        for i in inputs:
            x = np.load(os.path.join(calib, i.name + ".npy"))
            rank = len(i.type.tensor_type.shape.dim)
            data[i.name] = x[:, None] if x.ndim == rank else x  # batch-of-one convention
        n = len(next(iter(data.values())))
        self.samples = [{k: v[s] for k, v in data.items()} for s in range(n)]
        self.it = iter(self.samples)

    def get_next(self):
        return next(self.it, None)


def scales(model):
    vals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear":
            out[n.input[0]] = (float(vals[n.input[1]]), int(vals[n.input[2]]) if len(n.input) > 2 else 0)
    return out


def accuracy(path, pixels, labels):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return float((s.run(None, {name: pixels})[0].argmax(1) == labels).mean() * 100)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("calib")
    ap.add_argument("cuvil_qdq")
    ap.add_argument("--eval", nargs=2, metavar=("PIXELS", "LABELS"))
    a = ap.parse_args()
    model = onnx.load(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        ort_path = os.path.join(tmp, "ort.qdq.onnx")
        quantize_static(a.model, ort_path, DirReader(model, a.calib), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
        ours, theirs = scales(onnx.load(a.cuvil_qdq)), scales(onnx.load(ort_path))
        print(f"{'activation':50s} {'cuvil scale':>12s} {'ORT scale':>12s} {'ratio':>8s} zp cuvil/ORT")
        for name in ours:
            if name in theirs:
                (s1, z1), (s2, z2) = ours[name], theirs[name]
                print(f"{name[:50]:50s} {s1:12.6g} {s2:12.6g} {s1 / s2:8.4f} {z1}/{z2}")
            else:
                print(f"{name[:50]:50s} {ours[name][0]:12.6g} {'-':>12s}")
        print(f"ORT quantizes {len(theirs)} activations, cuvil {len(ours)} (cuvil: only the inputs of MatMul/Gemm/Conv)")
        if a.eval:
            px = np.load(a.eval[0]).astype(np.float32).reshape(-1, 1, 8, 8) / 16.0
            lab = np.load(a.eval[1])
            for label, path in (("fp32", a.model), ("ORT quantize_static", ort_path), ("cuvil quantize", a.cuvil_qdq)):
                print(f"accuracy {label:22s} {accuracy(path, px, lab):.2f}%")


if __name__ == "__main__":
    main()
