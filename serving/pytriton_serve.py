#!/usr/bin/env python3
"""A cuvil package behind Triton Inference Server through PyTriton (docs/serving.md), CPU only.

    python serving/pytriton_serve.py PACKAGE.cuvir [--name digits] [--http-port 8000]
        [--grpc-port 8001] [--metrics-port 8002] [--instances 1] [--threads 1]
        [--max-batch 64] [--queue-delay-us 5000] [--no-batching] [--runner cuvil|onnxruntime]

Triton's dynamic batcher joins concurrent requests along the first dim, which must be the
package's symbolic batch dim (compile with --dim batch=1:N, N >= --max-batch): one cuvil run
per batch, no recompile and no padding. Each instance has its own session. Requests use
Triton's HTTP/gRPC protocols (KServe v2: POST /v2/models/NAME/infer); metrics are Triton's
Prometheus endpoint on --metrics-port (nv_inference_request_success/failure,
nv_inference_exec_count, nv_inference_request_duration_us, ...). Run it with a venv made
from Debian's python3 (serving/start_pytriton.sh): with another Python 3.11 first on PATH,
Triton's Python stub fails to start. `--runner onnxruntime` serves an .onnx model with ONNX
Runtime instead (cuvil.serving.OrtSession: the same binding), for comparisons
(bench/serving_bench.py).
"""
import argparse
import os

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

import cuvil
from cuvil.serving import OrtSession, batch_dim_symbol


def make_infer(session):
    names = [o.name for o in session.model.outputs]

    @batch
    def infer(**inputs):
        outputs = session.run(None, inputs)
        return dict(zip(names, outputs))

    return infer


def tensors(infos):
    # Triton's shapes leave out the batch dim; -1 for the other symbolic dims.
    return [Tensor(name=i.name, dtype=i.dtype, shape=tuple(d if isinstance(d, int) else -1 for d in i.shape[1:]))
            for i in infos]


def bind(triton: Triton, package: str, name: str, instances: int = 1, threads: int = 1, max_batch: int = 64,
         queue_delay_us: int = 5000, batching: bool = True, runner: str = "cuvil"):
    """Binds `package` as Triton model `name` and returns its model (inputs, outputs); with
    runner "onnxruntime", `package` is an .onnx model that ONNX Runtime runs."""
    if runner == "onnxruntime":
        sessions = [OrtSession(package, threads) for _ in range(instances)]
    else:
        model = cuvil.load(package)
        sessions = [model.session(threads=threads) for _ in range(instances)]
    model = sessions[0].model
    batch_dim_symbol(model)  # every input and output must start with the batch symbol
    triton.bind(
        model_name=name,
        infer_func=[make_infer(s) for s in sessions],
        inputs=tensors(model.inputs),
        outputs=tensors(model.outputs),
        config=ModelConfig(max_batch_size=max_batch,
                           batcher=DynamicBatcher(max_queue_delay_microseconds=queue_delay_us) if batching else None,
                           batching=True),
        strict=True,
    )
    return model


def start(config: TritonConfig, package: str, name: str, attempts: int = 3, **bind_args) -> Triton:
    """Starts a Triton server with `package` bound as model `name` (bind's other arguments in
    `bind_args`) and returns it, serving. PyTriton 0.7 has a start-up race with several
    instances: instance 1.. connects to instance 0's handshake socket as soon as the socket's
    file exists, which is before instance 0 listens on it, and the model then fails to load
    with ConnectionRefusedError. That failure, and only that one, is retried on a fresh server
    (the same config) up to `attempts` times; every other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        triton = Triton(config=config)
        try:
            bind(triton, package, name, **bind_args)
            triton.run()
            return triton
        except Exception as exc:
            triton.stop()
            if "handshake" not in str(exc) or attempt == attempts:
                raise
            print(f"pytriton_serve: model {name!r} failed to load in PyTriton's instance handshake race "
                  f"(attempt {attempt} of {attempts}); starting Triton again", flush=True)
    raise AssertionError("unreachable")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package")
    ap.add_argument("--name", default=None, help="model name (default: the package's file name)")
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--grpc-port", type=int, default=8001)
    ap.add_argument("--metrics-port", type=int, default=8002)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--queue-delay-us", type=int, default=5000)
    ap.add_argument("--no-batching", action="store_true")
    ap.add_argument("--runner", choices=["cuvil", "onnxruntime"], default="cuvil",
                    help="onnxruntime: PACKAGE is an .onnx model run by ONNX Runtime (for comparisons)")
    args = ap.parse_args()
    name = args.name or os.path.splitext(os.path.basename(args.package))[0].replace("-", "_")
    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1",
                          grpc_port=args.grpc_port, metrics_port=args.metrics_port)
    triton = start(config, args.package, name, instances=args.instances, threads=args.threads,
                   max_batch=args.max_batch, queue_delay_us=args.queue_delay_us, batching=not args.no_batching,
                   runner=args.runner)
    print(f"cuvil on Triton: http://127.0.0.1:{args.http_port}/v2/models/{name}/infer "
          f"(metrics: http://127.0.0.1:{args.metrics_port}/metrics)", flush=True)
    triton.serve()  # until SIGINT or the server dies; it stops the server


if __name__ == "__main__":
    main()
