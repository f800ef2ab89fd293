"""Statuses and exceptions: one exception class per di_status."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """di_status (deepinfer.h). Values are the C values; an unknown positive value
    is reported as DeepinferError with status kept as a plain int."""

    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_REQUEST = 2
    OUT_OF_MEMORY = 3
    IO = 4
    MODEL_FORMAT = 5
    UNSUPPORTED = 6
    NOT_FOUND = 7
    CONTEXT_LENGTH = 8
    CANCELLED = 9
    INVALID_STATE = 10
    INVALID_UTF8 = 11
    BACKEND = 12
    INTERNAL = 13

    @property
    def c_name(self) -> str:
        """The C enumerator, e.g. "DI_ERR_INVALID_REQUEST" ("DI_OK" for OK)."""
        return "DI_OK" if self == 0 else "DI_ERR_" + self.name


class LibraryNotFoundError(OSError):
    """libdeepinfer.so.0 could not be loaded; the message lists what was tried and
    how to point the binding at the library ($DEEPINFER_LIBRARY)."""


class DeepinferError(Exception):
    """A call into libdeepinfer failed.

    Attributes:
        status: the di_status (a Status, or an int for a value this binding does
            not know).
        status_name: the C name, e.g. "DI_ERR_INVALID_REQUEST".
        message: the library's message (di_error_message), naming the offending
            field or byte offset, e.g. "messages: expected an array".
    """

    def __init__(self, status, message: str):
        try:
            status = Status(status)
            name = status.c_name
        except ValueError:
            name = f"DI_ERR_{int(status)}"
        super().__init__(f"{name}: {message}")
        self.status = status
        self.status_name = name
        self.message = message


class InvalidArgumentError(DeepinferError, ValueError):
    """DI_ERR_INVALID_ARGUMENT: a bad parameter or token id (the field is named)."""


class InvalidRequestError(DeepinferError, ValueError):
    """DI_ERR_INVALID_REQUEST: a protocol body the codec refuses (the field is named)."""


class OutOfMemoryError(DeepinferError, MemoryError):
    """DI_ERR_OUT_OF_MEMORY."""


class DeepinferIOError(DeepinferError, OSError):
    """DI_ERR_IO: a file could not be opened, read or mapped."""


class ModelFormatError(DeepinferError, ValueError):
    """DI_ERR_MODEL_FORMAT: a corrupt or truncated model or tokenizer file."""


class UnsupportedError(DeepinferError):
    """DI_ERR_UNSUPPORTED: valid input this build cannot handle (e.g. a protocol
    request to an engine without a prompt encoding)."""


class NotFoundError(DeepinferError, LookupError):
    """DI_ERR_NOT_FOUND: an id or name that does not exist."""


class ContextLengthError(DeepinferError):
    """DI_ERR_CONTEXT_LENGTH: no room in the context or the KV cache budget."""


class CancelledError(DeepinferError):
    """DI_ERR_CANCELLED: the request (or the model load) was cancelled."""


class InvalidStateError(DeepinferError):
    """DI_ERR_INVALID_STATE: the call is not allowed now (a finished request, a
    closed engine)."""


class InvalidUTF8Error(DeepinferError, ValueError):
    """DI_ERR_INVALID_UTF8."""


class BackendError(DeepinferError):
    """DI_ERR_BACKEND: the compute backend failed."""


class InternalError(DeepinferError):
    """DI_ERR_INTERNAL: a bug in the library."""


_CLASSES = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.INVALID_REQUEST: InvalidRequestError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.IO: DeepinferIOError,
    Status.MODEL_FORMAT: ModelFormatError,
    Status.UNSUPPORTED: UnsupportedError,
    Status.NOT_FOUND: NotFoundError,
    Status.CONTEXT_LENGTH: ContextLengthError,
    Status.CANCELLED: CancelledError,
    Status.INVALID_STATE: InvalidStateError,
    Status.INVALID_UTF8: InvalidUTF8Error,
    Status.BACKEND: BackendError,
    Status.INTERNAL: InternalError,
}


def error_for(status: int, message: str) -> DeepinferError:
    """The exception instance for a non-OK status."""
    return _CLASSES.get(status, DeepinferError)(status, message)
