"""Engine and Request: submit, stream events, cancel.

Threading model (docs/python.md):

* di_poll may run on one thread at a time and the request callbacks run inside
  it. The binding lets whichever Python thread needs an event become the poller:
  under the engine's condition variable a thread takes the "poller" role, calls
  di_poll with the GIL released, and the one C callback (shared by every request
  of the engine) copies each event into the queue of the request it belongs to.
  When di_poll returns, the poller gives up the role and wakes every waiting
  thread, each of which finds its own events in its own queue.
* So any number of Request iterators may run in different threads; each sees
  exactly its own events, in order, ending with one Done.
* di_submit and di_cancel may be called from any thread (Request.cancel() too).
  Every C call on the handle (or the engine's tokenizer) is counted in flight
  under the lock (Engine._guarded); close() marks the engine closing, waits for
  the poller and those calls, then destroys: nothing uses the handle afterwards.
* The callback never runs user code and never calls di_poll. It catches
  BaseException, routes the event all the same and leaves the exception for the
  poller to raise after di_poll returns.
* The main thread, where Python runs signal handlers (at the first instruction of
  any function, the callback's included, before its try), never runs the
  callback: its polls and its close() run on helper threads while it waits on a
  raw lock, so KeyboardInterrupt is raised from that wait and loses no event.
"""

from __future__ import annotations

import ctypes
import itertools
import json as _json
import _thread
import os
import sys
import threading
from collections import deque
from ctypes import POINTER, byref, c_float, c_int32, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib
from ._errors import CancelledError, Status, error_for
from ._tokenizer import Tokenizer, _raise
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

# di_event_kind
_TOKENS, _TEXT, _REASONING, _TOOL_DELTA, _TOOL, _CHUNK, _DONE = range(1, 8)

#: How long one di_poll waits for the first event, in milliseconds. Bounded so that
#: close() from another thread is seen within this time.

#: The main thread's helper poll thread ends after this many seconds without work.
HELPER_IDLE_S = 2.0
POLL_MS = 100

_RAISE = object()  # Engine._guarded: raise InvalidStateError when closed
_CLOSE_INSIDE = (
    "close() was called on a thread that is inside a call on this engine (a signal "
    "handler or finalizer); close it after the call returns"
)


def _main_ident() -> int:
    return threading.main_thread().ident


@dataclass
class Result:
    """What Request.result() collected: the request's output joined. A Chat
    request with ``n`` > 1 has one Result per choice in ``choices`` (index i is
    choice_index i, each with the shared Done); the fields here are choice 0's."""

    text: str = ""  #: the answer (Text events joined)
    reasoning: str = ""  #: reasoning_content (Reasoning events joined)
    tokens: List[int] = field(default_factory=list)  #: every generated token id
    tool_calls: List[ToolCall] = field(default_factory=list)  #: complete tool calls
    done: Optional[Done] = None  #: the terminal event
    #: each token's log probability (Tokens.logprobs joined), None when not asked for
    logprobs: Optional[List[float]] = None
    #: each token's most likely alternatives (Tokens.top_logprobs joined), or None
    top_logprobs: Optional[List[List[Tuple[int, float]]]] = None
    #: one Result per choice (Chat n > 1), choices[0] is this one; [self] otherwise
    choices: List["Result"] = field(default_factory=list, repr=False, compare=False)

    def response(self):
        """The complete protocol response (Done.response_json parsed), or None."""
        return self.done.response() if self.done else None


@dataclass(frozen=True)
class KvCacheStats:
    """The KV cache's occupancy (Engine.kv_cache_stats, di_kv_cache_stats): one
    snapshot the engine's worker published. Blocks hold block_tokens tokens each;
    blocks_used + blocks_cached + blocks_free == blocks_total. The *_total
    counters only grow from 0."""

    block_tokens: int  #: tokens one block holds (16)
    blocks_total: int  #: blocks of the cache in all
    blocks_used: int  #: held by running requests (a shared prefix block counts once)
    blocks_cached: int  #: held by none, keeping a computed prefix (the prefix cache)
    blocks_free: int  #: neither used nor cached
    tokens_used: int  #: tokens the running requests hold, summed over requests
    running_requests: int  #: requests holding blocks
    prefix_cache_queries_total: int  #: tokens of admitted requests looked up
    prefix_cache_hits_total: int  #: of those, tokens found computed
    blocks_evicted_total: int  #: cached blocks whose room a request took


class _ResultBuilder:
    """Joins a request's events into a Result, one per choice (Request.result and
    the asyncio AsyncRequest.result)."""

    __slots__ = ("parts", "done")

    def __init__(self):
        self.parts = {}  # choice index -> (Result, text pieces, reasoning pieces)
        self.done = None

    def _part(self, i):
        p = self.parts.get(i)
        if p is None:
            p = self.parts[i] = (Result(), [], [])
        return p

    def add(self, ev) -> None:
        c = ev.__class__
        if c is Done:
            self.done = ev
            return
        if c is Chunk:
            return
        res, text, reasoning = self._part(ev.choice_index)
        if c is Text:
            text.append(ev.text)
        elif c is Tokens:
            res.tokens += ev.ids
            if ev.logprobs is not None:
                res.logprobs = (res.logprobs or []) + ev.logprobs
            if ev.top_logprobs is not None:
                res.top_logprobs = (res.top_logprobs or []) + ev.top_logprobs
        elif c is Reasoning:
            reasoning.append(ev.text)
        elif c is ToolCall:
            res.tool_calls.append(ev)

    def finish(self, done) -> Result:
        """The Result; raises the Done's status (the Result as exc.result)."""
        d = self.done if self.done is not None else done
        self._part(0)
        choices = []
        for i in range(max(self.parts) + 1):
            r, text, reasoning = self._part(i)
            r.text = "".join(text)
            r.reasoning = "".join(reasoning)
            r.done = d
            choices.append(r)
        for r in choices:
            r.choices = choices
        res = choices[0]
        if d is not None and d.status != Status.OK:
            e = error_for(d.status, d.message)
            e.result = res
            raise e
        return res


