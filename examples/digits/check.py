#!/usr/bin/env python3
"""Check a compiled digits package against the bundled test batch.

Usage:
  /usr/bin/python3 examples/digits/check.py PACKAGE.cuvir [--cuvil-run PATH]
      [--min-accuracy 0.95] [--max-diff 1e-3]

Runs `cuvil-run PACKAGE --input image=batch.npy --output-dir DIR`, reads
DIR/logits.npy and prints the accuracy against batch_labels.npy. If torch and
onnx are importable, also runs digits.onnx through a small torch re-implementation
of the graph and prints the max abs difference of the logits.
Exits 0 when accuracy >= --min-accuracy (and, if compared, diff <= --max-diff),
1 otherwise, 2 if cuvil-run failed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def default_runner():
    for cand in (os.environ.get("CUVIL_RUN"),
                 os.path.join(REPO, "build-lead", "cuvil-run"),
                 os.path.join(REPO, "build", "cuvil-run"),
                 shutil.which("cuvil-run")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return "cuvil-run"


def reference_logits(onnx_path, batch):
    """Logits from the ONNX file's weights evaluated with torch, or None."""
    try:
        import onnx
        from onnx import numpy_helper
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    model = onnx.load(onnx_path)
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
         for t in model.graph.initializer}
    env = {model.graph.input[0].name: torch.from_numpy(batch)}
    for node in model.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        ins = [env[n] if n in env else w[n] for n in node.input if n]
        op = node.op_type
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            assert pads[:2] == pads[2:], "asymmetric pads"
            y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                         stride=a.get("strides", 1), padding=list(pads[:2]),
                         dilation=a.get("dilations", 1), groups=a.get("group", 1))
        elif op == "Relu":
            y = F.relu(ins[0])
        elif op == "MaxPool":
            pads = a.get("pads", [0, 0, 0, 0])
            y = F.max_pool2d(ins[0], a["kernel_shape"], a.get("strides"),
                             padding=list(pads[:2]))
        elif op == "Flatten":
            y = torch.flatten(ins[0], a.get("axis", 1))
        elif op == "Gemm":
            x, b = ins[0], ins[1]
            if a.get("transA", 0):
                x = x.t()
            if a.get("transB", 0):
                b = b.t()
            y = a.get("alpha", 1.0) * (x @ b)
            if len(ins) > 2:
                y = y + a.get("beta", 1.0) * ins[2]
        else:
            print(f"reference: op {op} not handled; skipping torch comparison")
            return None
        env[node.output[0]] = y
    return env[model.graph.output[0].name].detach().numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("package", help="compiled digits package (.cuvir)")
    ap.add_argument("--cuvil-run", default=default_runner())
    ap.add_argument("--batch", default=os.path.join(HERE, "batch.npy"))
    ap.add_argument("--labels", default=os.path.join(HERE, "batch_labels.npy"))
    ap.add_argument("--onnx", default=os.path.join(HERE, "digits.onnx"))
    ap.add_argument("--min-accuracy", type=float, default=0.95)
    ap.add_argument("--max-diff", type=float, default=1e-3)
    args = ap.parse_args()

    batch = np.load(args.batch)
    labels = np.load(args.labels)
    with tempfile.TemporaryDirectory(prefix="cuvil-digits-") as out:
        cmd = [args.cuvil_run, args.package, "--input", f"image={args.batch}",
               "--output-dir", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"cuvil-run failed (exit {proc.returncode}): {' '.join(cmd)}")
            print(proc.stdout + proc.stderr)
            return 2
        logits = np.load(os.path.join(out, "logits.npy"))

    if logits.shape != (len(labels), 10):
        print(f"unexpected logits shape {logits.shape}, want {(len(labels), 10)}")
        return 1
    pred = logits.argmax(axis=1)
    acc = float((pred == labels).mean())
    print(f"cuvil accuracy: {acc * 100:.2f}% ({int((pred == labels).sum())}/{len(labels)})")
    ok = acc >= args.min_accuracy

    ref = reference_logits(args.onnx, batch)
    if ref is not None:
        diff = float(np.abs(ref - logits).max())
        same = int((ref.argmax(axis=1) == pred).sum())
        print(f"max abs diff vs torch: {diff:.3g}  (argmax agrees on {same}/{len(labels)})")
        ok = ok and diff <= args.max_diff
    else:
        print("torch/onnx not available; skipped the logits comparison")
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
