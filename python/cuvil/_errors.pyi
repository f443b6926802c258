from typing import Dict

STATUS_NAMES: Dict[int, str]

class CuvilError(RuntimeError):
    code: int
    code_name: str
    message: str
    def __init__(self, code: int, message: str) -> None: ...

class CompileError(RuntimeError):
    exit_code: int
    code: int
    message: str
    def __init__(self, exit_code: int, message: str) -> None: ...
