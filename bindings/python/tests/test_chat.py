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
    landed = req.cancel()  # False only when the 200 tokens were already done
    rest = list(req)
    events = [first] + rest
    assert sum(isinstance(ev, Done) for ev in events) == 1
    if landed:
        assert events[-1].status == Status.CANCELLED
        assert events[-1].response_json is None
    else:
        assert events[-1].status == Status.OK and events[-1].response_json


# ---- SmolLM2 with the ChatML encoding: a real tool call ----

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


def weather_conversation():
    """A few-shot conversation: one earlier call and its result, then a new question."""
    return [
        {"role": "user", "content": "What is the weather in London?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "London"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rainy, 12 C"},
        {"role": "assistant", "content": "It is rainy and 12 C in London."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]


def test_smollm2_chat_tool_call_events(smol):
    """The model's raw output (its tokens decoded) holds a Hermes-style
    <tool_call>{json}</tool_call>; the ToolCall events, the argument deltas, the
    chunks and the response must all say the same call."""
    assert smol.encoding == Encoding.CHATML
    tok = smol.tokenizer
    body = {"model": "smollm2", "max_tokens": 48, "temperature": 0,
            "tools": [WEATHER_TOOL], "messages": weather_conversation()}
    # SmolLM2-135M writes <tool_response> here unless that token is ruled out.
    bias = {tok.encode("<tool_response>")[3]: -100.0}
    events = list(smol.chat(body, logit_bias=bias))
    ids = [i for ev in events if isinstance(ev, Tokens) for i in ev.ids]
    raw = tok.decode(ids, skip_special=True)
    assert "<tool_call>" in raw and "</tool_call>" in raw, raw
    written = json.loads(raw.split("<tool_call>")[1].split("</tool_call>")[0])
    calls = [ev for ev in events if isinstance(ev, deepinfer.ToolCall)]
    deltas = [ev for ev in events if isinstance(ev, deepinfer.ToolCallDelta)]
    assert len(calls) == 1
    call = calls[0]
    assert call.index == 0 and call.id.startswith("call_")
    assert call.name == written["name"] == "get_weather"
    assert call.json() == written["arguments"]
    assert "".join(d.arguments_delta for d in deltas) == call.arguments
    assert all(d.index == 0 and d.id == call.id and d.name == call.name for d in deltas)
    done = events[-1]
    assert done.ok and done.finish_text == "tool_calls"
    (resp_call,) = done.response()["choices"][0]["message"]["tool_calls"]
    assert resp_call["id"] == call.id
    assert resp_call["function"] == {"name": call.name, "arguments": call.arguments}
    streamed = [tc for ch in events if isinstance(ch, Chunk) and ch.json
                for tc in json.loads(ch.json)["choices"][0]["delta"].get("tool_calls") or []]
    assert streamed and streamed[0]["id"] == call.id
    assert "".join(tc["function"].get("arguments", "") for tc in streamed) == call.arguments
    # result() gathers the same call
    again = smol.chat(body, logit_bias=bias).result()
    assert again.tool_calls[0].arguments == call.arguments and again.text == ""


def test_smollm2_chat_text_equals_response(smol):
    body = {"model": "smollm2", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    res = smol.chat(body).result()
    assert res.text and res.text == res.response()["choices"][0]["message"]["content"]
    raw = smol.tokenizer.decode(res.tokens, skip_special=True)
    assert raw == res.text


def test_model_info_and_served_name(smol_path):
    """The engine describes the model it loaded, and responses name it
    (docs/api.md, "Sampling precedence": the model field)."""
    import deepinfer

    with deepinfer.Engine(smol_path, n_threads=2, served_model_name="smol") as e:
        info = e.model_info
        assert info["family"] == "llama" and info["encoding"] == "chatml"
        assert info["parameters"] == 134515008
        assert e.served_model_name == "smol"
        res = e.chat({"model": "gpt-4o", "max_tokens": 2, "temperature": 0,
                      "messages": [{"role": "user", "content": "Hi."}]}).result()
        assert res.response()["model"] == "smol"
