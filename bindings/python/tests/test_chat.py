"""Protocol requests: the R1 chat template on a tiny random model with the real
R1 tokenizer (as tests/unit/test_engine.c does)."""

import json

import pytest

import deepinfer
from deepinfer import Chunk, Done, Encoding, Reasoning, Status, Text, Tokens

from conftest import FIXTURES


def template_case():
    """A Chat request of the committed template fixture (jinja2 rendering the R1
    GGUF's chat template, encoded by transformers) with a plain user message."""
    cases = json.loads((FIXTURES / "codec" / "templates.json").read_text())["cases"]
    for c in cases:
        msgs = c["request"].get("messages")
        if (
            "ids" in c["r1"]
            and isinstance(msgs, list)
            and len(msgs) >= 2
            and all(isinstance(m.get("content"), str) for m in msgs)
            and len(c["r1"]["ids"]) < 200
        ):
            return c
    pytest.fail("no plain multi-message case in templates.json")


def test_chat_tokens_equal_the_rendered_prompt_run_as_tokens(r1):
    """The chat request's prompt is the template oracle's ids: prompt_tokens
    equals their count, and its greedy tokens equal a token request of those ids."""
    assert r1.encoding == Encoding.R1
    c = template_case()
    body = dict(c["request"], max_tokens=8, temperature=0)
    chat = r1.chat(body, chunks=False)
    ids, events = [], list(chat)
    for ev in events:
        assert not isinstance(ev, Chunk)
        if isinstance(ev, Tokens):
            ids += ev.ids
    done = events[-1]
    assert isinstance(done, Done) and done.status == Status.OK
    assert done.prompt_tokens == len(c["r1"]["ids"])
    alone = r1.generate(c["r1"]["ids"], temperature=0, max_tokens=8)
    assert ids == alone.tokens[: len(ids)] and len(ids) >= 1


def test_chat_stream_chunks_and_response(r1):
    body = {"model": "deepseek-r1", "stream": True, "max_tokens": 12,
            "messages": [{"role": "user", "content": "Hello!"}]}
    req = r1.chat(json.dumps(body), seed=5)
    events = list(req)
    chunks = [ev for ev in events if isinstance(ev, Chunk)]
    done = events[-1]
    assert isinstance(done, Done) and done.ok
    assert sum(isinstance(ev, Done) for ev in events) == 1
    # Chat Completions: a role chunk first, "data: [DONE]" last (docs/stream.md)
    first = json.loads(chunks[0].json)
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0].sse == "data: " + chunks[0].json + "\n\n"
    assert chunks[0].name is None
    assert chunks[-1].json is None and chunks[-1].sse == "data: [DONE]\n\n"
    # the streamed deltas, the chunks' deltas and the final response agree
    reasoning = "".join(ev.text for ev in events if isinstance(ev, Reasoning))
    text = "".join(ev.text for ev in events if isinstance(ev, Text))
    from_chunks = ["", ""]
    for ch in chunks[:-1]:
        delta = json.loads(ch.json)["choices"][0]["delta"]
        from_chunks[0] += delta.get("reasoning_content") or ""
        from_chunks[1] += delta.get("content") or ""
    assert from_chunks == [reasoning, text]
    msg = done.response()["choices"][0]["message"]
    assert (msg.get("reasoning_content") or "") == reasoning
    assert (msg.get("content") or "") == text
    n_tokens = sum(len(ev.ids) for ev in events if isinstance(ev, Tokens))
    assert 1 <= n_tokens <= 12 and done.completion_tokens == n_tokens
    assert done.finish_text in ("stop", "length")
    usage = json.loads(chunks[-2].json)["usage"]
    assert usage["prompt_tokens"] == done.prompt_tokens


def test_chat_result_collects_reasoning_and_text(r1):
    body = {"model": "deepseek-r1", "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello!"}]}
    a, b = r1.chat(body, seed=1).result(), r1.chat(body, seed=2).result()
    assert a.tokens == b.tokens  # greedy: the seed does not matter
    msg = a.response()["choices"][0]["message"]
    assert a.reasoning == (msg.get("reasoning_content") or "")
    assert a.text == (msg.get("content") or "")


def test_bad_bodies_are_refused_and_the_engine_keeps_serving(r1):
    with pytest.raises(deepinfer.InvalidRequestError, match="messages"):
        r1.chat('{"messages": 3}')
    with pytest.raises(deepinfer.InvalidRequestError):
        r1.chat('{"model": "x", "messages": [')  # malformed JSON
    with pytest.raises(deepinfer.InvalidRequestError, match="temperature"):
        r1.chat({"model": "x", "temperature": 5,
                 "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(deepinfer.UnsupportedError):  # the R1 template takes Chat only
        r1.messages({"model": "x", "max_tokens": 5,
                     "messages": [{"role": "user", "content": "hi"}]})
    res = r1.chat({"model": "x", "max_tokens": 3,
                   "messages": [{"role": "user", "content": "hi"}]}).result()
    assert res.done.ok


def test_chat_cancel(r1):
    req = r1.chat({"model": "x", "max_tokens": 200,
                   "messages": [{"role": "user", "content": "hi"}]})
    first = next(req)
    assert req.cancel()
    rest = list(req)
    events = [first] + rest
    assert sum(isinstance(ev, Done) for ev in events) == 1
    assert events[-1].status == Status.CANCELLED
    assert events[-1].response_json is None
