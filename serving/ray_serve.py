#!/usr/bin/env python3
"""A cuvil package behind Ray Serve (docs/serving.md), with dynamic batching along the
package's symbolic batch dim and Prometheus metrics.

    python serving/ray_serve.py PACKAGE.cuvir [--port 8000] [--replicas 1] [--threads 1]
                                [--max-batch 32] [--batch-wait-ms 5] [--no-batching]
                                [--runner cuvil|onnxruntime]

HTTP on 127.0.0.1:PORT (--host to change):
  POST /   {"inputs": {"image": [[...]]}}  ->  {"outputs": {"logits": [[...]]}}
           (nested lists, or {"dtype": ..., "shape": [...], "data": [flat]} per input;
            an error is HTTP 400 {"error": message, "code": "SHAPE"})
  GET /metrics  Prometheus text: cuvil_requests_total, cuvil_request_failures_total,
           cuvil_request_latency_seconds (histogram), cuvil_batch_size (histogram) and the
           session counters (runs, failures, time in run, arena peak) per replica.

Requests that arrive together (up to --max-batch rows, waiting at most --batch-wait-ms) are
concatenated along the batch dim into one run (`serve.batch`; no recompile, no padding) and
the outputs split back; requests whose other dims differ run in separate groups.
"""
import argparse
import asyncio
import os
import signal
import time

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

import cuvil
from cuvil.serving import BatchRunner, OrtSession, ServerMetrics


def decode_input(value, dtype):
    if isinstance(value, dict):
        arr = np.asarray(value["data"], dtype=np.dtype(value.get("dtype", dtype)))
        return arr.reshape(value["shape"]) if "shape" in value else arr
    return np.asarray(value, dtype=dtype)


@serve.deployment
class CuvilDeployment:
    def __init__(self, package: str, threads: int = 1, max_batch: int = 32, batch_wait_ms: float = 5.0,
                 batching: bool = True, runner: str = "cuvil") -> None:
        if runner == "onnxruntime":  # the same deployment with ONNX Runtime running an .onnx model
            self.session = OrtSession(package, threads)
        else:
            self.session = cuvil.load(package).session(threads=threads)
        self.model = self.session.model
        self.runner = BatchRunner(self.session, max_batch=max_batch)
        self.metrics = ServerMetrics(os.path.basename(package))
        self.batching = batching
        self.dtypes = {i.name: i.dtype for i in self.model.inputs}
        self.handle_batch.set_max_batch_size(max_batch)
        self.handle_batch.set_batch_wait_timeout_s(batch_wait_ms / 1000.0)

    async def _run(self, feeds_list):
        # In a thread: the run releases the GIL, and the replica's event loop keeps taking
        # requests (the next batch) meanwhile.
        results, sizes = await asyncio.get_running_loop().run_in_executor(None, self.runner.run_batch, feeds_list)
        for rows in sizes:
            self.metrics.observe_batch(rows)
        return results

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def handle_batch(self, feeds_list):
        return await self._run(feeds_list)  # exceptions are returned per request, not raised

    async def __call__(self, request: Request):
        if request.method == "GET":
            if request.url.path.rstrip("/").endswith("/metrics"):
                return PlainTextResponse(self.metrics.render([self.session]),
                                         media_type="text/plain; version=0.0.4")
            return JSONResponse({"inputs": [[i.name, str(i.dtype), list(i.shape)] for i in self.model.inputs],
                                 "outputs": [[o.name, str(o.dtype), list(o.shape)] for o in self.model.outputs]})
        start = time.perf_counter()
        ok = False
        try:
            body = await request.json()
            feeds = {n: decode_input(v, self.dtypes.get(n)) for n, v in body["inputs"].items()}
            result = await self.handle_batch(feeds) if self.batching else (await self._run([feeds]))[0]
            if isinstance(result, Exception):
                raise result
            ok = True
            return JSONResponse({"outputs": {n: v.tolist() for n, v in result.items()}})
        except cuvil.CuvilError as e:
            return JSONResponse({"error": e.message, "code": e.code_name}, status_code=400)
        except (KeyError, ValueError, TypeError) as e:
            return JSONResponse({"error": f"bad request: {e!r}", "code": "INVALID_ARGUMENT"}, status_code=400)
        finally:
            self.metrics.observe_request(time.perf_counter() - start, ok)


def app(package: str, replicas: int = 1, threads: int = 1, max_batch: int = 32, batch_wait_ms: float = 5.0,
        batching: bool = True, runner: str = "cuvil"):
    return CuvilDeployment.options(num_replicas=replicas, ray_actor_options={"num_cpus": threads}).bind(
        os.path.abspath(package), threads, max_batch, batch_wait_ms, batching, runner)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="threads of each replica's session")
    ap.add_argument("--max-batch", type=int, default=32, help="rows per run at most")
    ap.add_argument("--batch-wait-ms", type=float, default=5.0)
    ap.add_argument("--no-batching", action="store_true")
    ap.add_argument("--runner", choices=["cuvil", "onnxruntime"], default="cuvil",
                    help="onnxruntime: PACKAGE is an .onnx model run by ONNX Runtime (for comparisons)")
    args = ap.parse_args()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(app(args.package, args.replicas, args.threads, args.max_batch, args.batch_wait_ms,
                  not args.no_batching, args.runner), name="cuvil", route_prefix="/")
    print(f"cuvil on Ray Serve: http://{args.host}:{args.port}/ (metrics: /metrics)", flush=True)
    def stop(signum, frame):
        raise KeyboardInterrupt

    # SIGINT too: a shell starting this in the background would have it ignored.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
