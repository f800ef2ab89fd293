"""The binding's mirrors of the versioned structs (_lib.EngineConfig, _lib.Request,
_lib.KvCacheStats) and how they are initialised: each mirror declares the header's
fields in the header's order (the struct-layout guard: a field appended to
include/deepinfer/deepinfer.h and not to the mirror fails here), and
di_*_init_size with the mirror's ctypes.sizeof gives the documented defaults and
writes no byte past the mirror (deepinfer.h, "Versioned input structs")."""
import ctypes
import re

import pytest

from conftest import ROOT

from deepinfer import _lib

HEADER = ROOT / "include" / "deepinfer" / "deepinfer.h"


def header_fields(struct):
    """The field names of `struct` as deepinfer.h declares them, in order."""
    text = HEADER.read_text()
    body = re.search(r"typedef struct %s \{(.*?)\n\} %s;" % (struct, struct), text, re.S)
    assert body, f"{struct} is not in {HEADER}"
    decls = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S).split(";")
    return [re.findall(r"\w+", d)[-1] for d in decls if d.strip()]


@pytest.mark.parametrize("mirror, struct", [(_lib.EngineConfig, "di_engine_config"),
                                            (_lib.Request, "di_request")])
def test_mirror_declares_the_header_fields(mirror, struct):
    assert [name for name, _ in mirror._fields_] == header_fields(struct)
    # no trailing padding: the last field ends the struct, as the header's rule says
    last = getattr(mirror, mirror._fields_[-1][0])
    assert last.offset + last.size == ctypes.sizeof(mirror)


def test_kv_cache_stats_mirror_is_a_release_of_the_header_struct():
    """An output struct: the mirror may end before the header's (the library
    writes only the fields it holds), but what it has is the header's start."""
    names = [name for name, _ in _lib.KvCacheStats._fields_]
    assert names == header_fields("di_kv_cache_stats")[: len(names)]


def test_new_structs_hold_the_documented_defaults_and_the_mirror_size():
    lib = _lib.load()
    cfg = _lib.new_engine_config(lib)
    assert cfg.struct_size == ctypes.sizeof(_lib.EngineConfig)
    assert cfg.device == 1  # DI_DEVICE_CPU
    assert (cfg.model_path, cfg.n_threads, cfg.kv_cache_type, cfg.draft) == (None, 0, 0, 0)
    req = _lib.new_request(lib)
    assert req.struct_size == ctypes.sizeof(_lib.Request)
    assert (req.temperature, req.top_p, req.repetition_penalty, req.seed) == (1.0, 1.0, 1.0, -1)
    assert (req.protocol, req.top_k, req.max_tokens, req.logprobs) == (0, 0, 0, 0)
    stats = _lib.new_kv_cache_stats(lib)
    assert stats.struct_size == ctypes.sizeof(_lib.KvCacheStats)
    assert stats.blocks_total == 0


@pytest.mark.parametrize("fn, mirror", [("di_engine_config_init_size", _lib.EngineConfig),
                                        ("di_request_init_size", _lib.Request),
                                        ("di_kv_cache_stats_init_size", _lib.KvCacheStats)])
def test_init_size_writes_no_byte_past_the_mirror(fn, mirror):
    """What follows the binding's struct in memory (here 0xA5 bytes) survives,
    whether the library's struct is the same size or larger."""
    size = ctypes.sizeof(mirror)
    buf = ctypes.create_string_buffer(b"\xa5" * (size + 64), size + 64)
    getattr(_lib.load(), fn)(buf, size)
    assert ctypes.c_size_t.from_buffer(buf).value == size
    assert buf.raw[size:] == b"\xa5" * 64
