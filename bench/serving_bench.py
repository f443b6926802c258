#!/usr/bin/env python3
"""Serving throughput and latency: the Ray Serve deployment (serving/ray_serve.py) with dynamic
batching on and off, with cuvil and with ONNX Runtime as the model runner, side by side.

For each cell, starts the deployment on loopback (one replica, --threads threads), sends
requests of one row from --clients concurrent clients for --seconds, and prints requests/s and
the p50/p99 latency seen by the clients as a markdown table. ResNet-18 by default.

    build/serve-venv/bin/python bench/serving_bench.py [--model resnet18] [--clients 8]
        [--seconds 10] [--threads 2] [--max-batch 16]

The venv of serving/start_ray_serve.sh, plus `pip install onnxruntime` in it for the ONNX
Runtime column (skipped with a note when not importable). Never run it while something else
is building: it warns when the load average says the machine is busy.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "serving"))
os.environ["PYTHONPATH"] = os.path.join(REPO, "serving") + os.pathsep + os.environ.get("PYTHONPATH", "")

import cuvil  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(url, body, clients, seconds):
    """requests/s, p50 ms, p99 ms, errors of `clients` clients posting `body` back to back."""
    latencies, errors = [], []
    stop = time.perf_counter() + seconds
    data = json.dumps(body).encode()

    def client():
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as r:
                    r.read()
                latencies.append(time.perf_counter() - t0)
            except Exception as exc:  # counted, printed below
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    lat = sorted(latencies) or [float("nan")]
    return (len(latencies) / elapsed, 1e3 * statistics.median(lat), 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            len(errors))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--batch-wait-ms", type=float, default=5)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f}: the machine is busy, the numbers below are not to be trusted")
    import ray
    from ray import serve

    import ray_serve

    onnx_path = os.path.join(REPO, "testdata", "models", f"{args.model}.onnx")
    x = np.load(os.path.join(REPO, "testdata", "models", "refs", args.model, "input.npy"))[:1]
    tmp = tempfile.mkdtemp()
    package = cuvil.compile(onnx_path, os.path.join(tmp, "m.cuvir"), dim={"batch": f"1:{args.max_batch}"})
    runners = [("cuvil", package)]
    try:
        import onnxruntime  # noqa: F401
        runners.append(("onnxruntime", onnx_path))
    except ImportError:
        print("(onnxruntime not importable: no ONNX Runtime column; pip install onnxruntime)")
    port = free_port()
    ray.init(num_cpus=max(2, args.threads), include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    url = f"http://127.0.0.1:{port}/"
    body = {"inputs": {"input": x.tolist()}}
    print(f"{args.model}, 1 replica x {args.threads} threads, {args.clients} clients of 1 row, "
          f"{args.seconds:.0f} s per cell, max batch {args.max_batch}, batch wait {args.batch_wait_ms} ms")
    print("| runner | batching | requests/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|")
    for name, path in runners:
        for batching in (False, True):
            serve.run(ray_serve.app(path, threads=args.threads, max_batch=args.max_batch,
                                    batch_wait_ms=args.batch_wait_ms, batching=batching, runner=name),
                      name="cuvil", route_prefix="/")
            drive(url, body, 2, 1.0)  # warm up
            rps, p50, p99, errors = drive(url, body, args.clients, args.seconds)
            print(f"| {name} | {'on' if batching else 'off'} | {rps:.1f} | {p50:.1f} | {p99:.1f} | {errors} |",
                  flush=True)
            serve.delete("cuvil")
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
