"""Engine(speculative_tokens=): prompt-lookup speculative decoding gives token
for token the output of the engine without it (the oracle), greedy and seeded,
and Done counts the drafts."""
import deepinfer
from conftest import TINY


def test_speculation_is_lossless_and_counted():
    prompt = [11, 22, 33, 44, 55, 66, 77, 88] * 4  # repeats: drafts to verify
    runs = []
    for n in (0, 6):
        with deepinfer.Engine(TINY, n_threads=2, speculative_tokens=n) as e:
            out = []
            for seed, temperature in ((1, 0.0), (2, 0.8), (3, 1.1)):
                res = e.generate(prompt, max_tokens=40, temperature=temperature, seed=seed,
                                 ignore_eos=True)
                out.append((res.tokens, res.done.draft_tokens, res.done.accepted_draft_tokens))
            runs.append(out)
    for (plain, d0, a0), (spec, d1, a1) in zip(*runs):
        assert plain == spec
        assert d0 == a0 == 0
        assert 0 <= a1 <= d1
    assert sum(d for _, d, _ in runs[1]) > 0


def test_speculative_tokens_out_of_range_is_refused():
    import pytest

    with pytest.raises(deepinfer.InvalidArgumentError, match="speculative_tokens"):
        deepinfer.Engine(TINY, speculative_tokens=65)


def test_draft_model_drafting_for_itself_is_lossless():
    """A draft model (the tiny model drafting for itself): the same greedy
    tokens as without speculation, and its drafts kept. (Sampling requests
    get the same distribution, not the same draw: docs/speculative.md.)"""
    prompt = [5, 17, 300, 41, 9]
    with deepinfer.Engine(TINY, n_threads=2) as e:
        plain = e.generate(prompt, max_tokens=24, temperature=0.0, ignore_eos=True).tokens
    with deepinfer.Engine(TINY, n_threads=2, speculative_tokens=4, speculative_fixed=True,
                          draft="draft-model", draft_model_path=TINY) as e:
        res = e.generate(prompt, max_tokens=24, temperature=0.0, ignore_eos=True)
    assert res.tokens == plain
    assert res.done.draft_tokens > 0
    assert res.done.accepted_draft_tokens == res.done.draft_tokens


def test_bad_drafter_is_refused():
    import pytest

    with pytest.raises(deepinfer.InvalidArgumentError, match="draft: unknown drafter 'eagle'"):
        deepinfer.Engine(TINY, speculative_tokens=4, draft="eagle")
    # DeepSeek-V3's MTP module: a model without one is refused
    with pytest.raises(deepinfer.UnsupportedError, match="no MTP"):
        deepinfer.Engine(TINY, speculative_tokens=4, draft="mtp")
    with pytest.raises(deepinfer.InvalidArgumentError, match="draft: DI_DRAFT_MODEL needs"):
        deepinfer.Engine(TINY, speculative_tokens=4, draft="draft-model")


def test_mtp_drafting_is_lossless():
    from conftest import FIXTURES

    mtp = FIXTURES / "model" / "dsv3-mtp-f32"
    prompt = [5, 9, 200, 31, 77, 5, 9, 200, 31]
    with deepinfer.Engine(mtp, n_threads=2) as e:
        plain = e.generate(prompt, max_tokens=20, temperature=0.0, ignore_eos=True).tokens
    with deepinfer.Engine(mtp, n_threads=2, speculative_tokens=3, speculative_fixed=True,
                          draft="mtp") as e:
        res = e.generate(prompt, max_tokens=20, temperature=0.0, ignore_eos=True)
    assert res.tokens == plain
    assert res.done.draft_tokens > 0
    assert res.done.accepted_draft_tokens <= res.done.draft_tokens


def test_dspark_drafting_is_lossless_and_on_when_named():
    """DeepSeek-V4's DSpark head (the release folder, and llama.cpp's GGUF pair):
    the plain greedy tokens; draft="mtp" without speculative_tokens turns it on
    (8 a step, as the CLI's --draft), and so does draft_model_path alone."""
    from conftest import FIXTURES

    folder = FIXTURES / "model" / "dsv4-dspark-release"
    target = FIXTURES / "model" / "gguf-dsv4" / "dsv4-dspark-target.gguf"
    head = FIXTURES / "model" / "gguf-dsv4" / "dsv4-dspark.gguf"
    prompt = [5, 17, 42, 99, 7, 300, 12, 8]
    with deepinfer.Engine(folder, n_threads=2) as e:
        plain = e.generate(prompt, max_tokens=20, temperature=0.0, ignore_eos=True).tokens
    for kwargs in (dict(model_path=folder, draft="mtp"),
                   dict(model_path=target, draft_model_path=head)):
        with deepinfer.Engine(n_threads=2, speculative_fixed=True, **kwargs) as e:
            res = e.generate(prompt, max_tokens=20, temperature=0.0, ignore_eos=True)
        assert res.tokens == plain
        assert res.done.draft_tokens > 0
        assert res.done.accepted_draft_tokens <= res.done.draft_tokens
