"""Exports testdata/models/loop_append.onnx: a scripted torch module with a data-dependent
loop, an If in its body and a Python list appended to and stacked (torch 1.13 exports it as
Loop + If + SequenceEmpty/SequenceInsert/ConcatFromSequence). Also writes one input and the
outputs ONNX Runtime computes for it (loop_append_x.npy, loop_append_h.npy,
loop_append_hs.npy), which tests/cli_run_test.cpp compares cuvil against.

  /usr/bin/python3 testdata/scripts/export_loop_append.py            # Debian's torch 1.13
  .venv/bin/python testdata/scripts/export_loop_append.py --reference  # needs onnxruntime
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
MODEL = os.path.join(MODELS, "loop_append.onnx")


def export():
    import torch

    class LoopAppend(torch.nn.Module):
        def forward(self, x):
            h = torch.zeros_like(x[0])
            outs = []
            for i in range(x.shape[0]):
                if bool(h.sum() > 3.0):
                    h = torch.tanh(h * 0.5 + x[i])
                else:
                    h = torch.relu(h + x[i] * 2.0)
                outs.append(h)
            return h, torch.stack(outs)

    m = torch.jit.script(LoopAppend())
    torch.onnx.export(m, (torch.randn(5, 4),), MODEL, input_names=["x"], output_names=["h", "hs"],
                      dynamic_axes={"x": {0: "T", 1: "F"}}, opset_version=13)


def reference():
    import onnxruntime as ort

    x = (np.random.default_rng(7).standard_normal((6, 5)) * 3).astype(np.float32)
    h, hs = ort.InferenceSession(MODEL).run(None, {"x": x})
    np.save(os.path.join(MODELS, "loop_append_x.npy"), x)
    np.save(os.path.join(MODELS, "loop_append_h.npy"), h)
    np.save(os.path.join(MODELS, "loop_append_hs.npy"), hs)


if __name__ == "__main__":
    if "--reference" in sys.argv:
        reference()
    else:
        export()
