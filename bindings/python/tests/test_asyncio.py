"""deepinfer.AsyncEngine: async iteration, awaitable results, task cancellation
cancelling the request, many concurrent requests, errors, and asyncio requests
sharing an engine with a blocking iterator on another thread. Plain asyncio.run
(no plugin). The greedy tokens are transformers' (the tiny checkpoint's
reference.json); sampled requests are compared with the same requests run alone
through the blocking API."""
import asyncio
import threading

import pytest
from conftest import TINY, write_big_vocab_model
from test_threads import spec

import deepinfer
from deepinfer import AsyncEngine, Done, Status, Text, Tokens


#: A prompt for the big-vocabulary model (one layer, 152064 logits a token: a few
#: ms a token, so a cancel lands long before the end).
BIG_PROMPT = [11, 2222, 33333, 144444, 5, 66]


@pytest.fixture(scope="module")
def big_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("big") / "model"
    write_big_vocab_model(d)
    return d


@pytest.fixture(scope="module")
def big(big_path):
    with deepinfer.Engine(big_path, n_threads=2, max_running=4) as e:
        yield e


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def tokens_of(events):
    return [i for ev in events if isinstance(ev, Tokens) for i in ev.ids]


def test_async_for_streams_every_event_and_one_done_last(tiny, tiny_ref):
    async def main():
        engine = AsyncEngine.wrap(tiny)
        req = engine.submit(tiny_ref["prompt"], max_tokens=32, temperature=0, ignore_eos=True)
        events = [ev async for ev in req]
        again = [ev async for ev in req]  # iteration ended for good
        engine.close()
        return req, events, again

    req, events, again = run(main())
    dones = [ev for ev in events if isinstance(ev, Done)]
    assert len(dones) == 1 and events[-1] is dones[0] and req.done is dones[0]
    assert dones[0].status == Status.OK and dones[0].completion_tokens == 32
    assert tokens_of(events) == tiny_ref["greedy"]
    assert again == []
    assert tiny.pending == 0


def test_await_gives_the_complete_result(tiny, tiny_ref):
    async def main():
        engine = AsyncEngine.wrap(tiny)
        res = await engine.submit(tiny_ref["prompt"], max_tokens=32, temperature=0,
                                  ignore_eos=True)
        res2 = await engine.generate(tiny_ref["prompt"], max_tokens=32, temperature=0,
                                     ignore_eos=True)
        return res, res2

    res, res2 = run(main())
    assert res.tokens == tiny_ref["greedy"] == res2.tokens
    assert res.done.ok and res.done.finish_reason == deepinfer.Finish.LENGTH


def test_the_loop_polls_on_its_own_thread_without_a_helper_thread(tiny_ref):
    """The descriptor drives the polls: no helper thread is started, and every
    poll the loop ran found events (level-triggered, no empty wake-ups)."""
    with deepinfer.Engine(TINY, n_threads=2) as e:
        engine = AsyncEngine.wrap(e)
        polls = []
        real_poll = e._lib.di_poll
        loop_thread = []

        class Lib:  # records what the binding's di_poll calls return
            def __getattr__(self, name):
                return getattr(real_poll_lib, name)

            def di_poll(self, h, ms):
                n = real_poll(h, ms)
                polls.append((threading.get_ident(), ms, n))
                return n

        real_poll_lib = e._lib
        e._lib = Lib()

        async def main():
            loop_thread.append(threading.get_ident())
            return await engine.submit(tiny_ref["prompt"], max_tokens=40, temperature=0,
                                       ignore_eos=True)

        try:
            res = run(main())
        finally:
            e._lib = real_poll_lib
        assert len(res.tokens) == 40
        assert not e._helper_alive
        assert polls and all(t == loop_thread[0] and ms == 0 and n > 0 for t, ms, n in polls)


def test_cancelling_the_task_cancels_the_request_and_the_engine_keeps_serving(big):
    alone = big.generate(BIG_PROMPT, max_tokens=24, temperature=0, ignore_eos=True).tokens

    async def main():
        engine = AsyncEngine.wrap(big)
        long = engine.submit(BIG_PROMPT, max_tokens=480, temperature=0, ignore_eos=True)
        other = engine.submit(BIG_PROMPT, max_tokens=24, temperature=0, ignore_eos=True)
        seen, started = [], asyncio.Event()

        async def consume():
            async for ev in long:
                seen.append(ev)
                if isinstance(ev, Tokens):
                    started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The request was cancelled (di_cancel): what is left of it ends with a
        # cancelled Done, long before its 480 tokens.
        rest = [ev async for ev in long]
        other_res = await other
        after = await engine.submit(BIG_PROMPT, max_tokens=24, temperature=0, ignore_eos=True)
        return seen + rest, other_res, after

    events, other_res, after = run(main())
    dones = [ev for ev in events if isinstance(ev, Done)]
    assert len(dones) == 1 and events[-1] is dones[0]
    assert dones[0].status == Status.CANCELLED and dones[0].finish_reason is None
    toks = tokens_of(events)
    assert 0 < len(toks) < 480
    assert toks[:24] == alone[: len(toks[:24])]  # a prefix of the uncancelled run
    assert other_res.tokens == alone and after.tokens == alone
    assert big.pending == 0


