"""cuvil: compile ONNX models ahead of time into verified .cuvir packages and run them.

    import cuvil, numpy as np
    cuvil.compile("model.onnx", "model.cuvir", dim={"batch": "1:64"})
    model = cuvil.load("model.cuvir")
    session = model.session(threads=2)
    (logits,) = session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)})

The runtime is libcuvil through its C API (module cuvil._cuvil); compiling runs the cuvilc
shipped in this package (cuvil/bin/cuvilc) in a child process, so the compiler's protobuf
never meets the one of the `onnx` package in this process, and a compile takes cuvilc's
options exactly. Names follow onnxruntime.InferenceSession where that makes sense; the
`InferenceSession` class below is a drop-in for the common calls. docs/python.md.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _cuvil
from ._errors import CompileError, CuvilError

__all__ = [
    "CompileError",
    "CuvilError",
    "InferenceSession",
    "Model",
    "NodeArg",
    "Session",
    "TensorInfo",
    "compile",
    "cpu_path",
    "cuvilc_path",
    "load",
]

__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))

# ONNX TensorProto.DataType numbers (the C API's dtypes) and their NumPy types.
_NUMPY_OF_ONNX: Dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
}
_ONNX_OF_NUMPY: Dict[np.dtype, int] = {v: k for k, v in _NUMPY_OF_ONNX.items()}

# onnxruntime's type strings (NodeArg.type), for the InferenceSession shim.
_ORT_TYPE: Dict[int, str] = {
    1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 4: "tensor(uint16)",
    5: "tensor(int16)", 6: "tensor(int32)", 7: "tensor(int64)", 9: "tensor(bool)",
    10: "tensor(float16)", 11: "tensor(double)", 12: "tensor(uint32)", 13: "tensor(uint64)",
    16: "tensor(bfloat16)",
}


def cpu_path() -> str:
    """The CPU kernel path this process runs: "portable", "avx2" or "avx512"."""
    return _cuvil.cpu_path()


def cuvilc_path() -> str:
    """The cuvilc that `compile` runs: $CUVILC if set, else the one in this package."""
    return os.environ.get("CUVILC") or os.path.join(_HERE, "bin", "cuvilc")


def _split_shape(text: str) -> List[str]:
    """"[batch, seq*2, 768]" -> ["batch", "seq*2", "768"] (commas inside parentheses kept)."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    parts: List[str] = []
    depth, cur = 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        depth += ch in "(["
        depth -= ch in ")]"
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a package. `shape` has an int per fixed dim and the symbolic
    expression (a str such as "batch") per symbolic one; `shape_text` is the runtime's
    spelling ("[batch, 10]"); `dtype` the NumPy dtype (None for dtypes NumPy lacks, such as
    bfloat16) and `onnx_dtype` the ONNX TensorProto number."""

    name: str
    dtype: Optional[np.dtype]
    onnx_dtype: int
    shape: Tuple[Union[int, str], ...]
    shape_text: str

    @property
    def type(self) -> str:
        """onnxruntime's type string, e.g. "tensor(float)"."""
        return _ORT_TYPE.get(self.onnx_dtype, f"tensor({_cuvil.dtype_name(self.onnx_dtype)})")


def _info(raw: Tuple[str, int, List[int], str]) -> TensorInfo:
    name, dtype, dims, text = raw
    names = _split_shape(text)
    shape: List[Union[int, str]] = []
    for k, d in enumerate(dims):
        shape.append(int(d) if d >= 0 else (names[k] if k < len(names) else "?"))
    return TensorInfo(name, _NUMPY_OF_ONNX.get(dtype), dtype, tuple(shape), text)


class Model:
    """A loaded, verified package (immutable; share it between threads and sessions)."""

    def __init__(self, path: Union[str, os.PathLike, bytes]) -> None:
        if isinstance(path, (bytes, bytearray, memoryview)):
            self._m = _cuvil.Model(bytes(path), 1)
            self.path: Optional[str] = None
        else:
            self.path = os.fspath(path)
            self._m = _cuvil.Model(self.path)
        self.inputs: List[TensorInfo] = [_info(i) for i in self._m.inputs()]
        self.outputs: List[TensorInfo] = [_info(o) for o in self._m.outputs()]

    def session(self, threads: int = 0, deadline_ms: int = 0, device: str = "cpu") -> "Session":
        """A session with `threads` threads, the caller's included (0 = all cores); a run
        taking longer than `deadline_ms` (0 = none) stops with a DEADLINE CuvilError.
        `device` is "cpu", "cuda" or "auto" (Session)."""
        return Session(self, threads=threads, deadline_ms=deadline_ms, device=device)

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {_cuvil.dtype_name(i.onnx_dtype)}{i.shape_text}" for i in self.inputs)
        outs = ", ".join(f"{o.name}: {_cuvil.dtype_name(o.onnx_dtype)}{o.shape_text}" for o in self.outputs)
        return f"<cuvil.Model {self.path or '(memory)'} ({ins}) -> ({outs})>"


