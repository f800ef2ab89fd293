"""Log probabilities, Chat `n` > 1 choices and constrained token requests
through the binding, each against an independent oracle: transformers' logits of
the tiny checkpoint (log-softmaxed here), the protocol's own JSON (chunks and the
response the C library wrote) and separately seeded n = 1 requests, and the
`jsonschema`-free check that a constrained output parses and has the schema's
shape."""

import json
import math
import struct

import pytest

from deepinfer import Chunk, Done, InvalidArgumentError, InvalidRequestError, Text, Tokens

from conftest import TINY


def _log_softmax(row):
    mx = max(row)
    lse = mx + math.log(sum(math.exp(x - mx) for x in row))
    return [x - lse for x in row]


def test_token_logprobs_equal_transformers_log_softmax(tiny, tiny_ref):
    """Greedy with top_logprobs 20: each token's logprob and its alternatives are
    the log-softmax of transformers' logits at that position
    (sequence_logits.f32, [prompt + greedy, vocab] float32)."""
    prompt, greedy = tiny_ref["prompt"], tiny_ref["greedy"][:8]
    rows, vocab = tiny_ref["sequence_logits_shape"]
    raw = (TINY / "sequence_logits.f32").read_bytes()
    assert len(raw) == rows * vocab * 4
    req = tiny.submit(prompt, temperature=0, max_tokens=len(greedy), ignore_eos=True,
                      logprobs=True, top_logprobs=20)
    evs = [ev for ev in req if isinstance(ev, Tokens)]
    ids = [i for ev in evs for i in ev.ids]
    assert ids == greedy
    lps = [x for ev in evs for x in ev.logprobs]
    tops = [t for ev in evs for t in ev.top_logprobs]
    assert len(lps) == len(tops) == len(greedy)
    worst = 0.0
    for k, tok in enumerate(greedy):
        r = len(prompt) - 1 + k
        want = _log_softmax(struct.unpack_from(f"<{vocab}f", raw, r * vocab * 4))
        worst = max(worst, abs(lps[k] - want[tok]))
        assert len(tops[k]) == 20
        assert tops[k][0][0] == tok  # greedy: the most likely token
        for j, (tid, lp) in enumerate(tops[k]):
            worst = max(worst, abs(lp - want[tid]))
            if j:
                assert lp <= tops[k][j - 1][1]
        # none left out that the oracle ranks clearly above the last listed
        assert sum(w > tops[k][-1][1] + 1e-3 for w in want) <= 19
    assert worst < 2e-3
    # the Result joins them per token
    res = tiny.generate(prompt, temperature=0, max_tokens=4, ignore_eos=True, logprobs=True)
    assert res.tokens == greedy[:4]
    assert res.logprobs == pytest.approx(lps[:4], abs=1e-6)
    assert res.top_logprobs is None  # top_logprobs 0: none


def test_logprobs_absent_unless_asked_and_errors(tiny, tiny_ref):
    evs = [ev for ev in tiny.submit(tiny_ref["prompt"], temperature=0, max_tokens=3)
           if isinstance(ev, Tokens)]
    assert evs and all(ev.logprobs is None and ev.top_logprobs is None for ev in evs)
    assert all(ev.choice_index == 0 for ev in evs)
    with pytest.raises(InvalidArgumentError, match="top_logprobs: must be in"):
        tiny.submit(tiny_ref["prompt"], logprobs=True, top_logprobs=21)
    with pytest.raises(InvalidArgumentError, match="top_logprobs: requires logprobs=True"):
        tiny.submit(tiny_ref["prompt"], top_logprobs=3)


def _chat(n, seed, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "Name a fruit."}],
            "seed": seed, "temperature": 1.2, "max_tokens": 10, "stream": True}
    if n != 1:
        body["n"] = n
    body.update(extra)
    return body


