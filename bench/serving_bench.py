#!/usr/bin/env python3
"""Serving throughput and latency: the Ray Serve and the Triton (PyTriton) deployments, each with
dynamic batching off and on, with cuvil and with ONNX Runtime as the model runner, side by side.

For each cell, starts the deployment (serving/ray_serve.py or serving/pytriton_serve.py) as a
process of its engine's venv on loopback (one replica or instance of --threads threads), sends
one-row requests from --clients concurrent clients for --seconds, and prints requests/s and the
p50/p99 latency the clients saw as one markdown table. ResNet-18 by default.

    build/serve-venv/bin/python bench/serving_bench.py [--model resnet18] [--onnx PATH]
        [--engines ray,pytriton] [--runners cuvil,onnxruntime] [--clients 8] [--seconds 10]
        [--threads 2] [--max-batch 16] [--batch-wait-ms 5]

The venvs are scripts/test_serving.sh's (build/serve-venv, build/triton-venv; --ray-python and
--triton-python point elsewhere); the ONNX Runtime rows need `pip install onnxruntime` in them
(a row says so when its server cannot start). Requests: Ray's JSON body ({"inputs": {NAME:
{"dtype", "shape", "data"}}}); Triton's KServe v2 with the input as binary data after the JSON
header (as tritonclient sends it). Never run it while something else is building: it warns when
the load average says the machine is busy.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

import cuvil  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Request:
    """One engine's request for a one-row input: url, body bytes, headers."""

    def __init__(self, url, body, headers):
        self.url, self.body, self.headers = url, body, headers

    def send(self, timeout=60):
        with urllib.request.urlopen(urllib.request.Request(self.url, data=self.body, headers=self.headers),
                                    timeout=timeout) as r:
            r.read()
            return r.status


def ray_request(port, name, x):
    body = json.dumps({"inputs": {name: {"dtype": str(x.dtype), "shape": list(x.shape),
                                         "data": x.ravel().tolist()}}}).encode()
    return Request(f"http://127.0.0.1:{port}/", body, {"Content-Type": "application/json"})


def triton_request(port, model, name, x):
    header = json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    return Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", header + x.tobytes(),
                   {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})


def drive(request, clients, seconds):
    """requests/s, p50 ms, p99 ms, errors of `clients` clients sending `request` back to back."""
    latencies, errors = [], []
    stop = time.perf_counter() + seconds

    def client():
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                request.send()
                latencies.append(time.perf_counter() - t0)
            except Exception as exc:  # counted in the table
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    lat = sorted(latencies) or [float("nan")]
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return len(latencies) / elapsed, 1e3 * statistics.median(lat), 1e3 * p99, len(errors)


class Server:
    """A deployment in its own process group; stop() sends it SIGTERM (both servers shut their
    engine down on it) and kills what is left of the group after 60 s (tritonserver may still
    be unloading when the Python process has exited), so that no cell's server overlaps the
    next cell."""

    def __init__(self, argv, ready_url, log_path, env=None, timeout=300):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode} (log: {log_path})")
            try:
                with urllib.request.urlopen(ready_url, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"not ready after {timeout} s (log: {log_path})")
            time.sleep(0.5)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.proc.poll()
            try:
                os.killpg(self.proc.pid, 0)  # anyone left in the group?
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def start_ray(python, path, runner, batching, args, log):
    port = free_port()
    argv = [python, os.path.join(REPO, "serving", "ray_serve.py"), path, "--port", str(port), "--threads",
            str(args.threads), "--max-batch", str(args.max_batch), "--batch-wait-ms", str(args.batch_wait_ms),
            "--runner", runner] + ([] if batching else ["--no-batching"])
    return Server(argv, f"http://127.0.0.1:{port}/", log), port


