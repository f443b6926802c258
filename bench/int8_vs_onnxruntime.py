#!/usr/bin/env python3
"""cuvil's int8 (W8A8) packages side by side with ONNX Runtime's own quantize_static models (issue 11).

For each case, from ONE set of calibration samples (fixed seeds, batch 1, written once as a
cuvilc --calib DIR, docs/quantization.md, and fed in the same order to ONNX Runtime):

  - ONNX Runtime int8: quant_pre_process (unless --no-ort-preprocess), then quantize_static
    (QDQ format, per_channel=True, QUInt8 activations, QInt8 weights, MinMax calibration), run
    in an InferenceSession with all graph optimisations, intra-op threads = N, one inter-op
    thread, sequential execution;
  - cuvil int8: `cuvilc compile MODEL --quantize w8a8 --calib DIR` (MinMax), run by
    build/cuvil-run --bench;
  - fp32 of both, for context (ONNX Runtime on the float model, `cuvilc compile MODEL`);
  - with --with-ort-qdq, also cuvil running ONNX Runtime's QDQ model (the QDQ import path:
    `cuvilc compile ORT.qdq.onnx`).

Output check: the cosine similarity of each int8 output with ONNX Runtime's fp32 output on an
input that is not among the calibration samples (the worst output of the model is shown). The
issue's goal: cuvil int8 at least 1.2x faster than ONNX Runtime int8 (ratio ORT/cuvil >= 1.2)
at an equal or better cosine.

Timing as bench/vs_onnxruntime.py: the runtimes alternate round by round, latency = the median
of per-round medians. Never time while something else runs on the machine (it warns when the
load average says so); a run on a loaded machine only checks that everything works.

    .venv/bin/python bench/int8_vs_onnxruntime.py [--cases resnet18-b1,bert-base-s128]
        [--models-dir DIR] [--threads 1,2] [--rounds 5] [--runs 10] [--samples 16]
        [--work-dir DIR] [--with-ort-qdq]

Models: bench/models/resnet18.onnx and bench/models/bert_base.onnx (bench/export_models.py and
bench/export_bert_base.py make them; they are not in git), or --models-dir. The small
resnet18-synthetic-b1 and bert-tiny-s16 cases (testdata/models) check the script itself in a
minute. --work-dir keeps the calibration data, quantized models and packages, and reuses those
already there (a rerun only times), so keep one directory per model version and settings.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The fp32 comparison's inputs, sessions, cuvil-run timing and machine line, shared.
from vs_onnxruntime import cpu_model, cuvil_bench, inputs_for_model, ort_session  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CUVILC = os.path.join(ROOT, "build", "cuvilc")
CUVIL_RUN = os.path.join(ROOT, "build", "cuvil-run")

# name -> (model file, relative to --models-dir or, with "testdata/", to the repository;
#          symbol values; vocabulary size for *_ids inputs)
CASES = {
    "resnet18-b1": ("resnet18.onnx", {"batch": 1}, 0),
    "bert-base-s128": ("bert_base.onnx", {"batch": 1, "seq": 128}, 30522),
    # Small test models, for a quick check of the script itself.
    "resnet18-synthetic-b1": ("testdata/models/resnet18.onnx", {"batch": 1}, 0),
    "bert-tiny-s16": ("testdata/models/bert_tiny.onnx", {"batch": 1, "seq": 16}, 512),
}
DEFAULT_CASES = ["resnet18-b1", "bert-base-s128"]


def make_inputs(model, symbols, vocab, seed):
    """One batch-1 input per model input, as bench/vs_onnxruntime.py makes them."""
    return inputs_for_model(model, symbols, vocab, seed)


class SampleReader(CalibrationDataReader):
    """ONNX Runtime's view of the calibration samples: the same dicts, in the same order."""

    def __init__(self, samples):
        self.it = iter(samples)

    def get_next(self):
        return next(self.it, None)


def write_calib(samples, calib_dir):
    """docs/quantization.md's layout: DIR/<input>.npy, the samples stacked on a new leading axis."""
    os.makedirs(calib_dir, exist_ok=True)
    for name in samples[0]:
        np.save(os.path.join(calib_dir, name + ".npy"), np.stack([s[name] for s in samples]))


