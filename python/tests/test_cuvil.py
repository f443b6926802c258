"""The cuvil Python package end to end: compile repository models, load, run and compare with
references (the digits example's labels, ONNX Runtime's outputs in testdata/models/refs/),
model descriptions with symbolic shapes, every input dtype, errors as exceptions with their
status codes, threads (shared model, GIL released), traces and the onnxruntime-style shim."""

import json
import os
import threading
import time

import numpy as np
import pytest

import cuvil
from conftest import source

RTOL = 1e-4
ATOL = 1e-4


def test_digits_predicts_the_sample_and_the_batch(digits):
    model = cuvil.load(digits)
    session = model.session(threads=2)
    sample = np.load(source("examples", "digits", "sample.npy"))
    (logits,) = session.run(None, {"image": sample})
    assert logits.shape == (1, 10) and logits.dtype == np.float32
    with open(source("examples", "digits", "sample_label.txt")) as f:
        assert int(np.argmax(logits)) == int(f.read().strip())
    batch = np.load(source("examples", "digits", "batch.npy"))
    labels = np.load(source("examples", "digits", "batch_labels.npy"))
    (logits,) = session.run(["logits"], {"image": batch})
    assert logits.shape == (64, 10)
    assert (np.argmax(logits, axis=1) == labels).mean() >= 0.95


def test_model_describes_inputs_and_outputs_with_symbolic_shapes(digits):
    model = cuvil.load(digits)
    assert [i.name for i in model.inputs] == ["image"]
    image = model.inputs[0]
    assert image.dtype == np.float32 and image.onnx_dtype == 1
    assert image.shape == ("batch", 1, 8, 8)
    assert image.type == "tensor(float)"
    assert "batch" in image.shape_text
    assert [(o.name, o.shape) for o in model.outputs] == [("logits", ("batch", 10))]
    assert "digits" in repr(model)


def test_load_from_bytes(digits):
    with open(digits, "rb") as f:
        model = cuvil.load(f.read())
    (logits,) = model.session(threads=1).run(None, {"image": np.zeros((3, 1, 8, 8), np.float32)})
    assert logits.shape == (3, 10)


@pytest.mark.parametrize("name", ["bert_tiny", "resnet18"])
def test_matches_onnxruntime_references(packages, name):
    refs = source("testdata", "models", "refs", name)
    path = packages(name, source("testdata", "models", f"{name}.onnx"))
    model = cuvil.load(path)
    feeds = {i.name: np.load(os.path.join(refs, f"{i.name}.npy")) for i in model.inputs}
    outputs = model.session(threads=2).run(None, feeds)
    assert len(outputs) == len(model.outputs)
    for info, got in zip(model.outputs, outputs):
        want = np.load(os.path.join(refs, f"{info.name}.npy"))
        assert got.shape == want.shape, info.name
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=info.name)


def test_output_names_select_and_order(packages):
    refs = source("testdata", "models", "refs", "bert_tiny")
    model = cuvil.load(packages("bert_tiny", source("testdata", "models", "bert_tiny.onnx")))
    feeds = {i.name: np.load(os.path.join(refs, f"{i.name}.npy")) for i in model.inputs}
    session = model.session(threads=1)
    (pooled,) = session.run(["pooler_output"], feeds)
    np.testing.assert_allclose(pooled, np.load(os.path.join(refs, "pooler_output.npy")), rtol=RTOL, atol=ATOL)
    both = session.run(["pooler_output", "last_hidden_state"], feeds)
    assert [b.shape for b in both] == [(2, 768), (2, 7, 768)]


# ---- every input dtype ----

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32,
          np.int64, np.uint32, np.uint64, np.bool_]


