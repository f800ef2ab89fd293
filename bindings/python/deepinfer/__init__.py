"""deepinfer: run DeepSeek models from Python through libdeepinfer's C ABI.

    import deepinfer
    with deepinfer.Engine("SmolLM2-135M-Instruct.Q4_1.gguf") as engine:
        for ev in engine.submit("The capital of France is", max_tokens=16, seed=1):
            if isinstance(ev, deepinfer.Text):
                print(ev.text, end="", flush=True)

asyncio: deepinfer.AsyncEngine (async iterators over a request's events, awaitable
results, task cancellation cancels the request), on the engine's event descriptor.

A ctypes package: it loads libdeepinfer.so.0 from $DEEPINFER_LIBRARY, else the copy
pip built into the package, else the dynamic loader's search path (see
deepinfer.load_library). README.md and docs/python.md describe the threading model,
the events and the errors.
"""

from ._aio import AsyncEngine, AsyncRequest
from ._engine import POLL_MS, Engine, KvCacheStats, Request, Result
from ._errors import (
    BackendError,
    CancelledError,
    ContextLengthError,
    DeepinferError,
    DeepinferIOError,
    InternalError,
    InvalidArgumentError,
    InvalidRequestError,
    InvalidStateError,
    InvalidUTF8Error,
    LibraryNotFoundError,
    ModelFormatError,
    NotFoundError,
    OutOfMemoryError,
    Status,
    UnsupportedError,
)
from ._tokenizer import Tokenizer
from .events import (
    Chunk,
    Done,
    Encoding,
    Event,
    Finish,
    Protocol,
    Reasoning,
    Text,
    ToolCall,
    ToolCallDelta,
    Tokens,
)

__version__ = "0.1.0"


def load_library():
    """Load libdeepinfer now (Engine and Tokenizer do it on first use) and return
    the ctypes.CDLL. Raises LibraryNotFoundError (an OSError) saying what was
    tried and how to set $DEEPINFER_LIBRARY."""
    from . import _lib

    return _lib.load()


def library_version() -> str:
    """The running library's version string, "MAJOR.MINOR.PATCH"."""
    return load_library().di_version_string().decode()


def cpu_kernels() -> str:
    """The CPU kernels the products take on this machine, in words
    (di_cpu_kernels): chosen at run time from the CPU's features, the AMX tile
    state Linux grants and DI_CPU_AMX; for display (bug reports, logs), the
    wording may change between versions. Asks the operating system for nothing."""
    return load_library().di_cpu_kernels().decode()


__all__ = [
    "AsyncEngine", "AsyncRequest", "BackendError", "CancelledError", "Chunk",
    "ContextLengthError", "DeepinferError",
    "DeepinferIOError", "Done", "Encoding", "Engine", "Event", "Finish", "InternalError",
    "InvalidArgumentError", "InvalidRequestError", "InvalidStateError", "InvalidUTF8Error",
    "KvCacheStats",
    "LibraryNotFoundError", "ModelFormatError", "NotFoundError", "OutOfMemoryError",
    "POLL_MS", "Protocol", "Reasoning", "Request", "Result", "Status", "Text", "Tokenizer",
    "Tokens", "ToolCall", "ToolCallDelta", "UnsupportedError", "cpu_kernels", "load_library",
    "library_version",
]
