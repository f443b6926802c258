# Type stubs of the cuvil package (python/cuvil/__init__.py).
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._errors import CompileError as CompileError, CuvilError as CuvilError

__version__: str

def cpu_path() -> str: ...
def cuvilc_path() -> str: ...

class TensorInfo:
    name: str
    dtype: Optional[np.dtype]
    onnx_dtype: int
    shape: Tuple[Union[int, str], ...]
    shape_text: str
    @property
    def type(self) -> str: ...

class Model:
    path: Optional[str]
    inputs: List[TensorInfo]
    outputs: List[TensorInfo]
    def __init__(self, path: Union[str, os.PathLike[str], bytes]) -> None: ...
    def session(self, threads: int = ..., deadline_ms: int = ..., device: str = ...) -> Session: ...

def load(path: Union[str, os.PathLike[str], bytes]) -> Model: ...

class Session:
    model: Model
    def __init__(self, model: Model, threads: int = ..., deadline_ms: int = ..., device: str = ...) -> None: ...
    @property
    def device(self) -> str: ...
    @property
    def device_note(self) -> str: ...
    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...
    def run(
        self,
        output_names: Optional[Sequence[str]],
        feeds: Mapping[str, Any],
        trace: Optional[Union[str, os.PathLike[str]]] = ...,
    ) -> List[np.ndarray]: ...
    def cancel(self) -> None: ...
    def metrics(self) -> Dict[str, int]: ...

def compile(
    model: Union[str, os.PathLike[str], bytes, Any], output: Union[str, os.PathLike[str]], **options: Any
) -> str: ...

class NodeArg:
    name: str
    type: str
    shape: List[Union[int, str]]

class InferenceSession:
    def __init__(
        self,
        path_or_bytes: Union[str, os.PathLike[str], bytes],
        sess_options: Any = ...,
        providers: Optional[Iterable[Any]] = ...,
        threads: Optional[int] = ...,
        **kwargs: Any,
    ) -> None: ...
    def get_inputs(self) -> List[NodeArg]: ...
    def get_outputs(self) -> List[NodeArg]: ...
    def get_providers(self) -> List[str]: ...
    def run(
        self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], run_options: Any = ...
    ) -> List[np.ndarray]: ...
