"""asyncio: AsyncEngine and AsyncRequest, on the engine's event descriptor.

No thread pool and no polling thread: the engine's di_engine_event_fd (readable
exactly while events are queued) is registered with the running loop
(loop.add_reader); when it wakes, the loop's thread takes the engine's poller
role and calls di_poll(engine, 0), and the engine's one C callback
(_engine._make_callback) routes each event into its request's queue exactly as
for the blocking API. An AsyncRequest is a Request whose `_notify` hook wakes the
coroutine waiting for it: directly when the loop's thread delivered the event,
through loop.call_soon_threadsafe when another thread did (a blocking iterator
polling on its own thread routes the asyncio requests' events too). So blocking
and asyncio requests may share one engine.

docs/python.md ("asyncio") is the guide.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Optional

from ._engine import Engine, Request, Result, _ResultBuilder
from ._errors import error_for
from .events import Event, Protocol

#: When another thread holds the poller role as the descriptor wakes, the reader
#: steps aside for this long (seconds) instead of spinning on the level-triggered
#: descriptor while that thread's di_poll delivers the events.
REARM_S = 0.002


class AsyncRequest:
    """A request submitted through AsyncEngine. Iterate it with `async for` for
    its events (the same classes as Request's: Tokens, Text, Reasoning,
    ToolCallDelta, ToolCall, Chunk, and last, once, Done), or await it for the
    complete Result (`await engine.chat(body)`; raises the Done's status as a
    DeepinferError subclass, the partial Result as `exc.result`, as
    Request.result does).

    Cancelling the task that awaits it or iterates it (task.cancel(),
    asyncio.wait_for's timeout, a TaskGroup failing) cancels the request
    (di_cancel): the engine stops it at its next step; iterating it again yields
    what came before the cancel and a Done with status CANCELLED.

    Attributes: id (the engine's id), done (the Done once yielded, else None).

    One coroutine at a time iterates or awaits one AsyncRequest, on the loop it
    was submitted on; cancel() may be called from any thread."""

    __slots__ = ("_req", "_loop", "_thread", "_waiter", "_builder", "__weakref__")

    def __init__(self, req: Request, loop: asyncio.AbstractEventLoop, thread: int):
        self._req = req
        self._loop = loop
        self._thread = thread
        self._waiter: Optional[asyncio.Future] = None
        self._builder: Optional[_ResultBuilder] = None
        req._notify = self._notify

    @property
    def id(self) -> int:
        return self._req.id

    @property
    def done(self):
        return self._req.done

    def cancel(self) -> bool:
        """Cancel the request (di_cancel); as Request.cancel."""
        return self._req.cancel()

    # Called by the polling thread (the engine's callback) after each event
    # routed to this request; never raises.
    def _notify(self) -> None:
        if threading.get_ident() == self._thread:
            self._wake()  # the loop's own reader: the waiting coroutine is suspended
            return
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody waits
            pass

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def __aiter__(self) -> "AsyncRequest":
        return self

    async def __anext__(self) -> Event:
        req = self._req
        while True:
            ev = req._take()
            if ev is not None:
                return ev
            if req.done is not None:
                raise StopAsyncIteration
            if asyncio.get_running_loop() is not self._loop:
                raise RuntimeError("an AsyncRequest is iterated on the loop it was submitted on")
            w = self._waiter = self._loop.create_future()
            try:
                await w
            except asyncio.CancelledError:
                req.cancel()  # the task was cancelled: so is the request
                raise
            finally:
                self._waiter = None

    async def result(self) -> Result:
        """Iterate to the end and return the Result (events not yet taken by
        `async for`); raises the Done's status as Request.result does. What an
        await collected before its task was cancelled is kept: awaiting the
        request again returns (or raises with, as exc.result) all of it."""
        if self._builder is None:
            self._builder = _ResultBuilder()
        b = self._builder
        async for ev in self:
            b.add(ev)
        return b.finish(self._req.done)

    def __await__(self):
        return self.result().__await__()

    def __repr__(self):
        return "<deepinfer.AsyncRequest " + repr(self._req)[len("<deepinfer.Request "):]


class AsyncEngine:
    """An Engine driven by an asyncio event loop.

        async with deepinfer.AsyncEngine("SmolLM2-135M-Instruct.Q4_1.gguf") as engine:
            async for ev in engine.chat(body):         # stream
                ...
            result = await engine.chat(body)           # or the whole Result

    AsyncEngine(*args, **kwargs) loads a model as Engine(*args, **kwargs) does
    (on the calling thread: it blocks the loop while the model loads; use
    `await asyncio.to_thread(deepinfer.AsyncEngine, path)` to avoid that) and
    owns it; AsyncEngine.wrap(engine) drives an Engine the caller owns (closing
    the AsyncEngine then only detaches it from the loop). `engine` is the
    underlying Engine (its tokenizer, encoding, vocab_size, context_length;
    blocking requests may run on it at the same time).

    submit / chat / messages / responses take Engine.submit's arguments, check
    and queue the request at once (raising its errors: InvalidArgumentError,
    InvalidRequestError, UnsupportedError, ContextLengthError,
    InvalidStateError) and return an AsyncRequest. They must be called with a
    loop running on this thread; the first call binds the engine's event
    descriptor to that loop (one loop at a time: a new loop may take over once
    the previous one is closed).

    Callbacks run on the loop's thread inside di_poll(engine, 0) and only copy
    events, so the loop is never blocked for longer than the copy. Close with
    `async with`, aclose() or close(): requests still running end with a Done
    whose status is CANCELLED."""

    def __init__(self, *args, **kwargs):
        self._init(Engine(*args, **kwargs), True)

    @classmethod
    def wrap(cls, engine: Engine) -> "AsyncEngine":
        """An AsyncEngine over an Engine the caller keeps owning."""
        self = cls.__new__(cls)
        self._init(engine, False)
        return self

    def _init(self, engine: Engine, owns: bool) -> None:
        self.engine = engine
        self._owns = owns
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread = 0
        self._fd = -1
        self._armed = False

    # ---- the event descriptor in the loop ----
    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()  # RuntimeError outside a running loop
        if loop is self._loop:
            if not self._armed:
                self._arm()
            return loop
        if self._loop is not None and not self._loop.is_closed():
            raise RuntimeError("this AsyncEngine is bound to another event loop that is "
                               "still open")
        e = self.engine
        fd = e._call(e._lib.di_engine_event_fd)
        if fd < 0:
            raise error_for(-fd, "di_engine_event_fd failed")
        self._loop, self._thread, self._fd = loop, threading.get_ident(), fd
        self._armed = False
        self._arm()
        return loop

    def _arm(self) -> None:
        loop = self._loop
        if self._armed or loop is None or loop.is_closed():
            return
        e = self.engine
        if e._handle is None or e._closing:
            return
        loop.add_reader(self._fd, self._on_readable)
        self._armed = True

    def _disarm(self) -> None:
        if self._armed:
            self._armed = False
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.remove_reader(self._fd)

    def _on_readable(self) -> None:
        """The descriptor woke: deliver what is queued (di_poll(engine, 0)) on the
        loop's thread, under the engine's poller role."""
        e = self.engine
        me = threading.get_ident()
        with e._lock:
            if e._handle is None or e._closing:
                stop, busy = True, False
            else:
                stop, busy = False, e._polling
                if not busy:
                    e._polling = True
                    e._poller = me
        if stop:
            self._disarm()  # close() delivers what is left
            return
        if busy:
            # Another thread is in di_poll: it routes these events and wakes our
            # requests. Step aside rather than spin on the readable descriptor.
            self._disarm()
            self._loop.call_later(REARM_S, self._arm)
            return
        try:
            n = e._lib.di_poll(e._handle, 0)
        finally:
            e._release_poller()  # raises what the callback caught (after routing)
        if n < 0:
            raise error_for(-n, "di_poll failed")

    # ---- requests ----
    def submit(self, prompt=None, **kwargs) -> AsyncRequest:
        """Engine.submit(prompt, **kwargs) as an AsyncRequest (see the class)."""
        loop = self._bind()
        return AsyncRequest(self.engine.submit(prompt, **kwargs), loop, self._thread)

    def chat(self, body, **kwargs) -> AsyncRequest:
        """An OpenAI Chat Completions request (Engine.chat)."""
        return self.submit(protocol=Protocol.CHAT, body=body, **kwargs)

    def messages(self, body, **kwargs) -> AsyncRequest:
        """An Anthropic Messages request (Engine.messages)."""
        return self.submit(protocol=Protocol.MESSAGES, body=body, **kwargs)

    def responses(self, body, **kwargs) -> AsyncRequest:
        """An OpenAI Responses request (Engine.responses)."""
        return self.submit(protocol=Protocol.RESPONSES, body=body, **kwargs)

    async def generate(self, prompt, **kwargs) -> Result:
        """await submit(prompt, **kwargs): a token request run to its end."""
        return await self.submit(prompt, **kwargs)

    # ---- closing ----
    def close(self) -> None:
        """Detach from the loop and, when this AsyncEngine owns its Engine, close
        it (Engine.close: blocking for at most one other thread's poll, then
        delivering every remaining event, which wakes the requests' coroutines).
        Call it on the loop's thread (or after the loop closed). Idempotent."""
        self._disarm()
        if self._owns:
            self.engine.close()

    async def aclose(self) -> None:
        """close(), in a coroutine."""
        self.close()

    async def __aenter__(self) -> "AsyncEngine":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        return f"<deepinfer.AsyncEngine {'owning' if self._owns else 'wrapping'} {self.engine!r}>"
