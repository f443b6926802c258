#!/usr/bin/env python3
"""Tree-ensemble models (ai.onnx.ml, as scikit-learn exports them through skl2onnx) in cuvil and
in ONNX Runtime, side by side.

For each model (random forest and gradient boosting, classifiers with integer labels and
regressors, trained on synthetic data with fixed seeds) and each batch size: skl2onnx writes
the .onnx (zipmap off: labels and a probability matrix), `cuvilc compile` makes the package
(batch dim 1:N), and both runtimes run the same rows. Outputs are checked first (labels equal,
scores within 1e-4 relative to ONNX Runtime's); then the runtimes alternate round by round,
latency = the median of per-round medians (ONNX Runtime in-process with all graph
optimisations, cuvil by `cuvil-run --bench`, whose p50 excludes process start). Prints
ORT / cuvil per case (> 1: cuvil faster) and the geometric mean. Never time while something
else runs on the machine.

    .venv/bin/python bench/trees_vs_onnxruntime.py [--batches 1,64,1024] [--threads 1,2]
        [--rounds 5] [--runs 200] [--work-dir DIR]

Needs scikit-learn and skl2onnx in the venv: bash scripts/make_venv.sh --with-sklearn.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_onnxruntime import ROOT, cpu_model, cuvil_bench, ort_session, time_python  # noqa: E402


def make_models(work):
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)
    from skl2onnx import to_onnx

    xc, yc = make_classification(n_samples=2000, n_features=20, n_informative=10, n_classes=3, random_state=0)
    xb, yb = make_classification(n_samples=2000, n_features=20, random_state=1)
    xr, yr = make_regression(n_samples=2000, n_features=20, random_state=2)
    models = {
        "rf-classifier-3c-100t": (RandomForestClassifier(n_estimators=100, max_depth=10, random_state=0), xc, yc),
        "gb-classifier-2c-100t": (GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=0), xb, yb),
        "rf-regressor-100t": (RandomForestRegressor(n_estimators=100, max_depth=12, random_state=0), xr, yr),
        "gb-regressor-200t": (GradientBoostingRegressor(n_estimators=200, max_depth=4, random_state=0), xr, yr),
    }
    out = {}
    for name, (model, x, y) in models.items():
        path = os.path.join(work, name + ".onnx")
        x = x.astype(np.float32)
        if not os.path.exists(path):
            model.fit(x, y)
            options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
            onx = to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
            with open(path, "wb") as f:
                f.write(onx.SerializeToString())
        out[name] = (path, x)
    return out


def check_outputs(package, onnx_path, x, work):
    rows = os.path.join(work, "check_x.npy")
    np.save(rows, x)
    outdir = os.path.join(work, "check_out")
    subprocess.run([os.path.join(ROOT, "build", "cuvil-run"), package, "--input", f"X={rows}", "--output-dir", outdir],
                   check=True, capture_output=True)
    sess = ort_session(onnx_path, 1)
    for info, want in zip(sess.get_outputs(), sess.run(None, {"X": x})):
        got = np.load(os.path.join(outdir, info.name + ".npy"))
        if want.dtype == np.int64:
            if not np.array_equal(got, want):
                return f"labels differ ({np.sum(got != want)} of {len(want)})"
        else:
            want = want.reshape(got.shape)
            err = np.max(np.abs(got - want) / (1e-3 + np.abs(want)))
            if err > 1e-4:
                return f"{info.name}: relative difference {err:.3g}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--work-dir", default=None, help="keeps the models and packages (reused by a rerun)")
    args = ap.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="cuvil-trees-")
    os.makedirs(work, exist_ok=True)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}; timings are unreliable", file=sys.stderr)
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    ratios = {t: [] for t in threads}
    print(f"{'case':34} {'thr':>3} {'ORT ms':>9} {'cuvil ms':>9} {'ORT/cuvil':>9}")
    for name, (onnx_path, data) in make_models(work).items():
        package = os.path.join(work, name + ".cuvir")
        subprocess.run([os.path.join(ROOT, "build", "cuvilc"), "compile", onnx_path, "-o", package, "--dim",
                        f"X_dim0=1:{max(batches)}"], check=True, capture_output=True)
        for b in batches:
            x = np.ascontiguousarray(data[:b])
            bad = check_outputs(package, onnx_path, x, work)
            if bad:
                print(f"{name}-b{b}: outputs differ from ONNX Runtime: {bad}")
                continue
            rows = os.path.join(work, f"{name}-b{b}.npy")
            np.save(rows, x)
            for t in threads:
                sess = ort_session(onnx_path, t)
                o, c = [], []
                for _ in range(args.rounds):
                    o.append(time_python(lambda: sess.run(None, {"X": x}), args.runs))
                    c.append(cuvil_bench(package, ["--input", f"X={rows}"], t, args.runs))
                om, cm = statistics.median(o), statistics.median(c)
                ratios[t].append(om / cm)
                print(f"{name + '-b' + str(b):34} {t:3} {om:9.4f} {cm:9.4f} {om / cm:9.2f}", flush=True)
    for t in threads:
        if ratios[t]:
            g = math.exp(sum(math.log(r) for r in ratios[t]) / len(ratios[t]))
            print(f"geometric mean ORT / cuvil at {t} thread(s): {g:.2f} over {len(ratios[t])} cases, worst {min(ratios[t]):.2f}")
    print(f"machine: {cpu_model()}; load average at start {load:.2f}; onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
