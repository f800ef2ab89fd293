#!/usr/bin/env python3
"""DeepSeek-V4 prefill and decode: deepinfer vs llama.cpp on a deepseek4 GGUF, or vs transformers.

Two anchors. --gguf: llama.cpp (llama-cpp-python) on the same deepseek4 GGUF, both
engines with the same KV cache type (--kv-cache-type, f16 by default), llama.cpp
with its flash attention (--llama-flash-attn on, the default: what llama.cpp's own
tools pick on the CPU; its deepseek4 graph without it is 2-3x slower at long
prompts). --model:
transformers' own DeepseekV4ForCausalLM on the same random checkpoint, in float32
with its cache (the reference implementation, not a tuned engine); its eager
attention builds a [prompt, prompt] mask per layer, so it runs only the short
prompt, and deepinfer's long-prompt speeds against its short-prompt ones show what
the compressed attention costs as the context grows.
--make writes the checkpoint (a fixed seed; bf16 safetensors), V4-Flash's shape
scaled down:

  hidden 1024, 6 layers (HCA, HCA, CSA, HCA, CSA, HCA; 2 hash layers), 16 heads of
  128 (rope 32) on one K = V head, q_lora 256, o_groups 4 of 256, sliding window 128,
  CSA rate 4 with an indexer of 16 heads of 64 keeping 128, HCA rate 128, mHC of 4
  streams, 32 routed experts (top-4) of 256 + 1 shared, vocab 4096: ~184 M parameters.

--make-gguf writes the same model as llama.cpp users get it: DeepSeek's release
layout with the routed experts in MXFP4 (bf16 elsewhere; llama.cpp's converter
reads no other), converted to a deepseek4 GGUF by the converter of the pinned
llama-cpp-python source distribution (PyPI); --gguf then times deepinfer and
llama.cpp on that one file, same threads, at --prompt and --long tokens.

Usage (model oracle venv):
  python bench/dsv4_bench.py --make /tmp/dsv4-bench
  python bench/dsv4_bench.py --model /tmp/dsv4-bench --lib build/lib/libdeepinfer.so \\
      [--threads 2] [--prompt 512] [--long 4000] [--gen 32] [--reps 2]
  python bench/dsv4_bench.py --make-gguf /tmp/dsv4-bench-gguf
  python bench/dsv4_bench.py --gguf /tmp/dsv4-bench-gguf/dsv4-bench.gguf \\
      --lib build/lib/libdeepinfer.so [--threads 2] [--prompt 512] [--long 8192] \\
      [--kv-cache-type f16|f32|q8_0|q4_0] [--llama-flash-attn on|off]
Ratios (> 1: deepinfer faster, or the long prompt no slower) last.
"""
import argparse
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_bench import (bench_deepinfer, bench_llama, bench_transformers_cached,  # noqa: E402
                         load_deepinfer)

SW, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
CONFIG = dict(vocab_size=4096, hidden_size=1024, moe_intermediate_size=256, num_hidden_layers=6,
              num_attention_heads=16, num_key_value_heads=1, head_dim=128, q_lora_rank=256,
              partial_rotary_factor=0.25, num_experts_per_tok=4, n_routed_experts=32,
              n_shared_experts=1, routed_scaling_factor=1.5, max_position_embeddings=16384,
              layer_types=[HCA, HCA, CSA, HCA, CSA, HCA],
              mlp_layer_types=["hash_moe"] * 2 + ["moe"] * 4, compress_rates={CSA: 4, HCA: 128},
              hc_mult=4, sliding_window=128, o_groups=4, o_lora_rank=256, index_n_heads=16,
              index_head_dim=64, index_topk=128, num_nextn_predict_layers=0,
              initializer_range=0.02, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)


def make(out):
    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    torch.manual_seed(1234)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**CONFIG)).to(torch.bfloat16)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                e, k = CONFIG["n_routed_experts"], CONFIG["num_experts_per_tok"]
                b.copy_(torch.stack([torch.randperm(e)[:k] for _ in range(CONFIG["vocab_size"])]))
    model.save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters")


def make_gguf(out):
    """The --make model in DeepSeek's release layout (MXFP4 routed experts, the
    rest bf16, release config keys), then llama.cpp's converter on it."""
    import json
    import tempfile

    import safetensors.torch
    import torch
    oracle = pathlib.Path(__file__).resolve().parent.parent / "tests" / "oracle"
    sys.path.insert(0, str(oracle))
    import make_dsv4_fixtures as m4
    import make_model_fixtures as mmf
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "dsv4-bench"
        make(str(src))
        state = {}
        for k, v in safetensors.torch.load_file(src / "model.safetensors").items():
            if ".ffn.experts." in k and k.endswith(".weight"):
                codes, e8, _ = m4.mxfp4_quantize(v.to(torch.float32))
                state[k] = codes
                state[k[:-len("weight")] + "scale"] = e8
            else:
                state[k] = v.contiguous()
        state = {m4.release_name(k): v for k, v in state.items()}
        rel = pathlib.Path(tmp) / "release" / "dsv4-bench"
        rel.mkdir(parents=True)
        safetensors.torch.save_file(state, rel / "model.safetensors", metadata={"format": "pt"})
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(m4.release_config_keys(cfg))
        (rel / "config.json").write_text(json.dumps(cfg))
        mmf.convert_checkpoint(rel, out / "dsv4-bench.gguf", "bf16")
    print(f"wrote {out / 'dsv4-bench.gguf'}")


