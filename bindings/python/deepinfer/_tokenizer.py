"""Tokenizer: encode and decode through di_tokenizer_encode / di_tokenizer_decode."""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_int32, c_size_t, c_void_p
from typing import Iterable, List, Optional

from . import _lib
from ._errors import error_for

TOKENIZE_SPECIAL = 1
TOKENIZE_ADDED = 2
TOKENIZE_ADD_SPECIAL_TOKENS = 4
DECODE_SKIP_SPECIAL = 1

_CLOSED = object()  # Engine._guarded's return for a closed engine


def _raise(lib, status: int, err: c_void_p):
    """Raise the error of a failed call, freeing the di_error."""
    msg = lib.di_error_message(err).decode("utf-8", "replace") if err.value else ""
    if err.value:
        lib.di_error_free(err)
    raise error_for(status, msg or lib.di_status_string(status).decode())


def _ids_array(ids: Iterable[int]):
    ids = list(ids)
    return (c_int32 * len(ids))(*ids), len(ids)


class Tokenizer:
    """A byte-level BPE tokenizer (di_tokenizer), as Hugging Face tokenizers
    encodes and decodes.

    Either owned (Tokenizer.load) or borrowed from an Engine (Engine.tokenizer:
    valid while the engine is open; it keeps the engine object alive; its calls
    raise InvalidStateError once the engine is closed or closing, and
    Engine.close() waits for calls in flight).
    Thread-safe: a loaded tokenizer is immutable, so encode/decode may run from
    many threads at once (the GIL is released during the C call)."""

    def __init__(self, handle: int, owner=None, owned: bool = False):
        self._lib = _lib.load()
        self._handle = handle
        self._owner = owner  # an Engine the borrowed handle lives in
        self._owned = owned

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """Load a tokenizer.json, a folder holding one, or a GGUF file's vocabulary.
        Raises DeepinferIOError (cannot open), ModelFormatError, UnsupportedError,
        each naming the file and field."""
        lib = _lib.load()
        out, err = c_void_p(), c_void_p()
        st = lib.di_tokenizer_load(os.fsencode(path), byref(out), byref(err))
        if st:
            _raise(lib, st, err)
        return cls(out.value, owned=True)

    def _call(self, fn, *args):
        """fn(handle, *args). A borrowed tokenizer's call is kept out of its
        engine's di_engine_destroy (Engine.close() waits for it); raises
        InvalidStateError when the tokenizer, or its engine, is closed."""
        owner = self._owner
        if owner is not None:
            r = owner._guarded(self._call_h, fn, args, closed=_CLOSED)
            if r is _CLOSED:
                raise error_for(10, "the tokenizer's engine is closed")
            return r
        return self._call_h(fn, args)

    def _call_h(self, fn, args):
        h = self._handle
        if not h:
            raise error_for(10, "closed")
        return fn(h, *args)

    def close(self) -> None:
        """Free an owned tokenizer (di_tokenizer_free); a no-op when borrowed."""
        if self._owned and self._handle:
            self._lib.di_tokenizer_free(self._handle)
        self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def vocab_size(self) -> int:
        """Token ids are below this (added tokens included)."""
        return self._call(self._lib.di_tokenizer_vocab_size)

    def token_id(self, text: str) -> Optional[int]:
        """The id of the token spelled exactly `text` (an added token such as
        "<|im_end|>", or a vocabulary token's bytes), or None."""
        b = text.encode("utf-8")
        out = c_int32()
        st = self._call(self._lib.di_tokenizer_token_id, b, len(b), byref(out))
        return out.value if st == 0 else None

    def encode(
        self,
        text: str,
        *,
        special: bool = False,
        added: bool = False,
        add_special_tokens: bool = False,
    ) -> List[int]:
        """Encode UTF-8 text into token ids.

        With every flag off, text is plain text: special-token spellings stay
        text, nothing is added (HF: encode_special_tokens, add_special_tokens=False).
        special / added recognise the spellings of special / non-special added
        tokens; add_special_tokens adds the post-processor's tokens (a BOS).
        HF tokenizers' default `encode(text)` is all three on.
        Raises InvalidUTF8Error (text with lone surrogates), InvalidArgumentError."""
        flags = (
            (TOKENIZE_SPECIAL if special else 0)
            | (TOKENIZE_ADDED if added else 0)
            | (TOKENIZE_ADD_SPECIAL_TOKENS if add_special_tokens else 0)
        )
        try:
            b = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise error_for(11, f"text is not valid UTF-8 at character {e.start}") from None
        ids = POINTER(c_int32)()
        n, err = c_size_t(), c_void_p()
        lib = self._lib
        st = self._call(lib.di_tokenizer_encode, b, len(b), flags, byref(ids), byref(n), byref(err))
        if st:
            _raise(lib, st, err)
        try:
            return ids[: n.value]
        finally:
            lib.di_tokens_free(ids)

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Decode token ids into text as HF tokenizers' decode does (bytes that are
        not well-formed UTF-8 become U+FFFD). Raises InvalidArgumentError naming
        the position of an id outside [0, vocab_size)."""
        arr, n = _ids_array(ids)
        text, length, err = c_void_p(), c_size_t(), c_void_p()
        lib = self._lib
        flags = DECODE_SKIP_SPECIAL if skip_special else 0
        st = self._call(
            lib.di_tokenizer_decode, arr, n, flags, byref(text), byref(length), byref(err)
        )
        if st:
            _raise(lib, st, err)
        try:
            return ctypes.string_at(text.value, length.value).decode("utf-8", "replace")
        finally:
            lib.di_text_free(text)
