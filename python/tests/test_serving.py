"""Serving (docs/serving.md): cuvil.serving's batching along the symbolic batch dim and its
Prometheus text, then the Ray Serve (serving/ray_serve.py) and PyTriton
(serving/pytriton_serve.py) deployments on loopback with 8 concurrent clients of random batch
sizes, every answer checked against a direct run.

The engine tests (marked serving_engine) need ray or pytriton: scripts/test_serving.sh (the
`serving` stage of scripts/test.sh) runs them in venvs with the engine and sets
CUVIL_SERVING_REQUIRE, so a missing engine fails there; elsewhere (a developer's venv) they
are skipped where the engine is not importable, and scripts/test_python.sh leaves them out."""

import importlib
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import cuvil
from conftest import SOURCE_DIR, source
from cuvil.serving import BatchRunner, ServerMetrics, batch_dim_symbol


def digit_batch(rows, seed=0):
    batch = np.load(source("examples", "digits", "batch.npy"))
    idx = np.random.default_rng(seed).integers(0, len(batch), size=rows)
    return batch[idx]


def test_batch_runner_joins_requests_and_splits_outputs(digits):
    model = cuvil.load(digits)
    direct = model.session(threads=1)
    runner = BatchRunner(model.session(threads=1), max_batch=0)
    assert runner.batch_symbol == "batch"
    requests = [{"image": digit_batch(n, seed=n)} for n in (1, 3, 7, 2)]
    results, sizes = runner.run_batch(requests)
    assert sizes == [13], "one run for requests of the same other dims"
    for req, res in zip(requests, results):
        (want,) = direct.run(None, req)
        np.testing.assert_allclose(res["logits"], want, rtol=1e-5, atol=1e-6)


def test_batch_runner_caps_rows_and_isolates_bad_requests(digits):
    model = cuvil.load(digits)
    direct = model.session(threads=1)
    runner = BatchRunner(model.session(threads=1), max_batch=4)
    bad_dtype = {"image": digit_batch(2).astype(np.float64)}
    bad_shape = {"image": np.zeros((2, 1, 9, 8), np.float32)}  # another group, fails in the run
    requests = [{"image": digit_batch(3, 1)}, bad_dtype, {"image": digit_batch(2, 2)}, bad_shape,
                {"image": digit_batch(1, 3)}]
    results, sizes = runner.run_batch(requests)
    assert sorted(sizes) == [2, 3, 3], sizes  # [3] [2, 1] in the good group, [2] alone
    assert isinstance(results[1], cuvil.CuvilError) and "float64" in results[1].message
    assert isinstance(results[3], cuvil.CuvilError) and results[3].code_name == "SHAPE"
    for k in (0, 2, 4):
        (want,) = direct.run(None, requests[k])
        np.testing.assert_allclose(results[k]["logits"], want, rtol=1e-5, atol=1e-6)


def test_batch_runner_groups_by_other_dims(packages):
    refs = source("testdata", "models", "refs", "bert_tiny")
    model = cuvil.load(packages("bert_tiny", source("testdata", "models", "bert_tiny.onnx")))
    feeds = {i.name: np.load(os.path.join(refs, f"{i.name}.npy")) for i in model.inputs}
    short = {n: v[:, :4] for n, v in feeds.items()}
    direct = model.session(threads=1)
    runner = BatchRunner(model.session(threads=1))
    requests = [feeds, short, {n: v[:1] for n, v in feeds.items()}]
    results, sizes = runner.run_batch(requests)
    assert sorted(sizes) == [2, 3]
    for req, res in zip(requests, results):
        want = direct.run(None, req)
        for name, w in zip([o.name for o in model.outputs], want):
            np.testing.assert_allclose(res[name], w, rtol=1e-4, atol=1e-4)


def test_batching_needs_a_symbolic_batch_dim(tmp_path):
    path = cuvil.compile(source("examples", "digits", "digits.onnx"), tmp_path / "d.cuvir", dim={"batch": 4})
    with pytest.raises(ValueError, match="'image' has shape"):
        batch_dim_symbol(cuvil.load(path))


