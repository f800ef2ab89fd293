"""Token requests: the binding's tokens and text against independent oracles."""

import subprocess

import pytest

import deepinfer
from deepinfer import Done, Finish, Status, Text, Tokens

from conftest import TINY


def test_tiny_greedy_tokens_equal_transformers(tiny, tiny_ref):
    """transformers' greedy continuation of the committed tiny Qwen2 checkpoint."""
    want = tiny_ref["greedy"]
    req = tiny.submit(tiny_ref["prompt"], temperature=0, max_tokens=len(want), ignore_eos=True)
    events = list(req)
    ids = [i for ev in events if isinstance(ev, Tokens) for i in ev.ids]
    assert ids == want
    assert [ev for ev in events if isinstance(ev, Done)] == [events[-1]]
    done = events[-1]
    assert done.status == Status.OK and done.ok
    assert done.finish_reason == Finish.LENGTH
    assert done.prompt_tokens == len(tiny_ref["prompt"])
    assert done.completion_tokens == len(want)
    assert req.done is done
    assert tiny.tokenizer is None  # a checkpoint without tokenizer: no text events
    assert not any(isinstance(ev, Text) for ev in events)


def test_engine_properties(tiny):
    assert tiny.vocab_size == 512
    assert tiny.context_length == 256  # the checkpoint's max_position_embeddings
    assert tiny.encoding is None
    assert tiny.pending == 0


def test_smollm2_tokenizer_equals_llama_cpp(smol, smol_fixture):
    """llama.cpp's prompt ids and the text of its greedy ids (committed fixture)."""
    tok = smol.tokenizer
    assert tok.vocab_size == smol_fixture["n_vocab"]
    for case in smol_fixture["cases"]:
        special = "<|im_start|>" in case["text"]
        assert tok.encode(case["text"], special=special) == case["prompt"]
        # llama.cpp detokenizes with special=False: control tokens give no text
        assert tok.decode(case["greedy"], skip_special=True) == case["greedy_text"]
    assert tok.token_id("<|im_end|>") == 2
    assert tok.token_id("no such token at all") is None


def test_smollm2_greedy_tokens_equal_the_c_library(smol, smol_path, smol_fixture, cli):
    """`deepinfer generate` (the C model API, no engine) gives the greedy ids; the
    binding's token events must equal them, and its text events the decoded ids."""
    for case in smol_fixture["cases"][:2]:
        n = 12
        out = subprocess.run(
            [str(cli), "generate", "--model", str(smol_path), "--tokens",
             ",".join(map(str, case["prompt"])), "--max-tokens", str(n), "--threads", "2"],
            check=True, capture_output=True, text=True,
        ).stdout
        want = [int(x) for x in out.strip().strip("[]").split(",")]
        res = smol.submit(case["prompt"], temperature=0, max_tokens=n, ignore_eos=True).result()
        assert res.tokens == want
        assert res.text == smol.tokenizer.decode(want)
        assert res.done.completion_tokens == n


def test_smollm2_str_prompt_streams_text_equal_to_decode(smol, smol_fixture):
    """A str prompt is encoded with the engine's tokenizer; the concatenated text
    deltas equal di_tokenizer_decode of the generated ids (the end-of-sequence
    token not decoded), and llama.cpp's greedy prefix (committed) comes first up
    to a near-tie: where the two first differ, llama.cpp's token is our second
    and our top two are closer than 0.5 (model_parity.c's GGUF_DECODE_TIE,
    docs/model-parity.md); after it the two continue from different text."""
    case = smol_fixture["cases"][0]
    req = smol.submit(case["text"], temperature=0, max_tokens=8, logprobs=True,
                      top_logprobs=2)
    ids, text, tops = [], [], []
    for ev in req:
        if isinstance(ev, Tokens):
            ids += ev.ids
            tops += ev.top_logprobs
        elif isinstance(ev, Text):
            text.append(ev.text)
    assert req.done.prompt_tokens == len(case["prompt"])
    theirs = case["greedy"][: len(ids)]
    k = next((k for k in range(len(ids)) if ids[k] != theirs[k]), None)
    if k is not None:
        assert tops[k][0][0] == ids[k] and tops[k][1][0] == theirs[k], (k, tops[k])
        assert tops[k][0][1] - tops[k][1][1] < 0.5, (k, tops[k])
    n_text = len(ids) - (1 if req.done.finish_reason == Finish.STOP else 0)
    assert "".join(text) == smol.tokenizer.decode(ids[:n_text])


def test_sampling_is_seeded(tiny, tiny_ref):
    """Same seed, same tokens; the sampling fields reach the sampler (another seed
    or a logit bias changes the output)."""
    p = tiny_ref["prompt"]
    kw = dict(temperature=1.2, top_k=50, top_p=0.95, max_tokens=24, ignore_eos=True)
    a = tiny.generate(p, seed=7, **kw).tokens
    assert tiny.generate(p, seed=7, **kw).tokens == a
    assert tiny.generate(p, seed=8, **kw).tokens != a
    forced = tiny.generate(p, temperature=0, max_tokens=5, ignore_eos=True,
                           logit_bias={300: 100.0}).tokens
    assert forced == [300] * 5
    # the oracle's greedy ids are 65 x31 then 119: a stop token ends at the 119
    stopped = tiny.generate(p, temperature=0, max_tokens=40, ignore_eos=True,
                            stop_tokens=[tiny_ref["greedy"][-1]])
    assert stopped.tokens == tiny_ref["greedy"]
    assert stopped.done.finish_reason == Finish.STOP


def test_generate_requires_a_prompt(tiny):
    with pytest.raises(TypeError):
        tiny.submit()
    with pytest.raises(TypeError):
        tiny.submit([1, 2], protocol="chat", body={})
    with pytest.raises(deepinfer.InvalidArgumentError, match="tokenizer"):
        tiny.submit("text needs a tokenizer")


def test_prefix_cache_hits_and_off(tiny):
    """A repeated prompt takes its whole 16-token blocks from the prefix cache
    (short of the last token) and gives the same tokens; off, it takes none."""
    prompt = [(i * 13 + 5) % 512 for i in range(70)]
    first = tiny.generate(prompt, temperature=0, max_tokens=6, ignore_eos=True)
    again = tiny.generate(prompt, temperature=0, max_tokens=6, ignore_eos=True)
    assert again.tokens == first.tokens
    assert again.done.prompt_cache_hit_tokens == 64
    with deepinfer.Engine(TINY, n_threads=2, prefix_cache=False) as off:
        off.generate(prompt, temperature=0, max_tokens=6)
        cold = off.generate(prompt, temperature=0, max_tokens=6, ignore_eos=True)
    assert cold.tokens == first.tokens
    assert cold.done.prompt_cache_hit_tokens == 0