def test_wait_for_timeout_cancels_the_request(big):
    async def main():
        engine = AsyncEngine.wrap(big)
        req = engine.submit(BIG_PROMPT, max_tokens=480, ignore_eos=True, seed=1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(req.result(), 0.05)
        with pytest.raises(deepinfer.CancelledError) as ei:
            await req  # the rest: a cancelled Done, raised as Request.result raises it
        return ei.value

    err = run(main())
    assert err.result.done.status == Status.CANCELLED
    assert err.result.done.completion_tokens < 480
    # what the timed-out await collected is kept: every generated token is there
    assert len(err.result.tokens) == err.result.done.completion_tokens > 0
    assert big.pending == 0


def test_many_concurrent_requests_equal_the_same_requests_alone(tiny):
    n = 24
    alone = []
    for i in range(n):
        prompt, kw = spec(i)
        alone.append(tiny.generate(prompt, **kw).tokens)

    async def one(engine, i):
        prompt, kw = spec(i)
        events = [ev async for ev in engine.submit(prompt, **kw)]
        assert sum(isinstance(ev, Done) for ev in events) == 1 and isinstance(events[-1], Done)
        assert events[-1].ok
        return tokens_of(events)

    async def main():
        engine = AsyncEngine.wrap(tiny)
        return await asyncio.gather(*(one(engine, i) for i in range(n)))

    assert run(main()) == alone


def test_asyncio_and_a_blocking_iterator_on_another_thread_share_the_engine(tiny, tiny_ref):
    """A thread iterating a blocking Request polls too: the asyncio requests'
    events it routes wake their coroutines (call_soon_threadsafe)."""
    blocking = []

    def thread_main():
        for _ in range(3):
            blocking.append(tiny.generate(tiny_ref["prompt"], max_tokens=32, temperature=0,
                                          ignore_eos=True).tokens)

    async def main():
        engine = AsyncEngine.wrap(tiny)
        t = threading.Thread(target=thread_main)
        t.start()
        try:
            return await asyncio.gather(*(
                engine.generate(tiny_ref["prompt"], max_tokens=32, temperature=0,
                                ignore_eos=True) for _ in range(6)))
        finally:
            await asyncio.to_thread(t.join, 60)

    results = run(main())
    assert [r.tokens for r in results] == [tiny_ref["greedy"]] * 6
    assert blocking == [tiny_ref["greedy"]] * 3


def test_errors(tiny, tiny_ref, tmp_path):
    async def main():
        engine = AsyncEngine.wrap(tiny)
        bad = list(tiny_ref["prompt"])
        bad[2] = 600
        with pytest.raises(deepinfer.InvalidArgumentError, match=r"tokens\[2\]"):
            engine.submit(bad, max_tokens=4)  # raised at submit, nothing queued
        with pytest.raises(deepinfer.InvalidArgumentError, match="temperature"):
            engine.submit(tiny_ref["prompt"], temperature=-1.0)
        with pytest.raises(deepinfer.UnsupportedError):  # the tiny model has no encoding
            engine.chat({"messages": [{"role": "user", "content": "hi"}]})
        assert tiny.pending == 0
        res = await engine.generate(tiny_ref["prompt"], max_tokens=32, temperature=0,
                                    ignore_eos=True)
        return res

    assert run(main()).tokens == tiny_ref["greedy"]
    engine = AsyncEngine.wrap(tiny)
    with pytest.raises(RuntimeError):  # no running loop
        engine.submit(tiny_ref["prompt"], max_tokens=1)
    with pytest.raises(deepinfer.DeepinferIOError, match="no-such-model"):
        AsyncEngine(tmp_path / "no-such-model.gguf")


def test_close_ends_running_requests_and_wakes_their_coroutines(big_path):
    async def main():
        engine = AsyncEngine(big_path, n_threads=2)
        reqs = [engine.submit(BIG_PROMPT, max_tokens=480, ignore_eos=True, seed=i)
                for i in range(3)]
        started = asyncio.Event()

        async def consume(r):
            out = []
            async for ev in r:
                out.append(ev)
                started.set()
            return out

        tasks = [asyncio.create_task(consume(r)) for r in reqs]
        await started.wait()
        await engine.aclose()  # destroys: every request gets its Done, which wakes it
        with pytest.raises(deepinfer.InvalidStateError):
            engine.submit(BIG_PROMPT, max_tokens=1)
        return await asyncio.gather(*tasks)

    for events in run(main()):
        dones = [ev for ev in events if isinstance(ev, Done)]
        assert len(dones) == 1 and events[-1] is dones[0]
        assert dones[0].status == Status.CANCELLED and "destroyed" in dones[0].message


def test_an_engine_moves_to_a_new_loop_once_the_old_one_closed(tiny, tiny_ref):
    engine = AsyncEngine.wrap(tiny)

    async def once():
        return (await engine.generate(tiny_ref["prompt"], max_tokens=8, temperature=0,
                                      ignore_eos=True)).tokens

    assert run(once()) == tiny_ref["greedy"][:8]
    assert run(once()) == tiny_ref["greedy"][:8]  # a second asyncio.run: a new loop


def test_smollm2_chat_streams_and_awaits(smol):
    body = {"model": "smollm2", "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Name a color."}]}

    async def main():
        engine = AsyncEngine.wrap(smol)
        text = [ev.text async for ev in engine.chat(body) if isinstance(ev, Text)]
        res = await engine.chat(body)
        return "".join(text), res

    streamed, res = run(main())
    assert streamed and streamed == res.text
    assert res.response()["choices"][0]["message"]["content"] == res.text
