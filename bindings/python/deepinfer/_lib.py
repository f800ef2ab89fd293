"""Loading libdeepinfer and declaring the C functions the binding calls.

The library is found, in order, through:

1. ``$DEEPINFER_LIBRARY``: a path to ``libdeepinfer.so`` (or ``.so.0``). When it is
   set and cannot be loaded, that is the error: no other place is tried.
2. the library bundled in the package, ``deepinfer/libdeepinfer.so.0`` (what
   ``pip install bindings/python`` builds and installs; BUNDLED);
3. ``ctypes.util.find_library("deepinfer")`` (ldconfig's cache, ``$LD_LIBRARY_PATH``
   on some platforms);
4. the dynamic loader's own search for ``libdeepinfer.so.0`` (``$LD_LIBRARY_PATH``,
   the rpath, ``/etc/ld.so.conf`` directories).

Only this module knows the C struct layouts; they mirror include/deepinfer/deepinfer.h
(version 0.1). Every struct the library reads starts with ``struct_size``; the
binding initialises its own structs with ``di_*_init_size(p, ctypes.sizeof(...))``,
so the library writes the defaults of the binding's fields and nothing past them,
and a newer library keeps the defaults of fields the binding does not know (the
header's "Versioned input structs" rule).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint,
    c_uint32,
    c_uint64,
    c_void_p,
)

from ._errors import LibraryNotFoundError

#: The oldest library version (di_version(), MAJOR*10000+MINOR*100+PATCH) whose ABI
#: this binding was written against.
MIN_VERSION = 100
SONAME = "libdeepinfer.so.0"
#: Where the package's own build of the library lies (present when the package was
#: installed with pip from bindings/python; absent in a source checkout).
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), SONAME)

# C callback types. `const di_event *` and `void *user` arrive as Python ints.
EVENT_FN = CFUNCTYPE(None, c_void_p, c_void_p)
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_float)
LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class EngineConfig(Structure):
    """di_engine_config (deepinfer.h), release 0.2 (0.1 ended at progress_user),
    and the fields appended since (kv_cache_type)."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("model_path", c_char_p),
        ("tokenizer_path", c_char_p),
        ("device", c_int32),
        ("encoding", c_int32),
        ("n_threads", c_int32),
        ("max_running", c_int32),
        ("n_ctx", c_int64),
        ("n_batch", c_int64),
        ("kv_cache_bytes", c_int64),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("disable_prefix_cache", c_int32),
        ("reserved", c_int32),
        ("kv_host_cache_bytes", c_int64),
        ("kv_cache_dir", c_char_p),
        ("kv_disk_cache_bytes", c_int64),
        ("served_model_name", c_char_p),
        ("speculative_tokens", c_int32),
        ("speculative_fixed", c_int32),
        ("draft", c_int32),
        ("reserved_draft", c_int32),
        ("draft_model_path", c_char_p),
        ("kv_cache_type", c_int32),
        ("reserved_kv", c_int32),
    ]


class Request(Structure):
    """di_request (deepinfer.h), release 0.1 and the fields appended in 0.x
    (constrained decoding, log probabilities, stop strings)."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("protocol", c_int32),
        ("ignore_eos", c_int32),
        ("json", c_char_p),
        ("json_len", c_size_t),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_size_t),
        ("max_tokens", c_int64),
        ("temperature", c_float),
        ("top_p", c_float),
        ("top_k", c_int32),
        ("min_p", c_float),
        ("repetition_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("reserved", c_int32),
        ("seed", c_int64),
        ("logit_bias_ids", POINTER(c_int32)),
        ("logit_bias_values", POINTER(c_float)),
        ("n_logit_bias", c_size_t),
        ("stop_tokens", POINTER(c_int32)),
        ("n_stop_tokens", c_size_t),
        ("on_event", EVENT_FN),
        ("user_data", c_void_p),
        ("grammar", c_char_p),
        ("json_schema", c_char_p),
        ("regex", c_char_p),
        ("logprobs", c_int32),
        ("top_logprobs", c_int32),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_size_t),
    ]


class KvCacheStats(Structure):
    """di_kv_cache_stats (deepinfer.h), written by the library up to struct_size."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("block_tokens", c_int64),
        ("blocks_total", c_int64),
        ("blocks_used", c_int64),
        ("blocks_cached", c_int64),
        ("blocks_free", c_int64),
        ("tokens_used", c_int64),
        ("running_requests", c_int64),
        ("prefix_cache_queries_total", c_int64),
        ("prefix_cache_hits_total", c_int64),
        ("blocks_evicted_total", c_int64),
    ]