def load(path: Union[str, os.PathLike, bytes]) -> Model:
    """Loads and verifies a .cuvir package (a path, or the package's bytes)."""
    return Model(path)


# cuvil_device values of the C API.
_DEVICES = {"cpu": 0, "cuda": 1, "auto": 2}

class Session:
    """Runs a Model. One run at a time per session (concurrent calls on one session wait
    for each other); use one session per thread to run in parallel. The GIL is released
    while a run is in progress."""

    def __init__(self, model: Model, threads: int = 0, deadline_ms: int = 0, device: str = "cpu") -> None:
        """`device`: "cpu"; "cuda" raises an UNSUPPORTED CuvilError saying why when CUDA cannot be
        used (no driver, no device, no PTX in the package; this version runs every package on
        the CPU); "auto" takes the CPU then, and `device_note` says why."""
        if device not in _DEVICES:
            raise ValueError(f"device must be one of {sorted(_DEVICES)}, got {device!r}")
        self.model = model
        self._s = _cuvil.Session(model._m, int(threads), int(deadline_ms), _DEVICES[device])
        self._lock = threading.Lock()
        self._output_index = {o.name: k for k, o in enumerate(model.outputs)}
        self._input_info = {i.name: i for i in model.inputs}

    @property
    def device(self) -> str:
        """The device the session runs on: "cpu" or "cuda"."""
        return self._s.device()

    @property
    def device_note(self) -> str:
        """Why device="auto" did not take CUDA ("" otherwise)."""
        return self._s.device_note()

    @property
    def inputs(self) -> List[TensorInfo]:
        return self.model.inputs

    @property
    def outputs(self) -> List[TensorInfo]:
        return self.model.outputs

    def _feed(self, name: str, value: Any) -> np.ndarray:
        info = self._input_info.get(name)
        if info is None:
            known = ", ".join(repr(i) for i in self._input_info) or "none"
            raise CuvilError(1, f"unknown input '{name}' (inputs: {known})")
        arr = np.asarray(value)
        if arr.dtype not in _ONNX_OF_NUMPY:
            raise CuvilError(1, f"input '{name}': NumPy dtype {arr.dtype} has no cuvil dtype "
                                f"(the model expects {_cuvil.dtype_name(info.onnx_dtype)})")
        # Borrowed as it is when C-contiguous and aligned (no copy); otherwise one copy.
        if not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.ascontiguousarray(arr)
        return arr

    def run(self, output_names: Optional[Sequence[str]], feeds: Mapping[str, Any],
            trace: Optional[Union[str, os.PathLike]] = None) -> List[np.ndarray]:
        """Runs with `feeds` (input name -> array; dtypes must match the model's, no casts)
        and returns the outputs named in `output_names` (None: all, in the model's order) as
        new NumPy arrays. `trace`: also write a Trace Event JSON of this run there (open it
        in ui.perfetto.dev). Raises CuvilError (with .code) on any failure."""
        if output_names is None:
            wanted = list(range(len(self.model.outputs)))
        else:
            if isinstance(output_names, str):
                raise TypeError("output_names must be a list of names (or None), not a str")
            wanted = []
            for n in output_names:
                if n not in self._output_index:
                    known = ", ".join(repr(o) for o in self._output_index)
                    raise CuvilError(1, f"unknown output '{n}' (outputs: {known})")
                wanted.append(self._output_index[n])
        arrays = [self._feed(name, value) for name, value in feeds.items()]
        names = list(feeds.keys())
        dtypes = [_ONNX_OF_NUMPY[a.dtype] for a in arrays]
        dims = [list(a.shape) for a in arrays]
        ptrs = [a.__array_interface__["data"][0] for a in arrays]
        nbytes = [a.nbytes for a in arrays]
        trace_path = os.fspath(trace) if trace is not None else ""
        results: List[np.ndarray] = []
        with self._lock:
            # `arrays` stays referenced until the run returns: the runtime borrows the data.
            self._s.run(names, dtypes, dims, ptrs, nbytes, trace_path)
            for k in wanted:
                _, dtype, out_dims, _ = self._s.output_info(k)
                np_dtype = _NUMPY_OF_ONNX.get(dtype)
                if np_dtype is None:
                    raise CuvilError(3, f"output '{self.model.outputs[k].name}' has dtype "
                                        f"{_cuvil.dtype_name(dtype)}, which NumPy has no type for")
                out = np.empty(tuple(out_dims), dtype=np_dtype)
                self._s.copy_output(k, out.__array_interface__["data"][0], out.nbytes)
                results.append(out)
        del arrays
        return results

    def cancel(self) -> None:
        """Stops the run in progress on this session (from any thread): it raises a
        CANCELLED CuvilError. Does nothing when no run is in progress."""
        self._s.cancel()

    def metrics(self) -> Dict[str, int]:
        """Counters over the session's life: runs, failures, run_ns, arena_bytes,
        arena_peak_bytes, threads, bucket (the program the last run chose). Safe from any thread, also during a run."""
        return dict(self._s.metrics())


