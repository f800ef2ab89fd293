#!/usr/bin/env python3
"""Write a random Qwen2 model as a Hugging Face folder (config.json and one f16
model.safetensors) whose decode step is bound by memory bandwidth on a CPU, for
bench/engine_bench.c: hidden 2048, 4 layers, 16 query / 2 key-value heads of 128,
FFN 5632, vocabulary 32000 (the R1-Distill-Qwen-7B's head shape; ~490 MB).

    python3 bench/make_engine_bench_model.py OUT_DIR

Pure Python (no numpy): one 1 MiB block of random f16 values with a small
exponent is tiled over every weight — the numbers do not matter, only the bytes
read per step. Norm weights are 1.
"""
import json
import os
import random
import struct
import sys

H, L, NH, NKV, D, F, V = 2048, 4, 16, 2, 128, 5632, 32000


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tensors = [("model.embed_tokens.weight", [V, H])]
    for i in range(L):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", [H]),
            (p + "post_attention_layernorm.weight", [H]),
            (p + "self_attn.q_proj.weight", [NH * D, H]),
            (p + "self_attn.k_proj.weight", [NKV * D, H]),
            (p + "self_attn.v_proj.weight", [NKV * D, H]),
            (p + "self_attn.o_proj.weight", [H, NH * D]),
            (p + "mlp.gate_proj.weight", [F, H]),
            (p + "mlp.up_proj.weight", [F, H]),
            (p + "mlp.down_proj.weight", [H, F]),
        ]
    tensors.append(("model.norm.weight", [H]))
    header, off = {}, 0
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    rng = random.Random(1)
    # f16: random sign and mantissa, exponent 11 (values of magnitude 2^-4 .. 2^-3)
    block = struct.pack("<%dH" % (1 << 19),
                        *[(rng.getrandbits(1) << 15) | (11 << 10) | rng.getrandbits(10)
                          for _ in range(1 << 19)])
    one = struct.pack("<H", 0x3C00)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape in tensors:
            nbytes = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            if len(shape) == 1:
                f.write(one * (nbytes // 2))
                continue
            while nbytes > 0:
                k = min(nbytes, len(block))
                f.write(block[:k])
                nbytes -= k
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": V,
        "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": NH, "num_key_value_heads": NKV,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "hidden_act": "silu", "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
