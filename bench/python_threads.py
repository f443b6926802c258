#!/usr/bin/env python3
"""Python threads sharing one cuvil model: throughput with 1 and 2 threads, one run at a time.

Each Python thread has its own single-threaded session of one shared Model and runs the model
back to back for --seconds; the GIL is released while a run is in progress, so on two idle
cores two threads should give about twice the runs/s of one. Also prints the same loop with
ONNX Runtime (one intra-op thread per session) when it is importable, as the peer measured in
the same run. Prints runs/s per thread count and the 2-thread / 1-thread ratio.

    build/python-venv/bin/python bench/python_threads.py [--model resnet18] [--seconds 5]

(the venv of scripts/test_python.sh, which has cuvil installed). Never run it while something
else is building: it warns when the load average says the machine is busy.
"""
import argparse
import os
import tempfile
import threading
import time

import numpy as np

import cuvil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def throughput(make_runner, threads, seconds):
    """Total runs/s of `threads` Python threads, each with its own runner, for `seconds`."""
    runners = [make_runner() for _ in range(threads)]
    for r in runners:
        r()  # warm up outside the timed window
    counts = [0] * threads
    stop = threading.Event()

    def loop(k):
        r = runners[k]
        while not stop.is_set():
            r()
            counts[k] += 1

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="testdata/models/<model>.onnx with refs/<model>/")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f}: the machine is busy, the numbers below are not to be trusted")
    onnx_path = os.path.join(REPO, "testdata", "models", f"{args.model}.onnx")
    refs = os.path.join(REPO, "testdata", "models", "refs", args.model)
    with tempfile.TemporaryDirectory() as tmp:
        model = cuvil.load(cuvil.compile(onnx_path, os.path.join(tmp, "m.cuvir")))
    feeds = {i.name: np.load(os.path.join(refs, f"{i.name}.npy")) for i in model.inputs}

    def cuvil_runner():
        s = model.session(threads=1)
        return lambda: s.run(None, feeds)

    rows = [("cuvil", cuvil_runner)]
    try:
        import onnxruntime as ort

        def ort_runner():
            o = ort.SessionOptions()
            o.intra_op_num_threads = 1
            o.inter_op_num_threads = 1
            s = ort.InferenceSession(onnx_path, o, providers=["CPUExecutionProvider"])
            return lambda: s.run(None, feeds)

        rows.append(("onnxruntime", ort_runner))
    except ImportError:
        print("(onnxruntime not importable: cuvil only)")
    print(f"{args.model}, {args.seconds:.0f} s per cell, one single-threaded session per Python thread")
    print("| runner | 1 thread runs/s | 2 threads runs/s | 2 / 1 |")
    print("|---|---|---|---|")
    for name, make in rows:
        one = throughput(make, 1, args.seconds)
        two = throughput(make, 2, args.seconds)
        print(f"| {name} | {one:.1f} | {two:.1f} | {two / one:.2f}x |")


if __name__ == "__main__":
    main()
