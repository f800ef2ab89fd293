"""di_engine_event_fd in an asyncio loop: loop.add_reader wakes the host
exactly when the engine has queued events (never with nothing to deliver),
di_poll(engine, 0) then delivers them, and the request ends with its tokens and
one DONE. The raw C API through ctypes, as a host with its own event loop uses it."""
import asyncio
import ctypes
from ctypes import byref, c_int32, c_size_t, c_uint64, c_void_p

from conftest import TINY

from deepinfer import _lib

DI_EVENT_TOKENS, DI_EVENT_DONE = 1, 7


def test_event_fd_drives_an_asyncio_loop():
    lib = _lib.load()
    cfg = _lib.EngineConfig()
    lib.di_engine_config_init_size(byref(cfg), ctypes.sizeof(cfg))
    path = str(TINY).encode()
    cfg.model_path = path
    cfg.n_threads = 2
    engine = c_void_p()
    assert lib.di_engine_create(byref(cfg), byref(engine), None) == 0
    try:
        fd = lib.di_engine_event_fd(engine)
        assert fd >= 0 and lib.di_engine_event_fd(engine) == fd
        tokens, done = [], []

        @_lib.EVENT_FN
        def on_event(user, ev):
            kind = lib.di_event_kind_of(ev)
            if kind == DI_EVENT_TOKENS:
                n = c_size_t()
                p = lib.di_event_tokens(ev, byref(n))
                tokens.extend(p[: n.value])
            elif kind == DI_EVENT_DONE:
                done.append(lib.di_event_status(ev))

        ids = (c_int32 * 4)(5, 6, 7, 8)
        req = _lib.Request()
        lib.di_request_init_size(byref(req), ctypes.sizeof(req))
        req.tokens = ids
        req.n_tokens = 4
        req.max_tokens = 12
        req.temperature = 0.0
        req.ignore_eos = 1
        req.on_event = on_event
        rid = c_uint64()
        assert lib.di_submit(engine, byref(req), byref(rid), None) == 0

        loop = asyncio.new_event_loop()
        delivered = []
        finished = loop.create_future()

        def readable():
            delivered.append(lib.di_poll(engine, 0))
            if lib.di_engine_pending(engine) == 0 and not finished.done():
                finished.set_result(None)

        loop.add_reader(fd, readable)
        try:
            loop.run_until_complete(asyncio.wait_for(finished, 30))
        finally:
            loop.remove_reader(fd)
            loop.close()
        assert done == [0]
        assert len(tokens) == 12
        assert delivered and all(n > 0 for n in delivered)  # no empty wake-ups
    finally:
        assert lib.di_engine_destroy(engine) == 0