def _option_args(options: Mapping[str, Any]) -> List[str]:
    """cuvilc's command-line options from keyword arguments: name -> --name-with-dashes;
    True is a flag (False leaves it out), a list or tuple repeats the option, a dict gives
    key=value per entry (dim={"batch": "1:64"} -> --dim batch=1:64)."""
    args: List[str] = []
    for key, value in options.items():
        if value is None:
            continue
        if key == "fusion":  # the config file's name for it
            if not value:
                args.append("--no-fusion")
            continue
        flag = "--" + key.replace("_", "-")
        if key == "dims":
            flag = "--dim"
        if isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                args += [flag, f"{k}={v}"]
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def compile(model: Union[str, os.PathLike, bytes, Any], output: Union[str, os.PathLike],
            **options: Any) -> str:
    """Compiles an ONNX model into a .cuvir package at `output` (written atomically) and
    returns `output`. `model` is a path, the model's bytes, or an onnx.ModelProto. The
    keyword options are cuvilc compile's (docs/cli.md): dim={"batch": "1:64"} (or
    dims=...), config="cuvil.yaml", layout="nhwc", no_fusion=True (or fusion=False),
    skip_pass=["cse"], report="compile.json", max_nodes=..., ... Raises CompileError with
    cuvilc's exit code and message when the compile fails."""
    output = os.fspath(output)
    extra = _option_args(options)
    with tempfile.TemporaryDirectory(prefix="cuvil-compile-") as tmp:
        if isinstance(model, (str, os.PathLike)):
            model_path = os.fspath(model)
        else:
            data = model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
            model_path = os.path.join(tmp, "model.onnx")
            with open(model_path, "wb") as f:
                f.write(data)
        exe = cuvilc_path()
        if not os.path.exists(exe):
            raise CompileError(5, f"cuvilc not found at '{exe}' (set CUVILC to a cuvilc binary)")
        proc = subprocess.run([exe, "compile", model_path, "-o", output, *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise CompileError(proc.returncode, proc.stderr.strip() or proc.stdout.strip())
    return output


# ---- onnxruntime-style shim ----

@dataclass(frozen=True)
class NodeArg:
    """onnxruntime.NodeArg's fields: name, type ("tensor(float)"), shape (ints and
    symbolic names)."""

    name: str
    type: str
    shape: List[Union[int, str]]


class InferenceSession:
    """onnxruntime.InferenceSession's common calls over a compiled package:
    InferenceSession("model.cuvir").run(None, {"x": x}). `threads` (or
    sess_options.intra_op_num_threads) sets the session's threads; providers are accepted
    and ignored (cuvil runs on the CPU)."""

    def __init__(self, path_or_bytes: Union[str, os.PathLike, bytes], sess_options: Any = None,
                 providers: Optional[Iterable[Any]] = None, threads: Optional[int] = None,
                 **_: Any) -> None:
        if threads is None:
            threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
        self._model = Model(path_or_bytes)
        self._session = self._model.session(threads=threads)

    def get_inputs(self) -> List[NodeArg]:
        return [NodeArg(i.name, i.type, list(i.shape)) for i in self._model.inputs]

    def get_outputs(self) -> List[NodeArg]:
        return [NodeArg(o.name, o.type, list(o.shape)) for o in self._model.outputs]

    def get_providers(self) -> List[str]:
        return ["CPUExecutionProvider"]

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Any = None) -> List[np.ndarray]:
        return self._session.run(output_names, input_feed)
