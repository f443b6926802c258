"""Serving helpers shared by the server deployments (docs/serving.md): dynamic batching along a
package's symbolic batch dimension and server metrics in Prometheus text.

`BatchRunner.run_batch(requests)` takes the feeds of several requests, joins the ones whose
inputs agree in every dim but the batch dim into one run (concatenated along the batch dim:
no recompile, since the package is parametric in that symbol, and no padding), and splits each
output back by the requests' batch sizes. Requests that cannot share a run (other dims differ,
or together they pass the compiled batch range) run in separate groups. A request's failure
(bad input) is returned as its own exception and does not fail the others of its batch.

`ServerMetrics` counts requests, failures, request latency and batch sizes (histograms) and
renders them, with the session's own counters (Session.metrics), in the Prometheus text
exposition format. Neither class needs a server framework; the Ray Serve and PyTriton
deployments in serving/ wrap them.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import CuvilError, Model, Session, TensorInfo

Feeds = Mapping[str, np.ndarray]
Result = Union[Dict[str, np.ndarray], Exception]

# Latency buckets (seconds) and batch-size buckets of the histograms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def batch_dim_symbol(model: Model) -> str:
    """The symbol every input and output has as its first dim (e.g. "batch"); raises
    ValueError naming the input or output that does not."""
    symbol: Optional[str] = None
    for info in list(model.inputs) + list(model.outputs):
        first = info.shape[0] if info.shape else None
        if not isinstance(first, str):
            raise ValueError(f"'{info.name}' has shape {info.shape_text}: batching needs a symbolic "
                             "first dim on every input and output (compile with --dim batch=1:N)")
        if symbol is None:
            symbol = first
        elif first != symbol:
            raise ValueError(f"'{info.name}' has first dim '{first}', not '{symbol}' like the others: "
                             "no common batch dim")
    if symbol is None:
        raise ValueError("the model has no inputs")
    return symbol


class BatchRunner:
    """Runs batches of requests on one session (one run at a time; use a runner per
    thread or per replica). `max_batch` caps the rows of one run (0 = no cap)."""

    def __init__(self, session: Session, max_batch: int = 0) -> None:
        self.session = session
        self.model = session.model
        self.batch_symbol = batch_dim_symbol(self.model)
        self.max_batch = int(max_batch)
        self._names = [i.name for i in self.model.inputs]
        self._dtypes = {i.name: i.dtype for i in self.model.inputs}

    def _check(self, feeds: Feeds) -> Tuple[int, Tuple]:
        """A request's batch size and its grouping key (the other dims of every input)."""
        missing = [n for n in self._names if n not in feeds]
        unknown = [n for n in feeds if n not in self._dtypes]
        if missing or unknown:
            raise CuvilError(1, f"request inputs: missing {missing}, unknown {unknown} (inputs: {self._names})")
        sizes = set()
        key = []
        for n in self._names:
            a = feeds[n]
            if a.ndim == 0:
                raise CuvilError(1, f"input '{n}': a scalar has no batch dim")
            if a.dtype != self._dtypes[n]:
                raise CuvilError(1, f"input '{n}': dtype {a.dtype}, expected {self._dtypes[n]}")
            sizes.add(a.shape[0])
            key.append(a.shape[1:])
        if len(sizes) != 1:
            raise CuvilError(5, f"inputs disagree on the batch dim '{self.batch_symbol}': {sorted(sizes)}")
        return sizes.pop(), tuple(key)

    def run_batch(self, requests: Sequence[Feeds]) -> Tuple[List[Result], List[int]]:
        """One result per request (its outputs by name, or the exception it failed with) and
        the sizes of the runs made (rows per run)."""
        results: List[Optional[Result]] = [None] * len(requests)
        groups: Dict[Tuple, List[Tuple[int, int]]] = {}
        for k, feeds in enumerate(requests):
            try:
                rows, key = self._check({n: np.asarray(v) for n, v in feeds.items()})
            except Exception as exc:  # this request only
                results[k] = exc
                continue
            groups.setdefault(key, []).append((k, rows))
        run_sizes: List[int] = []
        for members in groups.values():
            # Split a group into runs of at most max_batch rows (a request is never split).
            chunk: List[Tuple[int, int]] = []
            chunks = []
            rows_in_chunk = 0
            for k, rows in members:
                if chunk and self.max_batch and rows_in_chunk + rows > self.max_batch:
                    chunks.append(chunk)
                    chunk, rows_in_chunk = [], 0
                chunk.append((k, rows))
                rows_in_chunk += rows
            if chunk:
                chunks.append(chunk)
            for chunk in chunks:
                self._run_chunk(requests, chunk, results)
                run_sizes.append(sum(rows for _, rows in chunk))
        return [r if r is not None else CuvilError(6, "internal: no result") for r in results], run_sizes

    def _run_chunk(self, requests: Sequence[Feeds], chunk: List[Tuple[int, int]],
                   results: List[Optional[Result]]) -> None:
        if len(chunk) == 1:
            feeds = {n: np.asarray(requests[chunk[0][0]][n]) for n in self._names}
        else:
            feeds = {n: np.concatenate([np.asarray(requests[k][n]) for k, _ in chunk], axis=0)
                     for n in self._names}
        try:
            outputs = self.session.run(None, feeds)
        except Exception as exc:
            if len(chunk) == 1:
                results[chunk[0][0]] = exc
                return
            # One bad request must not fail the others: run each alone to find out whose it is.
            for member in chunk:
                self._run_chunk(requests, [member], results)
            return
        names = [o.name for o in self.model.outputs]
        start = 0
        for k, rows in chunk:
            results[k] = {name: out[start:start + rows] for name, out in zip(names, outputs)}
            start += rows


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1

    def render(self, name: str, help_text: str, labels: str) -> List[str]:
        sep = "," if labels else ""
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        for b, c in zip(self.buckets, self.counts):
            lines.append(f'{name}_bucket{{{labels}{sep}le="{b:g}"}} {c}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum:.9g}" if labels else f"{name}_sum {self.sum:.9g}")
        lines.append(f"{name}_count{{{labels}}} {self.count}" if labels else f"{name}_count {self.count}")
        return lines


class ServerMetrics:
    """Thread-safe server counters rendered as Prometheus text (`render`)."""

    def __init__(self, model_name: str) -> None:
        self.labels = f'model="{model_name}"'
        self._lock = threading.Lock()
        self.requests = 0
        self.failures = 0
        self.latency = _Histogram(LATENCY_BUCKETS)
        self.batch_size = _Histogram(BATCH_BUCKETS)

    def observe_request(self, seconds: float, ok: bool) -> None:
        with self._lock:
            self.requests += 1
            self.failures += 0 if ok else 1
            self.latency.observe(seconds)

    def observe_batch(self, rows: int) -> None:
        with self._lock:
            self.batch_size.observe(rows)

    def render(self, sessions: Sequence[Session] = ()) -> str:
        with self._lock:
            lines = [
                "# HELP cuvil_requests_total Requests answered (successful or not).",
                "# TYPE cuvil_requests_total counter",
                f"cuvil_requests_total{{{self.labels}}} {self.requests}",
                "# HELP cuvil_request_failures_total Requests answered with an error.",
                "# TYPE cuvil_request_failures_total counter",
                f"cuvil_request_failures_total{{{self.labels}}} {self.failures}",
            ]
            lines += self.latency.render("cuvil_request_latency_seconds",
                                         "Time from a request's arrival to its answer.", self.labels)
            lines += self.batch_size.render("cuvil_batch_size", "Rows (batch dim) per run.", self.labels)
        runs = failures = run_ns = arena = 0
        for s in sessions:
            m = s.metrics()
            runs += m["runs"]
            failures += m["failures"]
            run_ns += m["run_ns"]
            arena = max(arena, m["arena_peak_bytes"])
        lines += [
            "# HELP cuvil_session_runs_total Runs of the model's sessions (cuvil_session_get_metrics).",
            "# TYPE cuvil_session_runs_total counter",
            f"cuvil_session_runs_total{{{self.labels}}} {runs}",
            "# HELP cuvil_session_run_failures_total Failed runs of the model's sessions.",
            "# TYPE cuvil_session_run_failures_total counter",
            f"cuvil_session_run_failures_total{{{self.labels}}} {failures}",
            "# HELP cuvil_session_run_seconds_total Time inside runs.",
            "# TYPE cuvil_session_run_seconds_total counter",
            f"cuvil_session_run_seconds_total{{{self.labels}}} {run_ns / 1e9:.9g}",
            "# HELP cuvil_session_arena_peak_bytes The largest arena a run needed.",
            "# TYPE cuvil_session_arena_peak_bytes gauge",
            f"cuvil_session_arena_peak_bytes{{{self.labels}}} {arena}",
        ]
        return "\n".join(lines) + "\n"


def now() -> float:
    return time.perf_counter()


class OrtSession:
    """ONNX Runtime behind the Session interface that BatchRunner and ServerMetrics use
    (model.inputs/outputs, run, metrics), so that a deployment can run the same model with ONNX
    Runtime as the model runner, side by side with cuvil (bench/serving_bench.py). Needs the
    onnxruntime package; `threads` is its intra-op thread count."""

    _DTYPES = {"tensor(float)": (np.float32, 1), "tensor(double)": (np.float64, 11),
               "tensor(int64)": (np.int64, 7), "tensor(int32)": (np.int32, 6), "tensor(bool)": (np.bool_, 9),
               "tensor(uint8)": (np.uint8, 2), "tensor(int8)": (np.int8, 3), "tensor(float16)": (np.float16, 10)}

    def __init__(self, onnx_path: str, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._s = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()
        self._runs = self._failures = self._run_ns = 0

        class _Model:
            pass

        self.model = _Model()
        self.model.inputs = [self._info(a) for a in self._s.get_inputs()]
        self.model.outputs = [self._info(a) for a in self._s.get_outputs()]

    def _info(self, arg) -> TensorInfo:
        np_dtype, code = self._DTYPES.get(arg.type, (None, 0))
        shape = tuple(d if isinstance(d, int) else str(d) for d in arg.shape)
        return TensorInfo(arg.name, None if np_dtype is None else np.dtype(np_dtype), code, shape, str(list(shape)))

    def run(self, output_names, feeds):
        start = time.perf_counter_ns()
        ok = False
        try:
            with self._lock:
                out = self._s.run(output_names, dict(feeds))
            ok = True
            return out
        finally:
            self._runs += 1
            self._failures += 0 if ok else 1
            self._run_ns += time.perf_counter_ns() - start

    def metrics(self) -> Dict[str, int]:
        return {"runs": self._runs, "failures": self._failures, "run_ns": self._run_ns, "arena_bytes": 0,
                "arena_peak_bytes": 0, "threads": 0}
