#!/usr/bin/env python3
"""Write a random Qwen2 GGUF shaped like a small R1-distill, quantized by llama.cpp.

No complete DeepSeek-R1-Distill-Qwen-7B GGUF can be fetched (docs/models.md), so
bench/model_bench.py measures the 7B's weight types (Q4_K_M: Q4_K and Q6_K) on
this stand-in: hidden 2048, 6 layers, 16 query heads of 128 and 2 KV heads (the
7B's head size and a similar GQA ratio), FFN 5632, vocabulary 32000, q/k/v biases,
untied output — 234 MiB at Q4_K_M. Weights are N(0, 0.02) from a fixed seed, so
the logits are noise: greedy agreement on it is not meaningful, speed is.

Usage (model oracle venv: gguf, llama-cpp-python):
  python bench/make_bench_gguf.py OUT.gguf [FTYPE]     FTYPE: Q4_K_M (default), Q8_0, ...
"""
import argparse
import os
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np

H, L, NH, NKV, F, V = 2048, 6, 16, 2, 5632, 32000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("out", metavar="OUT.gguf", help="the file to write")
    ap.add_argument("ftype", nargs="?", default="Q4_K_M",
                    help="llama.cpp's file type: Q4_K_M (default), Q8_0, ...")
    a = ap.parse_args()
    out, ftype = a.out, a.ftype
    hd = H // NH
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * 0.02

    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        w = gguf.GGUFWriter(f32, "qwen2")
        w.add_name("deepinfer-bench-qwen2")
        w.add_context_length(4096)
        w.add_embedding_length(H)
        w.add_block_count(L)
        w.add_feed_forward_length(F)
        w.add_head_count(NH)
        w.add_head_count_kv(NKV)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(10000.0)
        w.add_vocab_size(V)
        w.add_file_type(0)
        w.add_tokenizer_model("none")
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_tensor("token_embd.weight", r(V, H))
        w.add_tensor("output.weight", r(V, H))
        w.add_tensor("output_norm.weight", np.ones(H, np.float32))
        for layer in range(L):
            p = f"blk.{layer}."
            w.add_tensor(p + "attn_norm.weight", np.ones(H, np.float32))
            w.add_tensor(p + "ffn_norm.weight", np.ones(H, np.float32))
            w.add_tensor(p + "attn_q.weight", r(H, H))
            w.add_tensor(p + "attn_q.bias", r(H))
            w.add_tensor(p + "attn_k.weight", r(NKV * hd, H))
            w.add_tensor(p + "attn_k.bias", r(NKV * hd))
            w.add_tensor(p + "attn_v.weight", r(NKV * hd, H))
            w.add_tensor(p + "attn_v.bias", r(NKV * hd))
            w.add_tensor(p + "attn_output.weight", r(H, H))
            w.add_tensor(p + "ffn_gate.weight", r(F, H))
            w.add_tensor(p + "ffn_up.weight", r(F, H))
            w.add_tensor(p + "ffn_down.weight", r(H, F))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
        params.nthread = 2
        if llama_cpp.llama_model_quantize(f32.encode(), out.encode(), params) != 0:
            sys.exit("llama_model_quantize failed")
    print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
