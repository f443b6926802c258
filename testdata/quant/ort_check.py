#!/usr/bin/env python3
"""QuantQdq.ExportRunsInOnnxRuntime's check: cuvil's exported QDQ model loads and runs in ONNX
Runtime, stays close to the float model there, and agrees with cuvil's own run of it.

  ort_check.py QDQ.onnx FLOAT.onnx IN.npy CUVIL_OUT.npy   (input name 'x', first output)
Prints 'ok' and exits 0 when: cosine(ORT QDQ, ORT float) > 0.99, and ORT's and cuvil's QDQ
outputs differ by at most one output quantization step (2% of the output range) on 99% of
elements.
"""
import sys

import numpy as np
import onnxruntime as ort


def main():
    qdq, flt, inp, cuv = sys.argv[1:5]
    x = np.load(inp)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    q = ort.InferenceSession(qdq, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    f = ort.InferenceSession(flt, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    c = np.load(cuv)
    cos = float((q * f).sum() / np.sqrt((q * q).sum() * (f * f).sum()))
    step = (f.max() - f.min()) / 50.0
    close = float(np.mean(np.abs(q - c) <= step))
    print(f"cosine(ort qdq, ort float) {cos:.6f}; |ort qdq - cuvil qdq| <= {step:.4g} on {close * 100:.2f}%")
    if cos > 0.99 and close >= 0.99:
        print("ok")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