def transpose_model(np_dtype):
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype)) if hasattr(helper, "np_dtype_to_tensor_dtype") \
        else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(np_dtype)]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], name="transpose", perm=[1, 0])], "t",
        [helper.make_tensor_value_info("x", elem, ["n", 3])],
        [helper.make_tensor_value_info("y", elem, [3, "n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("np_dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_input_dtype(tmp_path, np_dtype):
    path = cuvil.compile(transpose_model(np_dtype), tmp_path / "t.cuvir")
    model = cuvil.load(path)
    assert model.inputs[0].dtype == np.dtype(np_dtype)
    assert model.inputs[0].shape == ("n", 3)
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 2, size=(5, 3)) if np_dtype is np.bool_ else rng.integers(0, 100, size=(5, 3)))
    x = x.astype(np_dtype)
    (y,) = model.session(threads=1).run(None, {"x": x})
    assert y.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(y, x.T)


def test_non_contiguous_inputs_are_read_correctly(digits):
    session = cuvil.load(digits).session(threads=1)
    batch = np.load(source("examples", "digits", "batch.npy"))
    (want,) = session.run(None, {"image": np.ascontiguousarray(batch[::2])})
    (got,) = session.run(None, {"image": batch[::2]})  # a strided view: copied once
    np.testing.assert_array_equal(got, want)


def test_outputs_are_new_arrays(digits):
    session = cuvil.load(digits).session(threads=1)
    image = np.load(source("examples", "digits", "sample.npy"))
    (a,) = session.run(None, {"image": image})
    keep = a.copy()
    (b,) = session.run(None, {"image": np.zeros_like(image)})
    np.testing.assert_array_equal(a, keep)  # a later run does not overwrite an earlier result
    a[...] = 0  # writable
    assert not np.shares_memory(a, b)


# ---- errors ----

def test_errors_carry_status_code_and_message(digits, tmp_path):
    session = cuvil.load(digits).session(threads=1)
    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float64)})
    assert e.value.code == 1 and e.value.code_name == "INVALID_ARGUMENT"
    assert "'image'" in e.value.message and "f64" in e.value.message

    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {})
    assert e.value.code == 1 and "'image' is not set" in e.value.message

    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {"imag": np.zeros((1, 1, 8, 8), np.float32)})
    assert e.value.code == 1 and "unknown input 'imag'" in e.value.message and "'image'" in e.value.message

    with pytest.raises(cuvil.CuvilError) as e:
        session.run(["logit"], {"image": np.zeros((1, 1, 8, 8), np.float32)})
    assert "unknown output 'logit'" in e.value.message

    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {"image": np.zeros((1, 1, 9, 8), np.float32)})
    assert e.value.code_name == "SHAPE" and "'image' dim 2" in e.value.message

    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {"image": np.zeros((1, 1, 8, 8), np.complex64)})
    assert e.value.code == 1 and "complex64" in e.value.message

    # The session is still usable after every failure.
    (logits,) = session.run(None, {"image": np.zeros((2, 1, 8, 8), np.float32)})
    assert logits.shape == (2, 10)

    missing = str(tmp_path / "missing.cuvir")
    with pytest.raises(cuvil.CuvilError) as e:
        cuvil.load(missing)
    assert e.value.code_name == "IO" and missing in e.value.message

    corrupt = tmp_path / "corrupt.cuvir"
    data = bytearray(open(digits, "rb").read())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    with pytest.raises(cuvil.CuvilError) as e:
        cuvil.load(corrupt)
    assert e.value.code_name == "INVALID_PACKAGE"

    with pytest.raises(cuvil.CuvilError) as e:
        cuvil.load(digits).session(threads=100000)
    assert e.value.code == 1 and "threads" in e.value.message


def test_compile_errors_carry_cuvilc_exit_code(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(cuvil.CompileError) as e:
        cuvil.compile(bad, tmp_path / "bad.cuvir")
    assert e.value.exit_code == 3 and str(bad) in e.value.message
    with pytest.raises(cuvil.CompileError) as e:
        cuvil.compile(source("examples", "digits", "digits.onnx"), tmp_path / "x.cuvir", layout="diagonal")
    assert e.value.exit_code == 2 and "--layout" in e.value.message
    assert not (tmp_path / "x.cuvir").exists()


def test_compile_takes_cuvilc_options(tmp_path):
    onnx_path = source("examples", "digits", "digits.onnx")
    report = tmp_path / "report.json"
    path = cuvil.compile(onnx_path, tmp_path / "d.cuvir", dim={"batch": "1:4"}, fusion=False,
                         skip_pass=["cse"], report=report)
    assert json.loads(report.read_text())
    session = cuvil.load(path).session(threads=1)
    (logits,) = session.run(None, {"image": np.zeros((4, 1, 8, 8), np.float32)})
    assert logits.shape == (4, 10)
    with pytest.raises(cuvil.CuvilError) as e:  # batch was compiled for 1..4
        session.run(None, {"image": np.zeros((5, 1, 8, 8), np.float32)})
    assert e.value.code_name == "SHAPE"


# ---- devices ----

def test_device_cuda_without_a_usable_gpu_raises_and_auto_runs_on_the_cpu(digits, monkeypatch, tmp_path):
    # The driver is opened once per process: point it at a missing file before any session asks.
    monkeypatch.setenv("CUVIL_CUDA_DRIVER", str(tmp_path / "no-libcuda.so"))
    model = cuvil.load(digits)
    with pytest.raises(cuvil.CuvilError) as e:
        model.session(threads=1, device="cuda")
    assert e.value.code_name == "UNSUPPORTED"
    assert "device cuda: " in str(e.value)
    session = model.session(threads=1, device="auto")
    assert session.device == "cpu"
    assert "CUDA" in session.device_note
    (logits,) = session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)})
    assert logits.shape == (1, 10)
    assert model.session(threads=1).device_note == ""
    with pytest.raises(ValueError):
        model.session(device="tpu")


# ---- threads ----