def _make_callback(engine: "Engine"):
    """The one C event callback of an engine. Runs inside di_poll (or
    di_engine_destroy) on the polling thread: it copies what the event's kind
    needs — only those getters are called — into the request's queue.

    Returns (the ctypes callback, state): state[0] is the copy function
    (kind, ev, req) -> event or None (replaceable, for tests); state[1] the first
    exception raised inside the callback since the poller last took it."""
    lib = engine._lib
    routes = engine._routes
    kind_of = lib.di_event_kind_of
    ev_text = lib.di_event_text
    ev_tokens = lib.di_event_tokens
    string_at = ctypes.string_at
    n = c_size_t()  # scratch: only the single polling thread uses it
    pn = byref(n)

    def text_of(ev):
        p = ev_text(ev, pn)
        return string_at(p, n.value).decode("utf-8", "replace") if p else None

    ev_choice = lib.di_event_choice_index
    ev_logprobs = lib.di_event_logprobs
    ev_top = lib.di_event_top_logprobs
    top_ids = POINTER(c_int32)()
    top_vals = POINTER(c_float)()
    p_top_ids, p_top_vals = byref(top_ids), byref(top_vals)

    def tokens_of(ev):
        p = ev_tokens(ev, pn)
        count = n.value
        ids = p[:count]
        lp = ev_logprobs(ev, pn)
        if not lp:
            return Tokens(ids, ev_choice(ev))
        logprobs = lp[: n.value]
        tops = None
        if count and ev_top(ev, 0, None, None):
            tops = []
            for i in range(count):
                k = ev_top(ev, i, p_top_ids, p_top_vals)
                tops.append(list(zip(top_ids[:k], top_vals[:k])))
        return Tokens(ids, ev_choice(ev), logprobs, tops)

    def copy(kind, ev, req):
        if kind == _TOKENS:
            return tokens_of(ev)
        if kind == _TEXT:
            return Text(string_at(ev_text(ev, pn), n.value).decode("utf-8", "replace"),
                        ev_choice(ev))
        if kind == _CHUNK:
            if not req._chunks:
                return None
            j = text_of(ev)
            p = lib.di_event_chunk_sse(ev, pn)
            sse = string_at(p, n.value).decode("utf-8", "replace")
            name = lib.di_event_chunk_name(ev)
            return Chunk(j, sse, name.decode("utf-8", "replace") if name is not None else None,
                         ev_choice(ev))
        if kind == _REASONING:
            return Reasoning(string_at(ev_text(ev, pn), n.value).decode("utf-8", "replace"),
                             ev_choice(ev))
        if kind == _TOOL_DELTA or kind == _TOOL:
            args = text_of(ev) or ""
            cid = lib.di_event_tool_call_id(ev)
            name = lib.di_event_tool_call_name(ev)
            cls = ToolCallDelta if kind == _TOOL_DELTA else ToolCall
            return cls(
                lib.di_event_tool_call_index(ev),
                cid.decode("utf-8", "replace") if cid is not None else None,
                name.decode("utf-8", "replace") if name is not None else None,
                args,
                ev_choice(ev),
            )
        if kind == _DONE:
            st = lib.di_event_status(ev)
            fin = lib.di_event_finish_reason(ev)
            ftext = lib.di_event_finish_text(ev)
            p = lib.di_event_response_json(ev, pn)
            try:
                st = Status(st)
            except ValueError:
                pass
            try:
                fin = Finish(fin) if fin else None
            except ValueError:
                pass
            if ftext is None and isinstance(fin, Finish):
                # token requests: the reason's name ("stop", "length", …)
                ftext = str(fin).encode("utf-8")
            return Done(
                st,
                (lib.di_event_message(ev) or b"").decode("utf-8", "replace"),
                fin,
                ftext.decode("utf-8", "replace") if ftext is not None else None,
                lib.di_event_prompt_tokens(ev),
                lib.di_event_completion_tokens(ev),
                lib.di_event_reasoning_tokens(ev),
                string_at(p, n.value).decode("utf-8", "replace") if p else None,
                lib.di_event_prompt_cache_hit_tokens(ev),
                lib.di_event_draft_tokens(ev),
                lib.di_event_accepted_draft_tokens(ev),
            )
        return None  # a kind added later: ignored, as the header asks

    state = [copy, None]

    def deliver(user, ev, cell, last):
        """Route one event. Idempotent per callback: cell[0] keeps the copy once
        made, so a retry re-appends the same object (Request.__next__ drops an
        event that `is` the one it returned last) instead of copying twice."""
        req = routes.get(user)
        if req is None:  # not ours, or its Done was routed by an earlier try
            return
        out = cell[0]
        if out is None:
            kind = kind_of(ev)
            try:
                out = state[0](kind, ev, req)
            except BaseException as e:
                if not last or kind != _DONE:
                    raise
                # The copy keeps failing: the request still gets its one Done.
                st = lib.di_event_status(ev)
                out = Done(st, f"the binding could not copy the terminal event: {e!r}",
                           None, None, 0, 0, 0, None)
            if out is None:
                return
            cell[0] = out
        req._queue.append(out)
        if out.__class__ is Done:
            req._finished = True
            routes.pop(user, None)
        wake = req._notify
        if wake is not None:  # an asyncio request (_aio.py): wake its waiter
            wake()

    def note(e):
        if state[1] is None:
            state[1] = e

    def on_event(user, ev):
        # An exception raised in here (KeyboardInterrupt from a signal handler,
        # MemoryError) must not reach ctypes, which would print and drop it and
        # lose the event: it is kept in state[1] for the poller to raise after
        # di_poll returns, and the event is routed again (at most three tries,
        # written out: no loop, whose backward jump could take a signal outside
        # the try).
        cell = None
        try:
            cell = [None]
            deliver(user, ev, cell, False)
        except BaseException as e:  # noqa: B902 — re-raised by the poller
            try:
                note(e)
                if cell is None:
                    cell = [None]
                deliver(user, ev, cell, False)
            except BaseException as e2:  # noqa: B902
                try:
                    note(e2)
                    deliver(user, ev, cell, True)
                except BaseException as e3:  # noqa: B902
                    note(e3)

    return _lib.EVENT_FN(on_event), state