def bench_gguf(a):
    """deepinfer and llama.cpp on one deepseek4 GGUF, interleaved per prompt length."""
    rng = np.random.default_rng(0)
    rows = []
    for n in (a.prompt, a.long):
        prompt = [int(x) for x in rng.integers(2, CONFIG["vocab_size"], n)]
        reps = a.reps if n == a.prompt else 1
        lib, h = load_deepinfer(a.lib, a.gguf, a.threads, n + a.gen + 8, a.kv_cache_type)
        di_pp, di_tg, di_tokens = bench_deepinfer(lib, h, prompt, a.gen, reps)
        lib.di_model_free(h)
        ll_pp, ll_tg, ll_tokens, version = bench_llama(a.gguf, a.threads, prompt, a.gen, reps,
                                                       n + a.gen + 8, a.kv_cache_type,
                                                       a.llama_flash_attn == "on")
        same = 0
        while same < min(len(di_tokens), len(ll_tokens)) and di_tokens[same] == ll_tokens[same]:
            same += 1
        rows.append((n, di_pp, di_tg, ll_pp, ll_tg, same))
    print(f"model {os.path.basename(a.gguf)}, {a.threads} threads, decode {a.gen}, best of "
          f"{a.reps} (the long prompt once), KV cache {a.kv_cache_type} in both; "
          f"llama.cpp = llama-cpp-python {version}, flash attention {a.llama_flash_attn}")
    for n, di_pp, di_tg, ll_pp, ll_tg, same in rows:
        print(f"prefill {n:5d}: deepinfer {n / di_pp:8.1f} tok/s   llama.cpp {n / ll_pp:8.1f} tok/s")
        print(f"decode after {n:5d}: deepinfer {a.gen / di_tg:8.1f} tok/s   llama.cpp "
              f"{a.gen / ll_tg:8.1f} tok/s   (greedy identical for {same}/{a.gen})")
    for n, di_pp, di_tg, ll_pp, ll_tg, _ in rows:
        print(f"RATIO prefill {n} deepinfer/llama.cpp = {ll_pp / di_pp:.2f}")
        print(f"RATIO decode after {n} deepinfer/llama.cpp = {ll_tg / di_tg:.2f}")


def bench_transformers(model_dir, threads, prompt, n_gen, reps):
    from transformers import DeepseekV4ForCausalLM
    return bench_transformers_cached(DeepseekV4ForCausalLM, model_dir, threads, prompt, n_gen, reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make")
    ap.add_argument("--lib", default="build/lib/libdeepinfer.so")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--long", type=int, default=4000)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--make-gguf")
    ap.add_argument("--gguf")
    ap.add_argument("--kv-cache-type", default="f16", choices=["f16", "f32", "q8_0", "q4_0"],
                    help="both engines' cache type with --gguf (f16: each one's default)")
    ap.add_argument("--llama-flash-attn", default="on", choices=["on", "off"],
                    help="llama.cpp's flash attention (on: what llama.cpp's own tools pick "
                         "on the CPU, their default being auto; off: llama-cpp-python's default)")
    a = ap.parse_args()
    if a.make:
        make(a.make)
        return
    if a.make_gguf:
        make_gguf(a.make_gguf)
        return
    if a.gguf:
        bench_gguf(a)
        return
    if not a.model:
        ap.error("--model or --make is required")
    rng = np.random.default_rng(0)
    short = [int(x) for x in rng.integers(2, CONFIG["vocab_size"], a.prompt)]
    long = [int(x) for x in rng.integers(2, CONFIG["vocab_size"], a.long)]
    lib, h = load_deepinfer(a.lib, a.model, a.threads, a.long + a.gen + 8)
    di_pp, di_tg, di_tokens = bench_deepinfer(lib, h, short, a.gen, a.reps)
    di_lpp, di_ltg, _ = bench_deepinfer(lib, h, long, a.gen, 1)
    lib.di_model_free(h)
    tf_pp, tf_tg, tf_tokens = bench_transformers(a.model, a.threads, short, a.gen, a.reps)
    same = 0
    while same < min(len(di_tokens), len(tf_tokens)) and di_tokens[same] == tf_tokens[same]:
        same += 1
    print(f"model {os.path.basename(a.model.rstrip('/'))}, {a.threads} threads, decode {a.gen}, "
          f"best of {a.reps} (the long prompt once)")
    print(f"greedy tokens identical for {same}/{a.gen} steps (prompt {a.prompt})")
    print(f"prefill {a.prompt:5d}: deepinfer {a.prompt / di_pp:8.1f} tok/s   transformers "
          f"{a.prompt / tf_pp:8.1f} tok/s")
    print(f"decode after {a.prompt:5d}: deepinfer {a.gen / di_tg:8.1f} tok/s   transformers "
          f"{a.gen / tf_tg:8.1f} tok/s")
    print(f"prefill {a.long:5d}: deepinfer {a.long / di_lpp:8.1f} tok/s")
    print(f"decode after {a.long:5d}: deepinfer {a.gen / di_ltg:8.1f} tok/s")
    print(f"RATIO prefill deepinfer/transformers = {tf_pp / di_pp:.2f}")
    print(f"RATIO decode deepinfer/transformers = {tf_tg / di_tg:.2f}")
    print(f"RATIO deepinfer prefill {a.long}/{a.prompt} = {(a.long / di_lpp) / (a.prompt / di_pp):.2f}")
    print(f"RATIO deepinfer decode after {a.long}/{a.prompt} = {di_tg / di_ltg:.2f}")


if __name__ == "__main__":
    main()