def test_two_threads_share_one_model(digits):
    model = cuvil.load(digits)
    batch = np.load(source("examples", "digits", "batch.npy"))
    (want,) = model.session(threads=1).run(None, {"image": batch})
    errors = []

    def worker():
        try:
            session = model.session(threads=1)
            for _ in range(20):
                (got,) = session.run(None, {"image": batch})
                np.testing.assert_array_equal(got, want)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_one_session_from_two_threads_runs_one_at_a_time(digits):
    session = cuvil.load(digits).session(threads=1)
    batch = np.load(source("examples", "digits", "batch.npy"))
    (want,) = session.run(None, {"image": batch})
    (want_one,) = session.run(None, {"image": batch[:1]})
    errors = []

    def worker(x, expect):
        try:
            for _ in range(30):
                (got,) = session.run(None, {"image": x})
                np.testing.assert_array_equal(got, expect)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(batch, want)),
               threading.Thread(target=worker, args=(batch[:1], want_one))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_the_gil_is_released_while_running(packages):
    # While one thread runs ResNet-18, the main thread keeps executing Python: with the GIL
    # held through the run it could not count at all until the run ended.
    refs = source("testdata", "models", "refs", "resnet18")
    session = cuvil.load(packages("resnet18", source("testdata", "models", "resnet18.onnx"))).session(threads=1)
    x = np.load(os.path.join(refs, "input.npy"))
    session.run(None, {"input": x})  # warm
    done = threading.Event()
    ticks_during_run = []

    def run():
        session.run(None, {"input": x})
        done.set()

    t = threading.Thread(target=run)
    ticks = 0
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.0005)
    t.join()
    ticks_during_run.append(ticks)
    assert ticks >= 3, f"the main thread ran only {ticks} times during a ResNet-18 run"


# ---- traces and metrics ----

def test_run_writes_a_trace(digits, tmp_path):
    onnx = pytest.importorskip("onnx")
    node_names = {n.name for n in onnx.load(source("examples", "digits", "digits.onnx")).graph.node}
    session = cuvil.load(digits).session(threads=2)
    path = tmp_path / "trace.json"
    (logits,) = session.run(None, {"image": np.load(source("examples", "digits", "batch.npy"))}, trace=path)
    assert logits.shape == (64, 10)
    trace = json.loads(path.read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    runs = [e for e in slices if e["name"] == "run"]
    assert len(runs) == 1
    run = runs[0]
    calls = [e for e in slices if e["tid"] == 0 and e["cat"] in ("op", "kernel")]
    assert calls
    for e in calls:
        assert e["name"] in node_names, e["name"]
        assert run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"]
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"caller", "worker 1"}
    # Without trace= nothing is written and the next trace holds only its own run.
    session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)})
    session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)}, trace=path)
    trace = json.loads(path.read_text())
    assert len([e for e in trace["traceEvents"] if e["name"] == "run"]) == 1


def test_trace_to_a_bad_path_is_an_io_error(digits, tmp_path):
    session = cuvil.load(digits).session(threads=1)
    bad = tmp_path / "no" / "such" / "trace.json"
    with pytest.raises(cuvil.CuvilError) as e:
        session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)}, trace=bad)
    assert e.value.code_name == "IO" and str(bad) in e.value.message


def test_metrics_count_runs_and_failures(digits):
    session = cuvil.load(digits).session(threads=2)
    session.run(None, {"image": np.zeros((8, 1, 8, 8), np.float32)})
    with pytest.raises(cuvil.CuvilError):
        session.run(None, {})
    m = session.metrics()
    assert m["runs"] == 2 and m["failures"] == 1 and m["threads"] == 2
    assert m["arena_peak_bytes"] > 0 and m["run_ns"] > 0
    assert cuvil.cpu_path() in ("portable", "avx2", "avx512")


# ---- onnxruntime-style shim ----

def test_inference_session_shim(digits):
    sess = cuvil.InferenceSession(digits, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("image", "tensor(float)", ["batch", 1, 8, 8])
    assert [o.name for o in sess.get_outputs()] == ["logits"]
    sample = np.load(source("examples", "digits", "sample.npy"))
    (logits,) = sess.run(None, {inp.name: sample})
    with open(source("examples", "digits", "sample_label.txt")) as f:
        assert int(np.argmax(logits)) == int(f.read().strip())


def test_the_ten_line_example_prints_the_right_class():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, source("examples", "digits", "predict.py")], capture_output=True, text=True,
                         check=True).stdout
    with open(source("examples", "digits", "sample_label.txt")) as f:
        assert out.strip() == f"predicted digit: {int(f.read().strip())}"


def test_cancel_from_another_thread(packages):
    session = cuvil.load(packages("resnet18", source("testdata", "models", "resnet18.onnx"))).session(threads=1)
    x = np.repeat(np.load(source("testdata", "models", "refs", "resnet18", "input.npy")), 4, axis=0)
    for _ in range(5):
        outcome = []

        def run():
            try:
                session.run(None, {"input": x})
                outcome.append("finished")
            except cuvil.CuvilError as e:
                outcome.append(e)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.05)
        session.cancel()
        t.join()
        if isinstance(outcome[0], cuvil.CuvilError):
            break
    assert isinstance(outcome[0], cuvil.CuvilError), "five runs finished before the cancel reached them"
    assert outcome[0].code_name == "CANCELLED" and "cancel" in outcome[0].message
    (y,) = session.run(None, {"input": x[:1]})  # usable afterwards
    assert y.shape == (1, 1000)