def test_chat_choices_carry_choice_index(smol):
    """Chat n = 3: every event's choice_index is the index of the chunk the C
    library wrote for it, each choice's Text joined equals its
    choices[i].message.content in the response, and choice i equals an n = 1
    request seeded seed + i (the engine's own contract, an independent run)."""
    req = smol.chat(_chat(3, 11))
    evs = list(req)
    done = evs[-1]
    assert isinstance(done, Done) and done.ok
    texts = {}
    for ev in evs:
        if isinstance(ev, Chunk) and ev.json is not None:
            choices = json.loads(ev.json)["choices"]
            if choices:
                assert [c["index"] for c in choices] == [ev.choice_index]
            else:  # the usage chunk
                assert ev.choice_index == 0
        if isinstance(ev, Text):
            texts[ev.choice_index] = texts.get(ev.choice_index, "") + ev.text
    assert set(ev.choice_index for ev in evs if isinstance(ev, Tokens)) == {0, 1, 2}
    res = smol.chat({**_chat(3, 11), "stream": False}).result()
    contents = [c["message"]["content"] for c in res.response()["choices"]]
    assert [c.text for c in res.choices] == contents
    assert [texts.get(i, "") for i in range(3)] == contents
    for i in range(3):
        one = smol.chat({**_chat(1, 11 + i), "stream": False}).result()
        assert one.tokens == res.choices[i].tokens
        assert one.choices == [one]


def test_chat_logprobs_per_choice_equal_the_response(smol):
    """Chat logprobs with n = 2: each choice's Tokens logprobs are the values the
    C library wrote into that choice's response logprobs (rounded to float32)."""
    res = smol.chat({**_chat(2, 5), "stream": False, "logprobs": True,
                     "top_logprobs": 2}).result()
    for i, c in enumerate(res.response()["choices"]):
        entries = c["logprobs"]["content"]
        assert entries
        mine = res.choices[i]
        assert mine.logprobs is not None and len(mine.top_logprobs) == len(mine.tokens)
        # the response lists the content tokens: the choice's tokens before its end
        assert [e["logprob"] for e in entries] == pytest.approx(
            mine.logprobs[: len(entries)], abs=1e-6)
        for e, top in zip(entries, mine.top_logprobs):
            assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx(
                [lp for _, lp in top], abs=1e-6)


def test_json_schema_token_request(smol):
    """A token request constrained by a JSON schema gives one JSON text of the
    schema's shape; a schema that does not compile names its keyword."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer", "minimum": 0}},
              "required": ["name", "age"], "additionalProperties": False}
    tok = smol.tokenizer
    prompt = tok.encode("<|im_start|>user\nGive a person as JSON.<|im_end|>\n"
                        "<|im_start|>assistant\n", special=True)
    res = smol.generate(prompt, json_schema=schema, temperature=0, max_tokens=64)
    assert res.done.finish_reason is not None and res.done.finish_reason.name == "STOP"
    out = json.loads(res.text)
    assert set(out) == {"name", "age"} and isinstance(out["age"], int) and out["age"] >= 0
    assert isinstance(out["name"], str) and len(out["name"]) <= 8
    res = smol.generate(prompt, regex="[0-9]{3}", temperature=0, max_tokens=8)
    assert len(res.text) == 3 and res.text.isdigit()
    with pytest.raises(InvalidRequestError, match="minimum"):
        smol.submit(prompt, json_schema={"type": "integer", "minimum": "x"})
    with pytest.raises(InvalidArgumentError):
        smol.submit(prompt, json_schema=schema, regex="a")


def test_constraint_with_a_nul_byte_or_an_int32_overflow_is_refused(tiny, tiny_ref):
    """ctypes passes bytes to a char * cut at the first NUL and keeps an int's low
    32 bits: a grammar `root ::= "a" \\0 ...` would apply as its first part and
    top_logprobs 2**32 + 5 as 5. Each is refused, naming the field, with nothing
    queued (as the C++ wrapper and the Rust crate do)."""
    prompt = tiny_ref["prompt"]
    for field, value in (("grammar", 'root ::= "a"\0 | "b"'), ("regex", "a\0b"),
                         ("json_schema", '{"type":"string"}\0')):
        with pytest.raises(InvalidArgumentError, match=f"{field}: contains a NUL byte at offset"):
            tiny.submit(prompt, **{field: value})
    with pytest.raises(InvalidArgumentError, match="top_logprobs: 4294967301 does not fit"):
        tiny.submit(prompt, logprobs=True, top_logprobs=2**32 + 5)