def test_metrics_are_prometheus_text(digits):
    session = cuvil.load(digits).session(threads=1)
    session.run(None, {"image": digit_batch(2)})
    m = ServerMetrics("digits")
    m.observe_request(0.003, True)
    m.observe_request(0.2, False)
    m.observe_batch(5)
    text = m.render([session])
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert lines['cuvil_requests_total{model="digits"}'] == "2"
    assert lines['cuvil_request_failures_total{model="digits"}'] == "1"
    assert lines['cuvil_request_latency_seconds_bucket{model="digits",le="0.005"}'] == "1"
    assert lines['cuvil_request_latency_seconds_bucket{model="digits",le="+Inf"}'] == "2"
    assert lines['cuvil_batch_size_bucket{model="digits",le="4"}'] == "0"
    assert lines['cuvil_batch_size_bucket{model="digits",le="8"}'] == "1"
    assert lines['cuvil_session_runs_total{model="digits"}'] == "1"
    assert "# TYPE cuvil_request_latency_seconds histogram" in text


# ---- Ray Serve ----

def import_engine(module):
    """`module`, or a skip where it is not installed, except where CUVIL_SERVING_REQUIRE names
    its top package (scripts/test_serving.sh): there the ImportError fails the test."""
    if module.split(".")[0] in os.environ.get("CUVIL_SERVING_REQUIRE", "").split(","):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, payload, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory):
    ray = import_engine("ray")
    serve = import_engine("ray.serve")
    serving_dir = os.path.join(SOURCE_DIR, "serving")
    sys.path.insert(0, serving_dir)
    os.environ["PYTHONPATH"] = serving_dir + os.pathsep + os.environ.get("PYTHONPATH", "")
    import ray_serve

    package = cuvil.compile(source("examples", "digits", "digits.onnx"),
                            str(tmp_path_factory.mktemp("serve") / "digits.cuvir"), dim={"batch": "1:256"})
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ray_serve.app(package, max_batch=64, batch_wait_ms=10), name="cuvil", route_prefix="/")
    yield f"http://127.0.0.1:{port}", package
    serve.shutdown()
    ray.shutdown()


@pytest.mark.serving_engine
def test_ray_serve_answers_concurrent_clients(ray_server):
    url, package = ray_server
    direct = cuvil.load(package).session(threads=1)
    errors = []

    def client(k):
        rnd = random.Random(k)
        try:
            for j in range(5):
                x = digit_batch(rnd.randint(1, 8), seed=100 * k + j)
                status, body = post(url + "/", {"inputs": {"image": x.tolist()}})
                assert status == 200, body
                (want,) = direct.run(None, {"image": x})
                np.testing.assert_allclose(np.asarray(body["outputs"]["logits"], np.float32), want,
                                           rtol=1e-5, atol=1e-5)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    status, body = post(url + "/", {"inputs": {"image": np.zeros((1, 1, 9, 8)).tolist()}})
    assert status == 400 and body["code"] == "SHAPE"
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert lines['cuvil_requests_total{model="digits.cuvir"}'] == "41"
    assert lines['cuvil_request_failures_total{model="digits.cuvir"}'] == "1"
    runs = int(lines['cuvil_batch_size_count{model="digits.cuvir"}'])
    assert 1 <= runs <= 41


# ---- Triton Inference Server (PyTriton) ----

@pytest.fixture(scope="module")
def triton_server(tmp_path_factory):
    import_engine("pytriton")
    from pytriton.triton import TritonConfig

    sys.path.insert(0, os.path.join(SOURCE_DIR, "serving"))
    import pytriton_serve

    package = cuvil.compile(source("examples", "digits", "digits.onnx"),
                            str(tmp_path_factory.mktemp("triton") / "digits.cuvir"), dim={"batch": "1:256"})
    http, grpc, metrics = free_port(), free_port(), free_port()
    config = TritonConfig(http_address="127.0.0.1", http_port=http, grpc_address="127.0.0.1", grpc_port=grpc,
                          metrics_port=metrics)
    triton = pytriton_serve.start(config, package, "digits", instances=2, max_batch=64, queue_delay_us=10000)
    yield f"http://127.0.0.1:{http}", f"http://127.0.0.1:{metrics}", package
    triton.stop()


@pytest.mark.serving_engine
def test_triton_answers_concurrent_clients(triton_server):
    url, metrics_url, package = triton_server
    direct = cuvil.load(package).session(threads=1)
    errors = []

    def client(k):
        rnd = random.Random(k)
        try:
            for j in range(5):
                x = digit_batch(rnd.randint(1, 8), seed=100 * k + j)
                status, body = post(url + "/v2/models/digits/infer", {"inputs": [
                    {"name": "image", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]})
                assert status == 200, body
                (out,) = body["outputs"]
                got = np.asarray(out["data"], np.float32).reshape(out["shape"])
                (want,) = direct.run(None, {"image": x})
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with urllib.request.urlopen(metrics_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert 'nv_inference_request_success{model="digits"' in text
