"""Engine(kv_cache_type=): the quantized KV caches (di_engine_config.kv_cache_type)
answer a greedy token request; an unknown name is refused before loading. (The
struct-layout guard, a field appended to the header and not to
_lib.EngineConfig, is test_structs.py.)"""
import pytest

import deepinfer
from deepinfer import Done, Status, Tokens, _lib


def test_engine_config_defaults_to_the_f16_cache():
    assert _lib.new_engine_config(_lib.load()).kv_cache_type == _lib.KV_CACHE_TYPES["f16"]


BUDGET = 8 << 20  # kv_cache_bytes: whole 16-token blocks of the cache's type


def _blocks_total(path, kv):
    with deepinfer.Engine(path, n_threads=2, n_ctx=256, kv_cache_bytes=BUDGET,
                          kv_cache_type=kv) as e:
        return e.kv_cache_stats.blocks_total


@pytest.mark.parametrize("kv, ratio", [("q8_0", 34 / 32 / 2), ("q4_0", 18 / 32 / 2)])
def test_quantized_kv_cache_answers_a_greedy_request(smol_path, smol_fixture, kv, ratio):
    """Exactly one Done after the tokens asked for; the same budget holds the
    type's share of f16's bytes per token (blocks of 32 values: 34 and 18
    bytes), so the type reached the library."""
    prompt = smol_fixture["cases"][0]["prompt"]
    n = 4
    with deepinfer.Engine(smol_path, n_threads=2, n_ctx=256, kv_cache_bytes=BUDGET,
                          kv_cache_type=kv) as e:
        events = list(e.submit(prompt, temperature=0, max_tokens=n, ignore_eos=True))
        blocks = e.kv_cache_stats.blocks_total
    dones = [ev for ev in events if isinstance(ev, Done)]
    assert dones == [events[-1]]
    assert dones[0].status == Status.OK
    assert dones[0].completion_tokens == n
    assert len([i for ev in events if isinstance(ev, Tokens) for i in ev.ids]) == n
    f16 = _blocks_total(smol_path, "f16")
    assert 0.9 * f16 / ratio <= blocks <= (f16 + 1) / ratio, (kv, blocks, f16)


def test_unknown_kv_cache_type_is_a_value_error():
    with pytest.raises(ValueError, match="kv_cache_type: unknown KV cache type 'q5' "
                       r"\(expected f16, f32, q8_0 or q4_0\)"):
        deepinfer.Engine("/no/such/model.gguf", kv_cache_type="q5")
    for bad in (["q8_0"], None, 2, b"q8_0"):  # not a name: the same error, not a TypeError
        with pytest.raises(ValueError, match="kv_cache_type: unknown KV cache type"):
            deepinfer.Engine("/no/such/model.gguf", kv_cache_type=bad)