def start_triton(python, path, runner, batching, args, log):
    http, grpc, metrics = free_port(), free_port(), free_port()
    argv = [python, os.path.join(REPO, "serving", "pytriton_serve.py"), path, "--name", "bench", "--http-port",
            str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--threads", str(args.threads),
            "--max-batch", str(args.max_batch), "--queue-delay-us", str(int(args.batch_wait_ms * 1000)),
            "--runner", runner] + ([] if batching else ["--no-batching"])
    # Debian's python first on PATH: Triton's Python stub starts whatever python3 PATH finds.
    env = dict(os.environ, PATH=os.path.dirname(python) + os.pathsep + "/usr/bin" + os.pathsep + os.environ["PATH"])
    return Server(argv, f"http://127.0.0.1:{http}/v2/models/bench/ready", log, env), http


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--onnx", help="the ONNX model (default: bench/models/MODEL.onnx when "
                    "bench/export_models.py made it, else testdata/models/MODEL.onnx)")
    ap.add_argument("--engines", default="ray,pytriton")
    ap.add_argument("--runners", default="cuvil,onnxruntime")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--batch-wait-ms", type=float, default=5)
    ap.add_argument("--ray-python", default=os.path.join(REPO, "build", "serve-venv", "bin", "python"))
    ap.add_argument("--triton-python", default=os.path.join(REPO, "build", "triton-venv", "bin", "python"))
    args = ap.parse_args()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f}: the machine is busy, the numbers below are not to be trusted")

    onnx_path = args.onnx
    if not onnx_path:
        onnx_path = os.path.join(REPO, "bench", "models", f"{args.model}.onnx")
        if not os.path.exists(onnx_path):
            onnx_path = os.path.join(REPO, "testdata", "models", f"{args.model}.onnx")
    tmp = tempfile.mkdtemp(prefix="serving_bench.")
    package = cuvil.compile(onnx_path, os.path.join(tmp, f"{args.model}.cuvir"), dim={"batch": f"1:{args.max_batch}"})
    (info,) = cuvil.load(package).inputs  # one input (an image model)
    if not all(isinstance(d, int) for d in info.shape[1:]):
        sys.exit(f"serving_bench: input '{info.name}' {info.shape_text}: only the batch dim may be symbolic")
    x = np.random.default_rng(0).standard_normal((1,) + tuple(info.shape[1:])).astype(info.dtype)

    engines = {"ray": (args.ray_python, start_ray, lambda port: ray_request(port, info.name, x)),
               "pytriton": (args.triton_python, start_triton, lambda port: triton_request(port, "bench", info.name, x))}
    print(f"{os.path.basename(onnx_path)}, 1 replica/instance x {args.threads} threads, {args.clients} clients of "
          f"1 row, {args.seconds:g} s per cell, max batch {args.max_batch}, batch wait {args.batch_wait_ms:g} ms; "
          f"server logs in {tmp}")
    print("| engine | runner | batching | requests/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|")
    for engine in args.engines.split(","):
        python, start, make_request = engines[engine]
        for runner in args.runners.split(","):
            path = package if runner == "cuvil" else onnx_path
            for batching in (False, True):
                row = f"| {engine} | {runner} | {'on' if batching else 'off'} |"
                if not os.access(python, os.X_OK):
                    print(f"{row} no {python} (scripts/test_serving.sh makes it) | | | |", flush=True)
                    continue
                log = os.path.join(tmp, f"{engine}-{runner}-{'on' if batching else 'off'}.log")
                try:
                    server, port = start(python, path, runner, batching, args, log)
                except RuntimeError as exc:
                    print(f"{row} did not start: {exc} | | | |", flush=True)
                    continue
                try:
                    request = make_request(port)
                    drive(request, 2, 1.0)  # warm up
                    rps, p50, p99, errors = drive(request, args.clients, args.seconds)
                    print(f"{row} {rps:.1f} | {p50:.1f} | {p99:.1f} | {errors} |", flush=True)
                finally:
                    server.stop()


if __name__ == "__main__":
    main()