def _body_bytes(body) -> bytes:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, Mapping):
        return _json.dumps(body, ensure_ascii=False).encode("utf-8")
    raise TypeError(f"body: expected a dict, str or bytes, got {type(body).__name__}")



def _c_text(field: str, data: bytes) -> bytes:
    """data for a NUL-terminated di_request field; InvalidArgumentError naming
    the field when it holds a NUL byte (ctypes would pass the text cut there,
    so a grammar after the NUL would silently not apply), as the C++ wrapper
    and the Rust crate refuse it."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise error_for(1, f"{field}: contains a NUL byte at offset {nul}")
    return data


def _int32(field: str, value: int) -> int:
    """value for an int32_t di_request field; InvalidArgumentError naming the
    field when it does not fit (ctypes would keep its low 32 bits, so
    2**32 + 5 would pass as 5)."""
    if not -(2**31) <= value < 2**31:
        raise error_for(1, f"{field}: {value} does not fit in int32")
    return value

class Engine:
    """A loaded model and its worker thread (di_engine).

    Args:
        model_path: a .gguf file or a Hugging Face folder (config.json, *.safetensors).
        tokenizer_path: a tokenizer.json, a folder holding one, or a GGUF file;
            None: the model's own.
        n_threads: CPU threads of the forward pass (0: the CPUs online).
        n_ctx: tokens one sequence may hold, prompt and output (0: the model's
            training context, at most 4096).
        max_running: requests computed together at most (0: 16).
        kv_cache_bytes: the KV cache budget in bytes shared by all requests (0:
            room for 4 sequences of n_ctx tokens).
        kv_cache_type: the KV cache's storage type (di_kv_cache_type), as the
            CLI's --kv-cache-type names it: "f16" (default, as llama.cpp),
            "f32", "q8_0" or "q4_0" (ggml's blocks of 32: 0.53 and 0.28 of the
            f16 cache's bytes, so kv_cache_bytes holds 1.9x and 3.6x the tokens,
            at the cost of the rounding; they need a head dimension that is a
            multiple of 32 and the CPU, else UnsupportedError). Another value
            is a ValueError (InvalidArgumentError) naming the allowed ones.
        n_batch: tokens one forward step takes at most (0: 256).
        prefix_cache: True (default): a request whose prompt starts with full
            16-token blocks an earlier request computed reuses them
            (Done.prompt_cache_hit_tokens counts them); False: every request
            prefills its whole prompt.
        kv_host_cache_bytes: the prefix cache's host tier, blocks evicted from
            the KV cache kept compressed in memory up to this many bytes (0: none).
        kv_cache_dir: the prefix cache's disk tier, a directory where computed
            blocks are kept across restarts (None: none; docs/prefix-cache.md).
        kv_disk_cache_bytes: the disk tier's budget (0: 4 GiB).
        served_model_name: the name responses give as `model` (None: the model
            file's name without .gguf; the V4 encodings answer with the body's).
        speculative_tokens: speculative decoding, draft tokens each decoding
            request verifies per step at most (0: off; at most 64; None, the
            default: 8 when draft names a drafter or draft_model_path is given,
            as the CLI's --draft, else 0); greedy output is token for token the
            same (Done.draft_tokens and .accepted_draft_tokens count them;
            docs/speculative.md).
        speculative_fixed: False (default): how many drafts a step verifies is
            confidence-scheduled (acceptance rate against the measured step
            time); True: every proposal (fixed-length, as llama.cpp's).
        draft: the drafter, "auto" (default: the draft model when
            draft_model_path is given, else the model's own MTP layer or DSpark
            head when it has one, else prompt lookup), "prompt-lookup",
            "draft-model" or "mtp" (DeepSeek-V3's MTP module, DeepSeek-V4's MTP
            layer or DeepSeek-V4-Flash-DSpark's DSpark head; UnsupportedError
            for a model without one) (docs/speculative.md).
        draft_model_path: a smaller model sharing the model's tokenizer that
            drafts for it, or, for a DeepSeek-V4 GGUF, llama.cpp's MTP or DSpark
            GGUF of it (convert_hf_to_gguf.py --mtp / --dspark: it becomes the
            model's MTP layer or DSpark head) (None: none). Greedy output stays
            token for token the same; sampled drafts are kept by the
            min(1, p/q) rule.
        encoding: the prompt encoding of protocol requests, an Encoding (or its
            name, "r1"); None: the one the model declares.
        progress: called as progress(fraction) with fraction in [0, 1] while the
            model loads, on the calling thread. Returning True, or raising,
            cancels the load: the constructor then raises CancelledError (with the
            callback's exception as __cause__).

    Raises DeepinferError subclasses: DeepinferIOError (a missing or unreadable
    file, named), ModelFormatError, UnsupportedError, InvalidArgumentError (a
    field out of range, named), CancelledError; LibraryNotFoundError when the C
    library cannot be loaded.

    Thread-safety: submit, chat/messages/responses, Request.cancel and iteration
    may be used from any thread at once, close() included: close() waits for a
    thread inside di_poll to come out (at most POLL_MS) and for C calls in flight
    to return, then delivers every remaining event, so requests still running
    end with a Done whose status is CANCELLED; submit and cancel racing with it
    raise InvalidStateError / return False. Ctrl-C while the main thread iterates
    raises KeyboardInterrupt at once and loses no event.
    Use as a context manager, or call close(); the engine is closed when it is
    garbage collected, too.
    """

    def __init__(
        self,
        model_path,
        tokenizer_path=None,
        n_threads: int = 0,
        n_ctx: int = 0,
        max_running: int = 0,
        kv_cache_bytes: int = 0,
        encoding: Union[Encoding, str, int, None] = None,
        progress: Optional[Callable[[float], Optional[bool]]] = None,
        n_batch: int = 0,
        prefix_cache: bool = True,
        kv_host_cache_bytes: int = 0,
        kv_cache_dir=None,
        kv_disk_cache_bytes: int = 0,
        served_model_name: Optional[str] = None,
        speculative_tokens: Optional[int] = None,
        speculative_fixed: bool = False,
        draft: str = "auto",
        draft_model_path=None,
        device: str = "cpu",
        kv_cache_type: str = "f16",
    ):
        self._handle = None
        devices = {"cpu": 1, "cuda": 2}  # di_device
        if device not in devices:
            raise error_for(1, f"device: unknown device {device!r} (expected cpu or cuda)")
        if not isinstance(kv_cache_type, str) or kv_cache_type not in _lib.KV_CACHE_TYPES:
            raise error_for(
                1,
                f"kv_cache_type: unknown KV cache type {kv_cache_type!r} "
                "(expected f16, f32, q8_0 or q4_0)",
            )
        lib = self._lib = _lib.load()
        cfg = _lib.new_engine_config(lib)
        cfg.device = devices[device]
        cfg.model_path = os.fsencode(model_path)
        if tokenizer_path is not None:
            cfg.tokenizer_path = os.fsencode(tokenizer_path)
        if encoding is not None:
            if isinstance(encoding, str):
                try:
                    encoding = Encoding[encoding.upper()]
                except KeyError:
                    raise error_for(1, f"encoding: unknown encoding {encoding!r}") from None
            cfg.encoding = int(encoding)
        cfg.n_threads = n_threads
        cfg.n_ctx = n_ctx
        cfg.max_running = max_running
        cfg.kv_cache_bytes = kv_cache_bytes
        cfg.kv_cache_type = _lib.KV_CACHE_TYPES[kv_cache_type]
        cfg.n_batch = n_batch
        cfg.disable_prefix_cache = 0 if prefix_cache else 1
        cfg.kv_host_cache_bytes = kv_host_cache_bytes
        cfg.kv_disk_cache_bytes = kv_disk_cache_bytes
        if kv_cache_dir is not None:
            cfg.kv_cache_dir = os.fsencode(kv_cache_dir)
        if served_model_name is not None:
            cfg.served_model_name = served_model_name.encode("utf-8")
        if speculative_tokens is None:  # (the CLI's: a drafter named turns it on)
            speculative_tokens = 8 if draft != "auto" or draft_model_path is not None else 0
        cfg.speculative_tokens = speculative_tokens
        cfg.speculative_fixed = 1 if speculative_fixed else 0
        drafters = {"auto": 0, "prompt-lookup": 1, "draft-model": 2, "mtp": 3}
        if draft not in drafters:
            raise error_for(
                1,
                f"draft: unknown drafter {draft!r} "
                "(expected auto, prompt-lookup, draft-model or mtp)",
            )
        cfg.draft = drafters[draft]
        if draft_model_path is not None:
            cfg.draft_model_path = os.fsencode(draft_model_path)
        raised = []
        if progress is not None:

            def on_progress(_user, fraction):
                try:
                    return 1 if progress(fraction) is True else 0
                except BaseException as e:  # noqa: B902 — reported after create
                    raised.append(e)
                    return 1

            self._progress_fn = _lib.PROGRESS_FN(on_progress)
            cfg.progress = self._progress_fn
        out, err = c_void_p(), c_void_p()
        st = lib.di_engine_create(byref(cfg), byref(out), byref(err))
        if st:
            try:
                _raise(lib, st, err)
            except CancelledError as e:
                if raised:
                    raise e from raised[0]
                raise
        self._handle = out.value
        self._routes: Dict[int, "Request"] = {}
        self._keys = itertools.count(1)
        # Guarded by _cv: _polling/_poller (the thread in di_poll, or in
        # di_engine_destroy), _users (thread id -> C calls in flight on the handle
        # or the engine's tokenizer), _closing/_closer (close() is under way).
        self._lock = threading.RLock()  # C-level: `with` on it is safe from signals
        self._cv = threading.Condition(self._lock)
        self._waker = _thread.allocate_lock()  # the main thread waits on it (_next_main)
        self._polling = False
        self._poller = None
        self._users: Dict[int, int] = {}
        self._closing = False
        self._closer = None
        # The main thread (where Python runs signal handlers) never runs the
        # callback: a helper thread polls for it (_spawn_poller).
        self._helper = False  # a poll by the helper thread is asked for or under way
        self._helper_alive = False  # the helper thread exists
        self._helper_ms = POLL_MS
        self._helper_go = _thread.allocate_lock()  # released: the helper has work
        self._helper_go.acquire()
        self._helper_n = 0  # what its di_poll returned
        self._forward = None  # the exception its callback caught, for the main thread
        # referenced for the engine's lifetime; _cb_state: see _make_callback
        self._callback, self._cb_state = _make_callback(self)
        self._tokenizer = None

    # ---- C calls excluded from close() ----
    def _guarded(self, fn, *args, closed=_RAISE):
        """fn(*args) — a C call using the handle or the engine's tokenizer — with
        di_engine_destroy kept out until it returns: the call is counted in
        flight under the lock, and close() waits for the count to drain. When
        the engine is closed or closing, returns `closed` (raises
        InvalidStateError by default) without calling fn."""
        me = threading.get_ident()
        users = self._users
        held = False
        try:
            with self._lock:
                if self._closing or self._handle is None:
                    if closed is _RAISE:
                        raise error_for(10, "the engine is closed")
                    return closed
                c = users.get(me, 0) + 1
                users[me] = c
                held = True  # no call between the count and this: nothing can raise
            return fn(*args)
        finally:
            if held:
                with self._lock:
                    c = users[me] - 1
                    if c:
                        users[me] = c
                    else:
                        del users[me]
                    if self._closing and not users:
                        self._notify()

    def _notify(self) -> None:
        """Wake every thread waiting for the engine (call with the lock held)."""
        self._cv.notify_all()
        if self._waker.locked():
            try:
                self._waker.release()
            except RuntimeError:
                pass

    def _call(self, fn, *args, closed=_RAISE):
        """fn(handle, *args) under _guarded."""
        return self._guarded(self._call_h, fn, args, closed=closed)

    def _call_h(self, fn, args):
        return fn(self._handle, *args)

    # ---- properties ----
    @property
    def encoding(self) -> Optional[Encoding]:
        """The prompt encoding of protocol requests, or None (protocol requests are
        then refused with UnsupportedError). InvalidStateError once closed."""
        e = self._call(self._lib.di_engine_encoding)
        try:
            return Encoding(e) if e else None
        except ValueError:
            return e

    @property
    def served_model_name(self) -> str:
        """The name responses give as `model` (served_model_name as resolved)."""
        return self._call(self._lib.di_engine_served_model_name).decode("utf-8")

    @property
    def model_info(self) -> dict:
        """What the engine loaded (di_engine_model_info): name, architecture,
        family, parameters, formats {type: {tensors, parameters, bytes}},
        context_length, chat_template, special_tokens, encoding, …"""
        return _json.loads(self._call(self._lib.di_engine_model_info, None).decode("utf-8"))

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary size: prompt token ids must be below it."""
        return self._call(self._lib.di_engine_vocab_size)

    @property
    def context_length(self) -> int:
        """Tokens one request may hold, prompt and output (n_ctx as resolved)."""
        return self._call(self._lib.di_engine_context_length)

    @property
    def pending(self) -> int:
        """Requests accepted whose Done has not been delivered yet."""
        return self._call(self._lib.di_engine_pending)

    @property
    def kv_cache_stats(self) -> KvCacheStats:
        """The KV cache's occupancy now (di_engine_kv_cache_stats): blocks used,
        cached by the prefix cache and free, tokens held, running requests, and
        the prefix cache's query/hit/eviction counters. Once a request's Done has
        been delivered its blocks are no longer counted as used. Thread-safe;
        InvalidStateError once closed."""
        raw = _lib.new_kv_cache_stats(self._lib)  # the library writes its size at most
        err = c_void_p()
        st = self._call(self._lib.di_engine_kv_cache_stats, byref(raw), byref(err))
        if st != 0:
            _raise(self._lib, st, err)
        return KvCacheStats(**{name: getattr(raw, name) for name, _ in raw._fields_[1:]})

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        """The engine's tokenizer (borrowed: usable while the engine is open), or
        None when the engine has none (token requests only, no text events)."""
        if self._tokenizer is None:
            h = self._call(self._lib.di_engine_tokenizer)
            if h:
                self._tokenizer = Tokenizer(h, owner=self)
        return self._tokenizer

    # ---- requests ----
    def submit(
        self,
        prompt: Union[str, Sequence[int], None] = None,
        *,
        protocol: Union[Protocol, str, int, None] = None,
        body=None,
        max_tokens: int = 0,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        min_p: Optional[float] = None,
        repetition_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        seed: Optional[int] = None,
        logit_bias: Optional[Mapping[int, float]] = None,
        stop_tokens: Optional[Sequence[int]] = None,
        ignore_eos: bool = False,
        chunks: bool = True,
        logprobs: bool = False,
        top_logprobs: int = 0,
        json_schema=None,
        grammar: Optional[str] = None,
        regex: Optional[str] = None,
    ) -> "Request":
        """Submit a request; it is checked (and a protocol body rendered and
        tokenized) now, on this thread, and then computed by the engine's worker.

        A token request gives `prompt`: token ids (each below vocab_size), or a
        str encoded with the engine's tokenizer as plain text (special-token
        spellings stay text; encode with engine.tokenizer.encode(text,
        special=True) to recognise them). A protocol request gives `protocol`
        (Protocol.CHAT/MESSAGES/RESPONSES or "chat"/"messages"/"responses") and
        `body`, the request JSON (a dict, or a str/bytes of JSON).

        Sampling (None: the library's default, di_request_init): temperature in
        [0, 100] (0, or below 1e-5: greedy; default 1), top_p in (0, 1], top_k >= 0
        (0: off), min_p in [0, 1], repetition_penalty in (0, 100], presence_penalty and
        frequency_penalty in [-2, 2], seed (-1 or None: drawn from the clock; the
        same seed, prompt and settings give the same tokens whatever else runs),
        logit_bias {token id: bias in [-100, 100]}, stop_tokens (token requests:
        ids that end the output), ignore_eos (token requests: do not stop at the
        end-of-sequence token), max_tokens (output tokens at most; 0: to the
        context limit, or the reference's default for a protocol request; more
        than the context leaves is ContextLengthError). A protocol body's own
        sampling fields (max_tokens too) win over these, which give what the body
        leaves open (docs/api.md, "Sampling precedence"). chunks=False drops
        Chunk events (saves their copies when only text and tool calls are used).

        Log probabilities (token requests; a protocol body asks with its own
        fields): logprobs=True gives each Tokens event its tokens' log
        probabilities (Tokens.logprobs), and top_logprobs in [0, 20] the most
        likely tokens at each position (Tokens.top_logprobs): the log-softmax of
        the model's raw logits, whatever the sampling settings (di_request's
        logprobs / top_logprobs). top_logprobs > 0 without logprobs is
        InvalidArgumentError.

        Constrained decoding (token requests; at most one of the three):
        json_schema (a dict, or a str of JSON) makes the output one JSON text the
        schema accepts; grammar a GBNF grammar (llama.cpp's format, start rule
        `root`); regex a regular expression the whole output matches
        (docs/grammar.md lists the formats). One that does not compile is
        InvalidRequestError naming the rule, schema path or offset; an engine
        without a tokenizer raises UnsupportedError.

        Returns a Request; iterate it for events. Raises, with nothing queued:
        InvalidArgumentError (a bad field, a token id outside the vocabulary —
        the message names it), InvalidRequestError (a body the codec refuses,
        naming the field), UnsupportedError (a protocol request to an engine
        without an encoding), ContextLengthError, InvalidStateError (the engine
        is closed, or close() is under way on some thread). Thread-safe: the
        tokenizer and di_submit calls are kept out of di_engine_destroy (close()
        waits for them)."""
        lib = self._lib
        req = _lib.new_request(lib)
        keep = []  # buffers that must live through di_submit
        if protocol is not None or body is not None:
            if prompt is not None:
                raise TypeError("submit: give either a prompt or a protocol body, not both")
            if protocol is None or body is None:
                raise TypeError("submit: a protocol request needs both protocol and body")
            if isinstance(protocol, str):
                try:
                    protocol = Protocol[protocol.upper()]
                except KeyError:
                    raise error_for(1, f"protocol: unknown protocol {protocol!r}") from None
            data = _body_bytes(body)
            keep.append(data)
            req.protocol = int(protocol)
            req.json = data
            req.json_len = len(data)
        else:
            if prompt is None:
                raise TypeError("submit: a prompt (str or token ids) is required")
            if isinstance(prompt, str):
                tok = self.tokenizer
                if tok is None:
                    raise error_for(1, "prompt: a str prompt needs the engine's tokenizer")
                prompt = tok.encode(prompt)
            arr = (c_int32 * len(prompt))(*prompt)
            keep.append(arr)
            req.tokens = arr
            req.n_tokens = len(prompt)
        req.max_tokens = max_tokens
        req.ignore_eos = 1 if ignore_eos else 0
        # sampling fields left None keep di_request_init's defaults
        for field, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
                             ("min_p", min_p), ("repetition_penalty", repetition_penalty),
                             ("presence_penalty", presence_penalty),
                             ("frequency_penalty", frequency_penalty), ("seed", seed)):
            if value is not None:
                setattr(req, field, value)
        if logit_bias:
            ids = (c_int32 * len(logit_bias))(*logit_bias.keys())
            vals = (c_float * len(logit_bias))(*logit_bias.values())
            keep += [ids, vals]
            req.logit_bias_ids = ids
            req.logit_bias_values = vals
            req.n_logit_bias = len(logit_bias)
        if stop_tokens:
            st = (c_int32 * len(stop_tokens))(*stop_tokens)
            keep.append(st)
            req.stop_tokens = st
            req.n_stop_tokens = len(stop_tokens)
        if top_logprobs and not logprobs:
            # the library's "requires logprobs 1" in this API's words
            raise error_for(1, "top_logprobs: requires logprobs=True")
        req.logprobs = 1 if logprobs else 0
        req.top_logprobs = _int32("top_logprobs", top_logprobs)
        if json_schema is not None:
            if isinstance(json_schema, Mapping):
                json_schema = _json.dumps(json_schema, ensure_ascii=False)
            if isinstance(json_schema, str):
                json_schema = json_schema.encode("utf-8")
            req.json_schema = _c_text("json_schema", bytes(json_schema))
        if grammar is not None:
            req.grammar = _c_text("grammar", grammar.encode("utf-8"))
        if regex is not None:
            req.regex = _c_text("regex", regex.encode("utf-8"))
        req.on_event = self._callback
        key = next(self._keys)
        req.user_data = key
        r = Request(self, chunks)
        # Registered before di_submit: another thread may be polling and deliver
        # this request's first events before di_submit returns here.
        self._routes[key] = r
        rid, err = c_uint64(), c_void_p()
        st = -1
        try:
            st = self._call(lib.di_submit, byref(req), byref(rid), byref(err))
        finally:
            if st:
                self._routes.pop(key, None)
        if st:
            _raise(lib, st, err)
        r.id = rid.value
        return r

    def chat(self, body, **kwargs) -> "Request":
        """submit(protocol=Protocol.CHAT, body=body, **kwargs): an OpenAI Chat
        Completions request."""
        return self.submit(protocol=Protocol.CHAT, body=body, **kwargs)

    def messages(self, body, **kwargs) -> "Request":
        """submit(protocol=Protocol.MESSAGES, body=body, **kwargs): an Anthropic
        Messages request."""
        return self.submit(protocol=Protocol.MESSAGES, body=body, **kwargs)

    def responses(self, body, **kwargs) -> "Request":
        """submit(protocol=Protocol.RESPONSES, body=body, **kwargs): an OpenAI
        Responses request."""
        return self.submit(protocol=Protocol.RESPONSES, body=body, **kwargs)

    def generate(self, prompt, **kwargs) -> Result:
        """submit(prompt, **kwargs).result(): run a token request to its end."""
        return self.submit(prompt, **kwargs).result()

    def poll(self, timeout_ms: int = 0) -> int:
        """Deliver the events computed so far into their requests' queues (waiting
        up to timeout_ms for the first one); returns how many. Iterating a Request
        does this by itself: poll() is for a host that wants to drive the engine
        from its own loop. Blocks while another thread polls; returns 0 once the
        engine is closed or closing. An exception raised on this thread while the
        events were copied (KeyboardInterrupt from a signal handler) is raised
        here, after every event was routed."""
        me = threading.get_ident()
        if me == _main_ident():
            waiter, started = self._waker, False
            while True:
                with self._lock:
                    if not self._helper:
                        if started:
                            n = self._helper_n
                            break
                        if self._handle is None or self._closing:
                            return 0
                        self._spawn_poller(timeout_ms)
                        started = True
                    waiter.acquire(False)  # locked: the helper's _notify() opens it
                waiter.acquire(True, 1.0)
            self._raise_forwarded()
            if n < 0:
                raise error_for(-n, "di_poll failed")
            return n
        polling = False
        try:
            with self._lock:
                while self._polling or self._closing:
                    if self._handle is None or self._closer == me:
                        return 0
                    self._cv.wait()
                if self._handle is None:
                    return 0
                self._polling = polling = True  # no call in between: nothing can raise
                self._poller = me
            n = self._lib.di_poll(self._handle, timeout_ms)
        finally:
            if polling:
                self._release_poller()
        if n < 0:
            raise error_for(-n, "di_poll failed")
        return n

    def _spawn_poller(self, timeout_ms: int) -> None:
        """Have the helper thread take the poller role and run one di_poll (called
        under the lock by the main thread, with no helper poll pending). Python
        runs signal handlers on the main thread only, at the first bytecode of any
        function — the callback's first line included, before any try, where an
        exception would be dropped by ctypes with its event. So the main thread
        never runs the callback: it waits on a raw lock (Ctrl-C interrupts the
        wait) while the helper routes the events. The helper is one long-lived
        thread per engine (a new thread per poll waits for the scheduler, ms on a
        loaded machine), ended by close() or HELPER_IDLE_S without work."""
        self._helper = True
        self._helper_ms = timeout_ms
        if self._helper_alive:
            if self._helper_go.locked():
                try:
                    self._helper_go.release()
                except RuntimeError:
                    pass
            return
        self._helper_alive = True
        try:
            # A raw thread: Thread.start() waits in Python code that a signal
            # handler's exception can break halfway.
            _thread.start_new_thread(self._helper_main, ())
        except BaseException:
            self._helper = self._helper_alive = False
            raise

    def _helper_main(self) -> None:
        go = self._helper_go
        idle = False
        while True:
            with self._lock:
                work = self._helper
                if not work and (idle or self._handle is None or self._closing):
                    self._helper_alive = False
                    return
            if work:
                self._helper_poll(self._helper_ms)
                idle = False
            else:
                idle = not go.acquire(True, HELPER_IDLE_S)

    def _helper_poll(self, timeout_ms: int) -> None:
        me = threading.get_ident()
        cv = self._cv
        polling = False
        n = 0
        try:
            try:
                with self._lock:
                    while self._polling and not self._closing:
                        cv.wait()
                    if self._closing or self._handle is None:
                        return
                    self._polling = polling = True
                    self._poller = me
                n = self._lib.di_poll(self._handle, timeout_ms)
            finally:
                if polling:
                    self._release_poller()
        except BaseException as e:  # noqa: B902 — raised on the main thread
            if self._forward is None:
                self._forward = e
        finally:
            with self._lock:
                self._helper_n = n
                self._helper = False
                self._notify()

    def _raise_forwarded(self) -> None:
        e = self._forward
        if e is not None:
            self._forward = None
            raise e

    def _release_poller(self) -> None:
        """Give the poller role up, wake every waiting thread, and raise what the
        callback caught meanwhile (its event was routed all the same)."""
        with self._lock:
            self._polling = False
            self._poller = None
            self._notify()
        state = self._cb_state
        e = state[1]
        if e is not None:
            state[1] = None
            raise e

    def close(self) -> None:
        """Stop the engine (di_engine_destroy): requests still running are
        cancelled and their remaining events, a Done with status CANCELLED and
        message "the engine was destroyed" included, are queued to their Request
        objects, which can still be iterated. Idempotent.

        From the moment close() starts, submit() raises InvalidStateError,
        Request.cancel() returns False and no thread starts polling; close()
        waits for a thread in di_poll to return (at most POLL_MS) and for C calls
        in flight on other threads (submit, cancel, the tokenizer, the
        properties) to return, then destroys: the handle is never used after
        di_engine_destroy. A close() on another thread meanwhile waits for this
        one to finish. Thread-safe. Raises InvalidStateError, closing nothing,
        when called on a thread that is itself inside a call on this engine (a
        signal handler or finalizer run in the middle of iteration or submit):
        close it after that call returns."""
        me = threading.get_ident()
        if me == _main_ident():
            with self._lock:
                if self._handle is None:
                    return
                if self._poller == me or me in self._users:
                    raise error_for(10, _CLOSE_INSIDE)
            # di_engine_destroy runs the callbacks: on a helper thread, as polls.
            # Interrupted (Ctrl-C), close() raises and the close goes on there.
            out, done = [], _thread.allocate_lock()
            done.acquire()
            _thread.start_new_thread(self._close_capture, (out, done))
            done.acquire()
            if out:
                raise out[0]
            return
        took = closer = False
        try:
            with self._lock:
                if self._handle is None:
                    return
                if self._closing:
                    if self._closer == me:  # a signal handler inside close()
                        return
                    while self._closing:
                        self._cv.wait()
                    return
                if self._poller == me or me in self._users:
                    raise error_for(10, _CLOSE_INSIDE)
                self._closing = closer = True
                self._closer = me
                while self._polling or self._users:
                    self._cv.wait()
                self._polling = took = True
                self._poller = me
            st = self._lib.di_engine_destroy(self._handle)
            if st:
                raise error_for(st, "di_engine_destroy refused")
            self._handle = None
        finally:
            if closer:
                with self._lock:
                    self._closing = False
                    self._closer = None
                    self._notify()
                    if self._helper_go.locked():  # the idle helper thread ends now
                        try:
                            self._helper_go.release()
                        except RuntimeError:
                            pass
            if took:
                self._release_poller()

    def _close_capture(self, out, done) -> None:
        try:
            self.close()
        except BaseException as e:  # noqa: B902 — raised by close() on the main thread
            out.append(e)
        finally:
            done.release()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            # At interpreter exit a helper thread may be frozen holding the poller
            # role: leave the engine to the process's end.
            if getattr(self, "_handle", None) is not None and not sys.is_finalizing():
                self.close()
        except Exception:
            pass


class Request:
    """One submitted request. Iterate it for its events (Tokens, Text, Reasoning,
    ToolCallDelta, ToolCall, Chunk; last, exactly once, Done). Iteration blocks
    until the next event is computed, polling the engine when no other thread is;
    it ends after Done. A failed or cancelled request is not raised while
    iterating: its Done carries the status.

    Attributes:
        id: the engine's id of the request (> 0).
        done: the Done event once it has been yielded (or collected), else None.

    Thread-safety: iterate a Request from one thread at a time; different
    Requests may be iterated from different threads at once. cancel() may be
    called from any thread."""

    __slots__ = ("_engine", "_queue", "_finished", "_chunks", "_last", "_notify", "id", "done",
                 "__weakref__")

    def __init__(self, engine: Engine, chunks: bool):
        self._engine = engine
        self._queue = deque()
        self._finished = False  # Done is in the queue (set by the polling thread)
        self._chunks = chunks
        self._last = None  # the event __next__ returned last
        # Called (no arguments, must not raise) by the polling thread after each
        # event routed here: the asyncio wrapper's wake-up (_aio.AsyncRequest).
        self._notify = None
        self.id = 0
        self.done: Optional[Done] = None

    def _take(self) -> Optional[Event]:
        """The next queued event, or None when the queue is empty (the
        non-blocking half of __next__, for the asyncio wrapper)."""
        q = self._queue
        while q:
            ev = q[0]
            del q[0]
            if ev is self._last:
                continue
            self._last = ev
            if ev.__class__ is Done:
                self.done = ev
            return ev
        return None

    def __iter__(self):
        return self

    def __next__(self) -> Event:
        q = self._queue
        while q:  # fast path: no lock; the queue is only popped by this thread
            ev = q[0]
            del q[0]  # not popleft(): a signal handler may run after a call returns
            if ev is self._last:  # routed twice after an exception in the callback
                continue
            self._last = ev
            if ev.__class__ is Done:
                self.done = ev
            return ev
        if self.done is not None:
            raise StopIteration
        engine = self._engine
        cv = engine._cv
        me = threading.get_ident()
        if me == _main_ident():
            return self._next_main(engine)
        while True:
            polling = False
            try:
                with engine._lock:
                    # Wait while another thread polls (it routes our events to q)
                    # or closes (di_engine_destroy delivers what is left).
                    while not q and not self._finished and (engine._polling or engine._closing):
                        if engine._closer == me:  # close() is on this thread's stack
                            raise error_for(10, f"request {self.id}: the engine is closing")
                        cv.wait()
                    if not q:
                        if self._finished:  # our Done was taken already
                            raise StopIteration
                        if engine._handle is None:  # cannot happen: close() delivers Done
                            raise error_for(10, f"request {self.id}: the engine is closed")
                        # Taken inside the try: an exception from here on (a signal
                        # handler raising) still gives the role up in the finally.
                        engine._polling = polling = True
                        engine._poller = me
                if polling:
                    n = engine._lib.di_poll(engine._handle, POLL_MS)
                    if n < 0:
                        raise error_for(-n, "di_poll failed")
            finally:
                if polling:
                    engine._release_poller()
            ev = self._take()
            if ev is not None:
                return ev
            if self.done is not None:
                raise StopIteration

    def _next_main(self, engine: Engine) -> Event:
        """__next__ on the main thread, where Python runs signal handlers: helper
        threads poll (Engine._spawn_poller) and this thread only waits, on a raw
        lock (interruptible; threading.Condition.wait is not safe against a
        handler's exception), so KeyboardInterrupt is raised here and loses no
        event. An event is taken off the queue with q[0] / del q[0], between which
        Python runs no handler."""
        q = self._queue
        lock = engine._lock
        waiter = engine._waker
        while True:
            with lock:
                wait = not q and not self._finished and engine._forward is None
                if wait:
                    if engine._handle is None:  # cannot happen: close() delivers Done
                        raise error_for(10, f"request {self.id}: the engine is closed")
                    if not engine._helper and not engine._polling and not engine._closing:
                        engine._spawn_poller(POLL_MS)
                    waiter.acquire(False)  # locked: the next _notify() opens it
            if wait:
                waiter.acquire(True, 1.0)
                continue
            engine._raise_forwarded()
            # From taking the event to returning it: no call, so no signal
            # handler can run in between (nor any finally clause).
            while q:
                ev = q[0]
                del q[0]
                if ev is self._last:
                    continue
                self._last = ev
                if ev.__class__ is Done:
                    self.done = ev
                return ev
            if self._finished or self.done is not None:
                raise StopIteration

    def cancel(self) -> bool:
        """Cancel the request (di_cancel): it stops at the engine's next step and
        its Done has status CANCELLED (events produced before may still arrive
        first). Returns True when the cancel was accepted (also when already
        being cancelled), False when the request had already finished (its Done
        is computed) or the engine is closed or closing (close() delivers its
        Done). Thread-safe; never blocks on polling (close() waits for a cancel
        in flight before it destroys)."""
        engine = self._engine
        lib = engine._lib
        err = c_void_p()
        st = engine._call(lib.di_cancel, self.id, byref(err), closed=None)
        if st is None:
            return False
        if st == 0:
            return True
        if st == Status.INVALID_STATE:
            lib.di_error_free(err)
            return False
        _raise(lib, st, err)

    def result(self) -> Result:
        """Iterate the request to its end and return what it produced (only events
        not yet taken by iteration are collected). Raises the Done's status as a
        DeepinferError subclass (CancelledError for a cancelled request,
        ContextLengthError, …) with the partial Result as the exception's
        `result` attribute; returns the Result when the status is OK."""
        b = _ResultBuilder()
        for ev in self:
            b.add(ev)
        return b.finish(self.done)

    def __repr__(self):
        state = "done" if self.done else ("finished" if self._finished else "running")
        return f"<deepinfer.Request id={self.id} {state}>"