def ort_quantize(model_path, out_path, samples, preprocess, log):
    source = model_path
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = out_path + ".pre.onnx"
        try:
            import sympy  # noqa: F401 (symbolic shape inference needs it; the rest of the step does not)

            symbolic = True
        except ImportError:
            symbolic = False
            log("note: no sympy: quant_pre_process without symbolic shape inference")
        try:
            quant_pre_process(model_path, pre, skip_symbolic_shape=not symbolic)
            source = pre
        except Exception as e:  # noqa: BLE001 (ORT raises anything; quantize the raw model then)
            log(f"note: quant_pre_process failed ({type(e).__name__}: {e}); quantizing the model as it is")
    # MinMax keeps per sample only the ReduceMin/ReduceMax outputs it adds, so 16 samples of
    # BERT-base fit. (Its CalibMaxIntermediateOutputs option drops the samples it clears in
    # onnxruntime 1.32 instead of merging them: not used.)
    quantize_static(source, out_path, SampleReader(samples), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)


def run_logged(cmd, log):
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
    return r


def cuvil_outputs(package, input_args, outdir, names):
    subprocess.run([CUVIL_RUN, package, *input_args, "--output-dir", outdir], check=True, capture_output=True)
    return [np.load(os.path.join(outdir, n + ".npy")) for n in names]


def time_python(fn, runs):
    fn()  # warm-up, as cuvil-run's --warmup
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def cosine(got, want):
    g, w = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    den = math.sqrt(float(g @ g) * float(w @ w))
    return float(g @ w) / den if den > 0 else (1.0 if not g.any() and not w.any() else 0.0)


def worst_cosine(outputs, reference):
    return min(cosine(o, r) for o, r in zip(outputs, reference))


