"""Counts how many of the onnx wheel's applicable backend node cases ONNX Runtime passes, with the
ConformanceWheel rule (tests/conformance_wheel_test.cpp): applicable when every graph input and
output is a tensor of an ONNX 1.12 type other than string and no node (in any subgraph) is a
training or random op; passed when every test_data_set's outputs match with rtol 1e-3 and atol 1e-7
for floats (NaN equals NaN, infinities must match), exactly for everything else, same dtype and
shape. Run in the venv tests/onnx_wheel/make_cases.sh makes (onnxruntime from PyPI):
  BUILD/onnx-wheel-venv/bin/python tests/onnx_wheel/count_ort.py BUILD/onnx-wheel-cases/node [--list FILE]
--list writes the names of the passing cases."""
import argparse
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}


def onnx112_tensor_type(t):
    if not t.HasField("tensor_type"):
        return False
    e = t.tensor_type.elem_type
    return 1 <= e <= 16 and e != onnx.TensorProto.STRING


def excluded_graph(g):
    for n in g.node:
        if n.domain == "ai.onnx.preview.training":
            return "training"
        if n.domain in ("", "ai.onnx") and (
            n.op_type in RANDOM or (n.op_type == "Dropout" and len(n.input) > 2 and n.input[2])
        ):
            return "random"
        for a in n.attribute:
            if a.HasField("g"):
                why = excluded_graph(a.g)
                if why:
                    return why
            for sub in a.graphs:
                why = excluded_graph(sub)
                if why:
                    return why
    return ""


def excluded(m):
    if not all(onnx112_tensor_type(v.type) for v in m.graph.input):
        return "input type"
    if not all(onnx112_tensor_type(v.type) for v in m.graph.output):
        return "output type"
    return excluded_graph(m.graph)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def compare(actual, expected):
    actual = np.asarray(actual)
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} vs expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape} vs expected {expected.shape}"
    if expected.dtype.kind != "f" and expected.dtype.kind != "c" and "bfloat16" not in str(expected.dtype):
        return "" if np.array_equal(actual, expected) else "values differ"
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    both_nan = np.isnan(a) & np.isnan(e)
    inf = np.isinf(a) | np.isinf(e)
    close = np.abs(a - e) <= 1e-7 + 1e-3 * np.abs(e)
    ok = both_nan | np.where(inf, a == e, close)
    return "" if ok.all() else f"element {int(np.argmin(ok))} differs"


def run_case(d):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), opts, providers=["CPUExecutionProvider"])
    ins = sess.get_inputs()
    sets = sorted(glob.glob(os.path.join(d, "test_data_set_*")))
    if not sets:
        return "no test data"
    for s in sets:
        feeds = {}
        for i, v in enumerate(ins):
            feeds[v.name] = read_pb(os.path.join(s, f"input_{i}.pb"))
        outs = sess.run(None, feeds)
        for o, got in enumerate(outs):
            why = compare(got, read_pb(os.path.join(s, f"output_{o}.pb")))
            if why:
                return f"{os.path.basename(s)} output {o}: {why}"
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--list")
    args = ap.parse_args()
    passed, failed, skipped, names = 0, 0, 0, []
    for d in sorted(glob.glob(os.path.join(args.cases, "*"))):
        model = os.path.join(d, "model.onnx")
        if not os.path.exists(model):
            continue
        if excluded(onnx.load(model, load_external_data=False)):
            skipped += 1
            continue
        try:
            why = run_case(d)
        except Exception as e:  # noqa: BLE001 - a refusal is a failure, as for cuvil
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if why:
            failed += 1
            print(f"FAIL {os.path.basename(d)}: {why}", file=sys.stderr)
        else:
            passed += 1
            names.append(os.path.basename(d))
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}: {passed} passed, {failed} failed over "
          f"{passed + failed} applicable cases ({skipped} not applicable)")
    if args.list:
        with open(args.list, "w") as f:
            f.write("".join(n + "\n" for n in names))


if __name__ == "__main__":
    main()
