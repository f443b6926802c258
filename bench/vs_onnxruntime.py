#!/usr/bin/env python3
"""cuvil side by side with ONNX Runtime (and OpenVINO when installed), in one run.

For each case: compile the model with build/cuvilc, run cuvil (build/cuvil-run) and ONNX Runtime
on the same inputs and check that the outputs agree, then time both at each thread count,
alternating them round by round. Latency = the median of per-round medians. Prints a markdown
table with the ratio ORT latency / cuvil latency (> 1: cuvil is faster) and its geometric mean
per thread count. ONNX Runtime runs with intra-op threads = N, one inter-op thread,
sequential execution, all graph optimisations and its default spinning.

Needs the venv of scripts/make_venv.sh (onnxruntime, numpy; openvino with --with-openvino):

    .venv/bin/python bench/vs_onnxruntime.py [--cases NAME,...] [--threads 1,2] [--rounds 5]

Models come from bench/models/ (made by bench/export_models.py with Debian's torch; nothing there
goes into git) or from the repository (testdata/, examples/). A case whose file is missing is
skipped with a note. Never run it while something else is building: it warns when the load
average says the machine is busy.
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
import onnxruntime as ort

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODELS = os.path.join(ROOT, "bench", "models")

# name -> (model file, symbol values, vocabulary size for *_ids inputs)
CASES = {
    "digits-b1": ("examples/digits/digits.onnx", {"batch": 1}, 0),
    "resnet18-b1": ("bench/models/resnet18.onnx", {"batch": 1}, 0),
    "resnet18-b8": ("bench/models/resnet18.onnx", {"batch": 8}, 0),
    "mobilenetv2-b1": ("bench/models/mobilenet_v2.onnx", {"batch": 1}, 0),
    "bert-base-s16": ("bench/models/bert_base.onnx", {"batch": 1, "seq": 16}, 30522),
    "bert-base-s128": ("bench/models/bert_base.onnx", {"batch": 1, "seq": 128}, 30522),
    "bert-base-s384": ("bench/models/bert_base.onnx", {"batch": 1, "seq": 384}, 30522),
    "gpt2-small-s1": ("bench/models/gpt2_small.onnx", {"batch": 1, "seq": 1}, 50257),
    "gpt2-small-s128": ("bench/models/gpt2_small.onnx", {"batch": 1, "seq": 128}, 50257),
    "llama-50m-s1": ("bench/models/llama_50m.onnx", {"batch": 1, "seq": 1}, 32000),
    "llama-50m-s128": ("bench/models/llama_50m.onnx", {"batch": 1, "seq": 128}, 32000),
    # Small test models, for a quick check of the script itself.
    "bert-tiny-s16": ("testdata/models/bert_tiny.onnx", {"batch": 1, "seq": 16}, 512),
    "resnet18-synthetic-b1": ("testdata/models/resnet18.onnx", {"batch": 1}, 0),
}
DEFAULT_CASES = [c for c in CASES if not c.startswith(("bert-tiny", "resnet18-synthetic"))]

NP_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def make_inputs(path, symbols, vocab, seed=0):
    import onnx

    return inputs_for_model(onnx.load(path, load_external_data=False), symbols, vocab, seed, where=f"{path}: ")


def inputs_for_model(model, symbols, vocab, seed, where=""):
    """One input per model input (bench/int8_vs_onnxruntime.py uses it too): float: standard
    normal; *mask*: ones; *type*: zeros; *position*: 0..seq-1; other integers: ids below vocab."""
    init = {i.name for i in model.graph.initializer}
    rng = np.random.RandomState(seed)
    out = {}
    for inp in model.graph.input:
        if inp.name in init:
            continue
        t = inp.type.tensor_type
        shape = []
        for d in t.shape.dim:
            if d.dim_param:
                if d.dim_param not in symbols:
                    sys.exit(f"{where}input '{inp.name}' has dim '{d.dim_param}'; give it in CASES")
                shape.append(symbols[d.dim_param])
            else:
                shape.append(d.dim_value)
        dtype = NP_TYPES.get(t.elem_type)
        if dtype is None:
            sys.exit(f"{where}input '{inp.name}' has element type {t.elem_type}, not handled here")
        name = inp.name.lower()
        if dtype in (np.float32, np.float16, np.float64):
            out[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in name:
            out[inp.name] = np.ones(shape, dtype)
        elif "type" in name:
            out[inp.name] = np.zeros(shape, dtype)
        elif "position" in name:
            out[inp.name] = np.broadcast_to(np.arange(shape[-1]), shape).astype(dtype)
        else:
            out[inp.name] = rng.randint(0, max(vocab, 2), shape).astype(dtype)
    return out


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def openvino_model(path, threads):
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    # float32 like the others: OpenVINO may otherwise pick bf16 on CPUs that have it.
    return core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                                            "INFERENCE_PRECISION_HINT": "f32"})


def time_python(fn, runs):
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def cuvil_bench(package, input_args, threads, runs):
    out = subprocess.run([os.path.join(ROOT, "build", "cuvil-run"), package, *input_args, "--threads", str(threads),
                          "--bench", str(runs), "--warmup", "2"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines() + out.stderr.splitlines():
        if line.startswith("bench:"):
            return float(line.split("p50 ")[1].split(" ms")[0])
    raise RuntimeError("cuvil-run printed no bench line:\n" + out.stdout + out.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated names: " + ", ".join(CASES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round per runtime")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f}: the machine is not idle; ratios will be noisy", file=sys.stderr)
    threads = [int(t) for t in a.threads.split(",")]
    rows, ratios = [], {t: [] for t in threads}
    tmp = tempfile.mkdtemp(prefix="cuvil-bench-")
    for case in a.cases.split(","):
        rel, symbols, vocab = CASES[case]
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            print(f"note: {case}: {rel} is missing (bench/export_models.py makes it); skipped", file=sys.stderr)
            continue
        package = os.path.join(tmp, os.path.basename(rel) + ".cuvir")
        if not os.path.exists(package):
            subprocess.run([os.path.join(ROOT, "build", "cuvilc"), "compile", path, "-o", package], check=True,
                           capture_output=True)
        inputs = make_inputs(path, symbols, vocab)
        input_args = []
        for name, value in inputs.items():
            f = os.path.join(tmp, f"{case}-{name}.npy")
            np.save(f, value)
            input_args += ["--input", f"{name}={f}"]
        # Outputs agree?
        outdir = os.path.join(tmp, case + "-out")
        subprocess.run([os.path.join(ROOT, "build", "cuvil-run"), package, *input_args, "--output-dir", outdir],
                       check=True, capture_output=True)
        sess = ort_session(path, threads[0])
        expected = sess.run(None, inputs)
        worst = 0.0
        for meta, want in zip(sess.get_outputs(), expected):
            got = np.load(os.path.join(outdir, meta.name + ".npy"))
            scale = max(1.0, float(np.abs(want).max()))
            worst = max(worst, float(np.abs(got.astype(np.float64) - want).max()) / scale)
        agree = "yes" if worst < 1e-3 else f"NO ({worst:.2e})"
        for t in threads:
            sess = ort_session(path, t)
            ov = openvino_model(path, t)
            c_med, o_med, v_med = [], [], []
            for _ in range(a.rounds):
                c_med.append(cuvil_bench(package, input_args, t, a.runs))
                o_med.append(time_python(lambda: sess.run(None, inputs), a.runs))
                if ov is not None:
                    v_med.append(time_python(lambda: ov(inputs), a.runs))
            c, o = statistics.median(c_med), statistics.median(o_med)
            v = statistics.median(v_med) if v_med else float("nan")
            ratios[t].append(o / c)
            rows.append(f"| {case} | {t} | {c:.2f} | {o:.2f} | {v:.2f} | {o / c:.2f} | {agree} |")
    print("| case | threads | cuvil ms | ORT ms | OpenVINO ms | ORT / cuvil | outputs agree (rel 1e-3) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    for t in threads:
        if ratios[t]:
            g = math.exp(sum(math.log(r) for r in ratios[t]) / len(ratios[t]))
            print(f"\ngeometric mean ORT / cuvil at {t} thread(s): {g:.2f} over {len(ratios[t])} cases, "
                  f"worst {min(ratios[t]):.2f}")
    print(f"\nmachine: {cpu_model()}; load average at start {load:.2f}; onnxruntime {ort.__version__}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
