"""close() racing with submit/cancel on other threads, and exceptions raised
inside the event callback (a signal handler's KeyboardInterrupt, a MemoryError):
no C call on a destroyed engine, no lost or doubled event, no thread left hanging."""

import collections
import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import pytest

import deepinfer
from deepinfer import Done, Finish, Status, Tokens
from conftest import TINY

HERE = pathlib.Path(__file__).resolve().parent

# C functions that take the engine handle (or its tokenizer): none may start
# after di_engine_destroy has started, and destroy must not start while one runs.
_ON_HANDLE = {
    "di_submit", "di_cancel", "di_poll", "di_engine_pending", "di_engine_vocab_size",
    "di_engine_context_length", "di_engine_encoding", "di_engine_tokenizer",
    "di_tokenizer_encode", "di_tokenizer_decode", "di_tokenizer_token_id",
    "di_tokenizer_vocab_size",
}


class CallChecker:
    """Stands in for engine._lib: forwards every function, and records misuse of
    the handle around di_engine_destroy (a use after free in C, which a release
    build need not crash on)."""

    def __init__(self, lib):
        self._real = lib
        self._mu = threading.Lock()
        self.in_flight = 0
        self.destroying = False
        self.misuse = []
        self.calls = collections.Counter()

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if name == "di_engine_destroy":

            def destroy(h):
                with self._mu:
                    if self.in_flight:
                        self.misuse.append(f"destroy with {self.in_flight} call(s) in flight")
                    self.destroying = True
                return fn(h)

            return destroy
        if name not in _ON_HANDLE:
            return fn

        def call(*args):
            with self._mu:
                self.calls[name] += 1
                if self.destroying:
                    self.misuse.append(f"{name} after di_engine_destroy started")
                self.in_flight += 1
            try:
                return fn(*args)
            finally:
                with self._mu:
                    self.in_flight -= 1

        return call


def race_round(engine, make_prompt, seed):
    rng = random.Random(seed)
    checker = engine._lib = CallChecker(engine._lib)
    stop = threading.Event()
    reqs, errors, cancels = [], [], collections.Counter()

    def submitter():
        while not stop.is_set():
            try:
                reqs.append(engine.submit(make_prompt(), max_tokens=4))
            except deepinfer.InvalidStateError as e:
                assert e.status == Status.INVALID_STATE and "closed" in e.message
                time.sleep(0.0005)
            except BaseException as e:  # reported below
                errors.append(e)
                return

    def canceller():
        while not stop.is_set():
            try:
                if reqs:
                    cancels[rng.choice(reqs).cancel()] += 1
            except BaseException as e:  # cancel never raises for a closed engine
                errors.append(e)
                return

    threads = [threading.Thread(target=f, daemon=True)
               for f in (submitter, submitter, canceller, canceller)]
    for t in threads:
        t.start()
    time.sleep(0.005 + rng.random() * 0.03)
    engine.close()
    time.sleep(0.002)  # the threads keep submitting and cancelling after close
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a submit or cancel hung"
    assert not errors, errors[0]
    assert checker.misuse == [], checker.misuse[:5]
    assert checker.calls["di_submit"] >= 1
    with pytest.raises(deepinfer.InvalidStateError) as info:
        engine.submit(make_prompt())
    assert info.value.status_name == "DI_ERR_INVALID_STATE"
    for r in reqs:
        assert r.cancel() is False
        done = [ev for ev in r if isinstance(ev, Done)]
        assert len(done) == 1 and r.done is done[0]
    return len(reqs)


def test_close_racing_submit_and_cancel():
    """Threads submitting and cancelling in a loop while close() runs: submit
    raises InvalidStateError, cancel returns a bool, no C call uses the handle
    once di_engine_destroy starts, and every request has exactly one Done."""
    n = 0
    for i in range(6):
        e = deepinfer.Engine(TINY, n_threads=1, max_running=4, n_batch=64)
        n += race_round(e, lambda: [1, 2, 3, 4], i)
    assert n > 0