def count_ops(path, kinds):
    m = onnx.load(path, load_external_data=False)
    return {k: sum(1 for n in m.graph.node if n.op_type == k) for k in kinds}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated names: " + ", ".join(CASES))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round per runtime")
    ap.add_argument("--samples", type=int, default=16, help="calibration samples (batch 1, seeds 1000..)")
    ap.add_argument("--work-dir", help="keep (and reuse) calibration data, quantized models and packages here")
    ap.add_argument("--no-ort-preprocess", action="store_true",
                    help="quantize_static the model as it is, without quant_pre_process first")
    ap.add_argument("--with-ort-qdq", action="store_true",
                    help="also compile and time ONNX Runtime's QDQ model with cuvil (the QDQ import path)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each step and command")
    a = ap.parse_args()

    def log(msg):
        if a.verbose:
            print(msg, file=sys.stderr, flush=True)

    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}: the machine is not idle; the timings are not valid "
              f"(this run only checks that everything works)", file=sys.stderr)
    for tool in (CUVILC, CUVIL_RUN):
        if not os.path.exists(tool):
            sys.exit(f"{tool} is missing: build cuvil first (cmake --build build)")
    threads = [int(t) for t in a.threads.split(",")]
    work = a.work_dir or tempfile.mkdtemp(prefix="cuvil-int8-bench-")
    rows, notes = [], []
    for case in a.cases.split(","):
        if case not in CASES:
            sys.exit(f"unknown case '{case}'; known: {', '.join(CASES)}")
        rel, symbols, vocab = CASES[case]
        path = os.path.join(ROOT, rel) if rel.startswith("testdata/") else os.path.join(a.models_dir, rel)
        if not os.path.exists(path):
            print(f"note: {case}: {path} is missing (bench/export_models.py, bench/export_bert_base.py make "
                  f"it; or give --models-dir); skipped", file=sys.stderr)
            continue
        cdir = os.path.join(work, case)
        os.makedirs(cdir, exist_ok=True)
        model = onnx.load(path, load_external_data=False)

        # One set of samples for both runtimes; the timed input is another seed.
        samples = [make_inputs(model, symbols, vocab, seed=1000 + i) for i in range(a.samples)]
        calib = os.path.join(cdir, "calib")
        write_calib(samples, calib)
        inputs = make_inputs(model, symbols, vocab, seed=0)
        input_args = []
        for name, value in inputs.items():
            f = os.path.join(cdir, f"input-{name}.npy")
            np.save(f, value)
            input_args += ["--input", f"{name}={f}"]

        # Quantize and compile (reused from --work-dir when there).
        ort_q = os.path.join(cdir, "ort.qdq.onnx")
        if not os.path.exists(ort_q):
            log(f"{case}: ONNX Runtime quantize_static on {a.samples} samples")
            t = time.perf_counter()
            ort_quantize(path, ort_q, samples, not a.no_ort_preprocess, log)
            log(f"{case}: quantize_static took {time.perf_counter() - t:.1f} s")
        pkg_fp32 = os.path.join(cdir, "fp32.cuvir")
        pkg_int8 = os.path.join(cdir, "int8.cuvir")
        pkg_ortq = os.path.join(cdir, "ort-qdq.cuvir")
        if not os.path.exists(pkg_fp32):
            run_logged([CUVILC, "compile", path, "-o", pkg_fp32], log)
        if not os.path.exists(pkg_int8):
            t = time.perf_counter()
            r = run_logged([CUVILC, "compile", path, "--quantize", "w8a8", "--calib", calib,
                            "--calibration-method", "minmax", "--report", os.path.join(cdir, "int8-report.json"),
                            "-o", pkg_int8], log)
            with open(os.path.join(cdir, "int8-compile.log"), "w") as f:
                f.write(r.stderr)
            log(f"{case}: cuvilc compile --quantize w8a8 took {time.perf_counter() - t:.1f} s")
        if a.with_ort_qdq and not os.path.exists(pkg_ortq):
            run_logged([CUVILC, "compile", ort_q, "-o", pkg_ortq], log)

        # Output check against ONNX Runtime's fp32 outputs.
        fp32 = ort_session(path, threads[0])
        names = [o.name for o in fp32.get_outputs()]
        reference = fp32.run(None, inputs)
        ortq = ort_session(ort_q, threads[0])
        cos_ort = worst_cosine(ortq.run(None, inputs), reference)
        cos_cuvil = worst_cosine(cuvil_outputs(pkg_int8, input_args, os.path.join(cdir, "out-int8"), names),
                                 reference)
        cos_fp32 = worst_cosine(cuvil_outputs(pkg_fp32, input_args, os.path.join(cdir, "out-fp32"), names),
                                reference)
        cos_ortq = None
        if a.with_ort_qdq:
            cos_ortq = worst_cosine(cuvil_outputs(pkg_ortq, input_args, os.path.join(cdir, "out-ortq"), names),
                                    reference)
        q = count_ops(ort_q, ["QuantizeLinear", "DequantizeLinear"])
        notes.append(f"{case}: ORT QDQ model {q['QuantizeLinear']} QuantizeLinear / {q['DequantizeLinear']} "
                     f"DequantizeLinear; cuvil fp32 package vs ORT fp32 cosine {cos_fp32:.6f}"
                     + (f"; cuvil running ORT's QDQ model: cosine {cos_ortq:.6f}" if cos_ortq is not None else ""))

        for t in threads:
            s_fp32, s_int8 = ort_session(path, t), ort_session(ort_q, t)
            med = {k: [] for k in ("ci8", "oi8", "cf", "of", "cq")}
            for _ in range(a.rounds):
                med["ci8"].append(cuvil_bench(pkg_int8, input_args, t, a.runs))
                med["oi8"].append(time_python(lambda: s_int8.run(None, inputs), a.runs))
                med["cf"].append(cuvil_bench(pkg_fp32, input_args, t, a.runs))
                med["of"].append(time_python(lambda: s_fp32.run(None, inputs), a.runs))
                if a.with_ort_qdq:
                    med["cq"].append(cuvil_bench(pkg_ortq, input_args, t, a.runs))
            m = {k: statistics.median(v) if v else float("nan") for k, v in med.items()}
            ratio = m["oi8"] / m["ci8"]
            ok = "yes" if ratio >= 1.2 and cos_cuvil >= cos_ort else "no"
            row = (f"| {case} | {t} | {m['oi8']:.2f} | {m['ci8']:.2f} | {ratio:.2f} | {cos_ort:.6f} | "
                   f"{cos_cuvil:.6f} | {m['of']:.2f} | {m['cf']:.2f} | {ok} |")
            if a.with_ort_qdq:
                row += f" {m['cq']:.2f} |"
            rows.append(row)
            log(row)

    header = ("| model | threads | ORT int8 ms | cuvil int8 ms | ORT / cuvil (int8) | cosine ORT int8 | "
              "cosine cuvil int8 | ORT fp32 ms | cuvil fp32 ms | >= 1.2x at >= cosine |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    if a.with_ort_qdq:
        header += " cuvil on ORT's QDQ ms |"
        rule += "---:|"
    print(header)
    print(rule)
    print("\n".join(rows))
    print()
    for n in notes:
        print(f"- {n}")
    print(f"\nCosine: the worst output's cosine with ONNX Runtime's fp32 output (input seed 0; calibration: "
          f"{a.samples} samples, seeds 1000..{1000 + a.samples - 1}, MinMax for both).")
    print(f"machine: {cpu_model()}; load average at start {load:.2f}; onnxruntime {ort.__version__}; "
          f"work dir {work}")


if __name__ == "__main__":
    main()
