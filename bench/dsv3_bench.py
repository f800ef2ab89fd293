#!/usr/bin/env python3
"""DeepSeek-V3 decode speed: deepinfer vs transformers (torch, CPU) on one checkpoint.

No DeepSeek-V3 checkpoint small enough for a CPU exists on PyPI and llama.cpp is
not in the loop here (deepinfer reads DeepSeek from Hugging Face directories
only), so the anchor is transformers' own DeepseekV3ForCausalLM running the same
random checkpoint, in float32 with its KV cache (the reference implementation,
not a tuned engine), plus the memory-bandwidth roofline. --make writes the
checkpoint (a fixed seed; bf16 safetensors):

  hidden 1024, 6 layers (1 dense + 5 MoE), 16 heads (nope 64, rope 32, v 64),
  q_lora 384, kv_lora 256, 32 routed experts (top-4, 4 groups, 2 kept) of 256,
  1 shared expert, dense FFN 2816, vocab 16384: ~190 M parameters, 380 MB.

Usage (model oracle venv):
  python bench/dsv3_bench.py --make /tmp/dsv3-bench
  python bench/dsv3_bench.py --model /tmp/dsv3-bench --lib build/lib/libdeepinfer.so \
      [--threads 2] [--prompt 64] [--gen 32] [--reps 2]
Weights read per decode token: every tensor except the token embedding and the
routed experts, plus num_experts_per_tok / n_routed_experts of the routed experts
(the expected share, uniform routing). Ratios (> 1: deepinfer faster) last.
"""
import argparse
import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_bench import bandwidth, bench_deepinfer, bench_transformers_cached, load_deepinfer  # noqa: E402,E501

CONFIG = dict(vocab_size=16384, hidden_size=1024, intermediate_size=2816,
              moe_intermediate_size=256, num_hidden_layers=6, num_attention_heads=16,
              num_key_value_heads=16, n_shared_experts=1, n_routed_experts=32,
              num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
              kv_lora_rank=256, q_lora_rank=384, qk_rope_head_dim=32, qk_nope_head_dim=64,
              v_head_dim=64, first_k_dense_replace=1, norm_topk_prob=True,
              max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=0,
              eos_token_id=1, initializer_range=0.02, num_nextn_predict_layers=0)


def make(out):
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    torch.manual_seed(1234)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**CONFIG))
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters")


def bytes_per_token(model_dir):
    from safetensors import safe_open
    cfg = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    share = cfg["num_experts_per_tok"] / cfg["n_routed_experts"]
    total = 0.0
    for f in pathlib.Path(model_dir).glob("*.safetensors"):
        with safe_open(f, "np") as st:
            for k in st.keys():
                sl = st.get_slice(k)
                n = int(np.prod(sl.get_shape())) * {"BF16": 2, "F16": 2, "F32": 4,
                                                     "F8_E4M3": 1}[sl.get_dtype()]
                if k == "model.embed_tokens.weight":
                    continue
                total += n * share if ".mlp.experts." in k else n
    return total


def bench_transformers(model_dir, threads, prompt, n_gen, reps):
    from transformers import DeepseekV3ForCausalLM
    return bench_transformers_cached(DeepseekV3ForCausalLM, model_dir, threads, prompt, n_gen, reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make")
    ap.add_argument("--lib", default="build/lib/libdeepinfer.so")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    if a.make:
        make(a.make)
        return
    if not a.model:
        ap.error("--model or --make is required")
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(2, CONFIG["vocab_size"], a.prompt)]
    lib, h = load_deepinfer(a.lib, a.model, a.threads, a.prompt + a.gen + 8)
    di_pp, di_tg, di_tokens = bench_deepinfer(lib, h, prompt, a.gen, a.reps)
    lib.di_model_kv_bytes_per_token.restype = ctypes_int64()
    kv = lib.di_model_kv_bytes_per_token(h)
    lib.di_model_free(h)
    tf_pp, tf_tg, tf_tokens = bench_transformers(a.model, a.threads, prompt, a.gen, a.reps)
    same = 0
    while same < min(len(di_tokens), len(tf_tokens)) and di_tokens[same] == tf_tokens[same]:
        same += 1
    bpt = bytes_per_token(a.model)
    roof = bandwidth() / bpt
    print(f"model {os.path.basename(a.model.rstrip('/'))}, {a.threads} threads, prompt {a.prompt}, "
          f"decode {a.gen}, best of {a.reps}; KV cache {kv} bytes/token (f16)")
    print(f"greedy tokens identical for {same}/{a.gen} steps")
    print(f"prefill: deepinfer {a.prompt / di_pp:8.1f} tok/s   transformers {a.prompt / tf_pp:8.1f} tok/s")
    print(f"decode:  deepinfer {a.gen / di_tg:8.1f} tok/s   transformers {a.gen / tf_tg:8.1f} tok/s")
    print(f"weights read per token {bpt / 1e6:.1f} MB; roofline {roof:.1f} tok/s; deepinfer "
          f"decode at {a.gen / di_tg / roof:.2f} of it")
    print(f"RATIO prefill deepinfer/transformers = {tf_pp / di_pp:.2f}")
    print(f"RATIO decode deepinfer/transformers = {tf_tg / di_tg:.2f}")


def ctypes_int64():
    import ctypes
    return ctypes.c_int64


if __name__ == "__main__":
    main()