def test_close_racing_str_prompts(smol_path):
    """The same with str prompts: the engine's tokenizer is used by submit."""
    e = deepinfer.Engine(smol_path, n_threads=1, max_running=4)
    race_round(e, lambda: "hello there", 7)
    with pytest.raises(deepinfer.InvalidStateError):
        e.tokenizer.encode("hello")


def test_close_with_a_call_in_flight_waits_for_it():
    """close() waits for a C call in flight on another thread (here a tokenizer-
    free property held inside _guarded) instead of destroying under it."""
    e = deepinfer.Engine(TINY, n_threads=1)
    entered, release = threading.Event(), threading.Event()

    def slow(h):
        entered.set()
        release.wait(10)
        return e._lib.di_engine_vocab_size(h)

    out = []
    t = threading.Thread(target=lambda: out.append(e._call(slow)), daemon=True)
    t.start()
    assert entered.wait(10)
    closer = threading.Thread(target=e.close, daemon=True)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() destroyed the engine under a call in flight"
    with pytest.raises(deepinfer.InvalidStateError):
        e.submit([1, 2, 3])  # closing: refused at once
    release.set()
    t.join(10)
    closer.join(10)
    assert out == [512] and not closer.is_alive()
    assert e._handle is None


class Injected(BaseException):
    """Stands in for KeyboardInterrupt raised inside the callback."""


def flaky(real, when):
    """A copy function raising Injected once, at the copy of the when-th event
    whose kind is DONE (7) or TOKENS (1): 'before' or 'after' copying it."""
    seen = [0]
    kind_wanted, nth, where = when

    def copy(kind, ev, req):
        if kind == kind_wanted:
            seen[0] += 1
            if seen[0] == nth and where == "before":
                raise Injected()
            out = real(kind, ev, req)
            if seen[0] == nth and where == "after":
                raise Injected()
            return out
        return real(kind, ev, req)

    return copy


class AppendRaisesOnce(collections.deque):
    """A request queue whose nth append appends and then raises (the exception
    lands after the event was routed)."""

    def __init__(self, nth):
        super().__init__()
        self.n, self.nth = 0, nth

    def append(self, x):
        super().append(x)
        self.n += 1
        if self.n == self.nth:
            raise Injected()


