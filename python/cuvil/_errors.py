"""cuvil's exceptions: every failure of the runtime or the compiler carries its status code."""

from __future__ import annotations

# Status codes of the C API (runtime/include/cuvil.h, cuvil_status_code).
STATUS_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "INVALID_PACKAGE",
    3: "UNSUPPORTED",
    4: "IO",
    5: "SHAPE",
    6: "RUNTIME",
    7: "OUT_OF_MEMORY",
    8: "DEADLINE",
    9: "CANCELLED",
}


class CuvilError(RuntimeError):
    """A failed runtime call: `code` is the C API's status code (an int), `code_name` its
    name ("INVALID_ARGUMENT", "SHAPE", ...), `message` the runtime's message, which names
    the input, node or file at fault."""

    def __init__(self, code: int, message: str) -> None:
        self.code = int(code)
        self.code_name = STATUS_NAMES.get(self.code, f"STATUS_{self.code}")
        self.message = message
        super().__init__(f"[{self.code_name}] {message}")


class CompileError(RuntimeError):
    """A failed `cuvil.compile`: `exit_code` is cuvilc's exit code (docs/cli.md: 2 usage,
    3 invalid model, 4 unsupported, 5 I/O, ...), `message` its diagnostics (stderr)."""

    def __init__(self, exit_code: int, message: str) -> None:
        self.exit_code = int(exit_code)
        self.code = self.exit_code
        self.message = message
        super().__init__(f"cuvilc exited with {self.exit_code}: {message}")
