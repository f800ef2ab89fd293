"""Engine.kv_cache_stats (di_engine_kv_cache_stats) against block arithmetic: a
request of n tokens holds ceil(n / 16) blocks while it runs; when it ends its full
blocks stay in the prefix cache, and the same prompt again finds those before its
last token."""

import pytest

import deepinfer
from deepinfer import Tokens

from conftest import TINY


def test_counts_follow_a_request_and_the_prefix_cache():
    n, m = 70, 6
    prompt = [(i * 13 + 5) % 512 for i in range(n)]
    with deepinfer.Engine(TINY, n_threads=2) as e:
        k = e.kv_cache_stats
        assert isinstance(k, deepinfer.KvCacheStats)
        assert k.block_tokens == 16
        assert k.blocks_free == k.blocks_total > 0
        assert k.blocks_used == k.blocks_cached == k.tokens_used == k.running_requests == 0
        req = e.submit(prompt, temperature=0, max_tokens=m, ignore_eos=True)
        seen = 0
        for ev in req:
            if isinstance(ev, Tokens):
                seen += len(ev.ids)
                k = e.kv_cache_stats
                if k.running_requests:  # (the worker may have ended it already)
                    assert n + seen - 1 <= k.tokens_used <= n + m - 1
                    assert k.blocks_used == -(-k.tokens_used // 16)
        k = e.kv_cache_stats
        assert k.blocks_used == k.tokens_used == k.running_requests == 0
        assert k.blocks_cached == (n + m - 1) // 16
        assert k.blocks_used + k.blocks_cached + k.blocks_free == k.blocks_total
        assert (k.prefix_cache_queries_total, k.prefix_cache_hits_total) == (n, 0)
        again = e.generate(prompt, temperature=0, max_tokens=1, ignore_eos=True)
        k = e.kv_cache_stats
        assert again.done.prompt_cache_hit_tokens == (n - 1) // 16 * 16
        assert (k.prefix_cache_queries_total, k.prefix_cache_hits_total) == (2 * n, 64)
        assert k.blocks_evicted_total == 0
    with pytest.raises(deepinfer.InvalidStateError):
        e.kv_cache_stats


def test_without_the_prefix_cache_nothing_is_kept():
    with deepinfer.Engine(TINY, n_threads=2, prefix_cache=False) as e:
        e.generate(list(range(1, 40)), temperature=0, max_tokens=4)
        k = e.kv_cache_stats
        assert k.blocks_cached == k.blocks_used == k.prefix_cache_queries_total == 0
        assert k.blocks_free == k.blocks_total