def run_with_timeout(fn, timeout=60):
    out, err = [], []

    def wrap():
        try:
            out.append(fn())
        except BaseException as e:  # reported by the caller
            err.append(e)

    t = threading.Thread(target=wrap, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "iteration hung: an event (its Done?) was lost"
    if err:
        raise err[0]
    return out[0]


def drain(req):
    """Iterate to the end; Injected raised by iteration is counted, not fatal."""
    events, raised = [], 0
    while True:
        try:
            for ev in req:
                events.append(ev)
            return events, raised
        except Injected:
            raised += 1


@pytest.mark.parametrize(
    "inject",
    [("copy", (1, 1, "before")), ("copy", (1, 3, "after")), ("copy", (7, 1, "before")),
     ("copy", (7, 1, "after")), ("append", 2), ("append", 5)],
)
def test_exception_in_callback_loses_no_event(tiny_ref, inject):
    """An exception raised inside the C callback is raised from iteration after
    di_poll returns, and the event it hit is still routed, once: the events equal
    an undisturbed run, with exactly one Done."""
    p = tiny_ref["prompt"]
    kw = dict(temperature=0, max_tokens=12, ignore_eos=True)
    with deepinfer.Engine(TINY, n_threads=1) as e:
        want = [ev for ev in e.submit(p, **kw)]
        how, arg = inject

        def go():
            if how == "copy":
                e._cb_state[0] = flaky(e._cb_state[0], arg)
                r = e.submit(p, **kw)
            else:
                r = e.submit(p, **kw)  # nothing is polled before iteration
                r._queue = AppendRaisesOnce(arg)
            return drain(r)

        events, raised = run_with_timeout(go)
        assert raised == 1
        assert [ev for ev in events if not isinstance(ev, Done)] == [
            ev for ev in want if not isinstance(ev, Done)]
        dones = [ev for ev in events if isinstance(ev, Done)]
        assert len(dones) == 1 and events[-1] is dones[0]
        assert dones[0].status == Status.OK and dones[0].completion_tokens == 12
        assert e.pending == 0 and not e._polling


def test_done_copy_failing_for_good_still_ends_the_request(tiny_ref):
    """A copy of the terminal event that keeps failing (every try) still gives
    the request one Done, with the failure in its message."""
    with deepinfer.Engine(TINY, n_threads=1) as e:
        real = e._cb_state[0]

        def copy(kind, ev, req):
            if kind == 7:
                raise MemoryError("no room")
            return real(kind, ev, req)

        e._cb_state[0] = copy
        r = e.submit(tiny_ref["prompt"], temperature=0, max_tokens=4)
        events, _ = run_with_timeout(lambda: drain_memerr(r))
        assert isinstance(events[-1], Done) and "could not copy" in events[-1].message
        assert sum(isinstance(ev, Done) for ev in events) == 1


def drain_memerr(req):
    events = []
    while True:
        try:
            for ev in req:
                events.append(ev)
            return events, 0
        except MemoryError:
            pass


def test_signal_raising_on_the_main_thread_loses_no_event():
    """A signal handler raising (KeyboardInterrupt's path) every ~0.5 ms while
    the main thread iterates 8 requests and submits more: every request ends with
    exactly one Done and the same tokens as undisturbed, and nothing hangs (in a
    subprocess, so a hang fails by timeout)."""
    env = dict(os.environ, DI_TEST_TINY=str(TINY))
    p = subprocess.run([sys.executable, str(HERE / "signal_storm.py")], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Exception ignored" not in p.stderr, p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("ok booms="), p.stdout[-3000:]
    assert int(last.split("=")[1]) > 0  # the handler did raise inside the binding


@pytest.mark.parametrize("on_main", [True, False])
def test_close_while_iterating_on_the_same_thread(tiny_ref, on_main):
    """close() from the body of the loop iterating a request (on the main thread,
    whose polls run on helper threads, and on another thread): it returns, and
    the iteration goes on to the request's one Done, CANCELLED."""

    def go():
        e = deepinfer.Engine(TINY, n_threads=1)
        r = e.submit(tiny_ref["prompt"], ignore_eos=True, seed=5)
        events = []
        for ev in r:
            events.append(ev)
            if len(events) == 2:
                e.close()
        return events

    events = go() if on_main else run_with_timeout(go)
    dones = [ev for ev in events if isinstance(ev, Done)]
    assert len(dones) == 1 and events[-1] is dones[0]
    d = dones[0]
    # The worker may finish the request (the tiny model decodes its 240 tokens in
    # milliseconds) before close() reaches it: its Done, already queued, is then
    # OK with every token (seen on a loaded machine). Otherwise close cancelled it.
    finished_first = (d.status == Status.OK and d.finish_reason == Finish.LENGTH
                      and d.prompt_tokens + d.completion_tokens == 256)
    assert finished_first or (d.status == Status.CANCELLED and "destroyed" in d.message), d


def test_close_inside_a_call_on_the_engine_raises_instead_of_deadlocking():
    """close() on a thread that is inside a call on the engine (as a signal
    handler or finalizer could be) cannot wait for that call: InvalidStateError,
    and the engine stays usable and closes normally afterwards."""
    e = deepinfer.Engine(TINY, n_threads=1)

    def reenter(h):
        with pytest.raises(deepinfer.InvalidStateError, match="inside a call"):
            e.close()
        return 1

    assert run_with_timeout(lambda: e._call(reenter), 30) == 1
    assert e._call(reenter) == 1  # on the main thread as well
    assert e.generate([1, 2, 3], max_tokens=2).done.ok
    e.close()
    assert e._handle is None