#: di_kv_cache_type by the names the CLI's --kv-cache-type gives them (llama.cpp's
#: --cache-type-k/-v): the KV cache's storage type.
KV_CACHE_TYPES = {"f16": 0, "f32": 1, "q8_0": 2, "q4_0": 3}

# (name, restype, argtypes). Pointers the binding copies from are c_void_p so that
# ctypes does not convert them (string_at copies exactly `len` bytes).
_SIGNATURES = [
    ("di_version", c_uint, []),
    ("di_version_string", c_char_p, []),
    ("di_cpu_kernels", c_char_p, []),
    ("di_status_string", c_char_p, [c_int]),
    ("di_error_status", c_int, [c_void_p]),
    ("di_error_message", c_char_p, [c_void_p]),
    ("di_error_free", None, [c_void_p]),
    ("di_tokenizer_load", c_int, [c_char_p, POINTER(c_void_p), POINTER(c_void_p)]),
    ("di_tokenizer_free", None, [c_void_p]),
    ("di_tokenizer_vocab_size", c_int32, [c_void_p]),
    ("di_tokenizer_token_id", c_int, [c_void_p, c_char_p, c_size_t, POINTER(c_int32)]),
    (
        "di_tokenizer_encode",
        c_int,
        [
            c_void_p,
            c_char_p,
            c_size_t,
            c_uint,
            POINTER(POINTER(c_int32)),
            POINTER(c_size_t),
            POINTER(c_void_p),
        ],
    ),
    ("di_tokens_free", None, [POINTER(c_int32)]),
    (
        "di_tokenizer_decode",
        c_int,
        [
            c_void_p,
            POINTER(c_int32),
            c_size_t,
            c_uint,
            POINTER(c_void_p),
            POINTER(c_size_t),
            POINTER(c_void_p),
        ],
    ),
    ("di_text_free", None, [c_void_p]),
    ("di_engine_config_init_size", None, [c_void_p, c_size_t]),
    ("di_engine_create", c_int, [c_void_p, POINTER(c_void_p), POINTER(c_void_p)]),
    ("di_engine_destroy", c_int, [c_void_p]),
    ("di_engine_encoding", c_int32, [c_void_p]),
    ("di_engine_tokenizer", c_void_p, [c_void_p]),
    ("di_engine_vocab_size", c_int32, [c_void_p]),
    ("di_engine_context_length", c_int64, [c_void_p]),
    ("di_engine_served_model_name", c_char_p, [c_void_p]),
    ("di_engine_model_info", c_char_p, [c_void_p, c_void_p]),
    ("di_engine_pending", c_size_t, [c_void_p]),
    ("di_engine_event_fd", c_int, [c_void_p]),
    ("di_kv_cache_stats_init_size", None, [c_void_p, c_size_t]),
    ("di_engine_kv_cache_stats", c_int, [c_void_p, c_void_p, POINTER(c_void_p)]),
    ("di_request_init_size", None, [c_void_p, c_size_t]),
    ("di_submit", c_int, [c_void_p, c_void_p, POINTER(c_uint64), POINTER(c_void_p)]),
    ("di_cancel", c_int, [c_void_p, c_uint64, POINTER(c_void_p)]),
    ("di_poll", c_int64, [c_void_p, c_int32]),
    ("di_event_kind_of", c_int, [c_void_p]),
    ("di_event_request_id", c_uint64, [c_void_p]),
    ("di_event_text", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("di_event_tokens", POINTER(c_int32), [c_void_p, POINTER(c_size_t)]),
    ("di_event_logprobs", POINTER(c_float), [c_void_p, POINTER(c_size_t)]),
    (
        "di_event_top_logprobs",
        c_size_t,
        [c_void_p, c_size_t, POINTER(POINTER(c_int32)), POINTER(POINTER(c_float))],
    ),
    ("di_event_choice_index", c_uint32, [c_void_p]),
    ("di_event_tool_call_index", c_int32, [c_void_p]),
    ("di_event_tool_call_id", c_char_p, [c_void_p]),
    ("di_event_tool_call_name", c_char_p, [c_void_p]),
    ("di_event_chunk_json", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("di_event_chunk_sse", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("di_event_chunk_name", c_char_p, [c_void_p]),
    ("di_event_status", c_int, [c_void_p]),
    ("di_event_message", c_char_p, [c_void_p]),
    ("di_event_finish_reason", c_int, [c_void_p]),
    ("di_event_finish_text", c_char_p, [c_void_p]),
    ("di_event_prompt_tokens", c_uint32, [c_void_p]),
    ("di_event_prompt_cache_hit_tokens", c_uint32, [c_void_p]),
    ("di_event_draft_tokens", c_uint32, [c_void_p]),
    ("di_event_accepted_draft_tokens", c_uint32, [c_void_p]),
    ("di_event_completion_tokens", c_uint32, [c_void_p]),
    ("di_event_reasoning_tokens", c_uint32, [c_void_p]),
    ("di_event_response_json", c_void_p, [c_void_p, POINTER(c_size_t)]),
]

_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    env = os.environ.get("DEEPINFER_LIBRARY")
    if env:
        return [env], True
    names = []
    if os.path.isfile(BUNDLED):
        names.append(BUNDLED)
    found = ctypes.util.find_library("deepinfer")
    if found:
        names.append(found)
    names.append(SONAME)
    return names, False


def _declare(lib):
    for name, restype, argtypes in _SIGNATURES:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load():
    """Return the loaded library (a ctypes.CDLL), loading it on first use.

    Raises LibraryNotFoundError (an OSError) when no candidate loads, or when the
    library that loaded is older than this binding (di_version() below
    MIN_VERSION). Thread-safe; the library stays loaded for the process."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        names, from_env = _candidates()
        errors = []
        for name in names:
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                errors.append(f"{name}: {e}")
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                # a function missing: another library, or a deepinfer built
                # before one the binding calls (di_*_init_size)
                errors.append(f"{name}: not a deepinfer library this binding can use ({e})")
                continue
            version = lib.di_version()
            if version < MIN_VERSION:
                errors.append(
                    f"{name}: version {lib.di_version_string().decode()} is older than "
                    f"this binding needs ({MIN_VERSION // 10000}.{MIN_VERSION // 100 % 100})"
                )
                continue
            _lib, _path = lib, name
            return lib
        if from_env:
            hint = "DEEPINFER_LIBRARY is set but does not name a loadable libdeepinfer"
        else:
            hint = (
                "the package holds no library of its own (install it with pip install "
                "bindings/python to build one), so set DEEPINFER_LIBRARY to the path of "
                "libdeepinfer.so (after scripts/run.sh: build/install/lib/libdeepinfer.so; "
                "in a build tree: BUILD/lib/libdeepinfer.so), or install the library where "
                "the dynamic "
                "loader finds it (LD_LIBRARY_PATH, ldconfig)"
            )
        raise LibraryNotFoundError(
            "deepinfer: cannot load the C library " + SONAME + ": " + hint + ". Tried: "
            + "; ".join(errors)
        )


def path():
    """The name or path the library was loaded from, or None before load()."""
    return _path


def new_engine_config(lib):
    """A di_engine_config holding the library's defaults, struct_size set to the
    binding's own struct: di_engine_config_init_size writes exactly
    ctypes.sizeof(EngineConfig) bytes (fields a newer library added keep their
    defaults)."""
    cfg = EngineConfig()
    lib.di_engine_config_init_size(ctypes.byref(cfg), ctypes.sizeof(cfg))
    return cfg


def new_request(lib):
    """A di_request holding the library's defaults (as new_engine_config)."""
    req = Request()
    lib.di_request_init_size(ctypes.byref(req), ctypes.sizeof(req))
    return req


def new_kv_cache_stats(lib):
    """A di_kv_cache_stats for di_engine_kv_cache_stats to fill, struct_size set
    to the binding's own struct (the library writes that much at most)."""
    stats = KvCacheStats()
    lib.di_kv_cache_stats_init_size(ctypes.byref(stats), ctypes.sizeof(stats))
    return stats
