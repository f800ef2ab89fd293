#!/usr/bin/env python3
"""Write a random-weight Llama GGUF for the CUDA decode benchmark (docs/cuda.md).

  python scripts/make_cuda_bench_gguf.py OUT.gguf {bf16,q4_k,q8_0} [LAYERS] [--tiny]

Shapes are a 7B Llama's (hidden 4096, 32 heads of 128, MHA, FFN 11008,
vocabulary 32000) with LAYERS layers (default 4: decode bytes/s does not depend
on the depth, and the file stays ~2 GiB at bf16); --tiny writes hidden 256,
FFN 512, vocabulary 1000 (a file the CPU backend loads in a blink, to test
this writer). Needs only Python 3 and numpy: it writes GGUF v3 itself, so the
GPU machine needs neither gguf nor llama.cpp. Weights: bf16 N(0, 0.02); the
quantized types are random codes with small finite f16 scales — the logits are
noise, the bytes moved and the work done are a real model's.
"""
import struct
import sys

import numpy as np

GGML = {"f32": 0, "q8_0": 8, "q4_k": 12, "bf16": 30}
# (elements, bytes) per block
BLOCK = {"f32": (1, 4), "bf16": (1, 2), "q8_0": (32, 34), "q4_k": (256, 144)}
ALIGN = 32


def kv_string(key, val):
    k, v = key.encode(), val.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v


def kv_u32(key, val):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<II", 4, val)


def kv_f32(key, val):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<If", 6, val)


def tensor_bytes(rng, kind, n_in, n_out):
    be, bb = BLOCK[kind]
    if kind == "f32":
        return np.ones(n_in * n_out, dtype=np.float32).tobytes()
    if kind == "bf16":
        x = (rng.standard_normal(n_in * n_out, dtype=np.float32) * 0.02).view(np.uint32)
        return (x >> 16).astype(np.uint16).tobytes()
    n_blocks = n_in * n_out // be
    raw = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    # small finite f16 scales: d (and dmin for Q4_K) = 2^-10
    half = np.frombuffer(np.float16(2.0**-10).tobytes(), dtype=np.uint8)
    raw[:, 0:2] = half
    if kind == "q4_k":
        raw[:, 2:4] = half
    return raw.tobytes()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    tiny = "--tiny" in sys.argv
    if len(args) < 2 or args[1] not in ("bf16", "q4_k", "q8_0"):
        sys.exit(__doc__)
    out, kind = args[0], args[1]
    L = int(args[2]) if len(args) > 2 else 4
    E, NH, F, V = (256, 4, 512, 1000) if tiny else (4096, 32, 11008, 32000)
    rng = np.random.default_rng(0)
    tensors = [("token_embd.weight", kind, E, V), ("output_norm.weight", "f32", E, 1),
               ("output.weight", kind, E, V)]
    for i in range(L):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", "f32", E, 1), (b + "attn_q.weight", kind, E, E),
                    (b + "attn_k.weight", kind, E, E), (b + "attn_v.weight", kind, E, E),
                    (b + "attn_output.weight", kind, E, E), (b + "ffn_norm.weight", "f32", E, 1),
                    (b + "ffn_gate.weight", kind, E, F), (b + "ffn_up.weight", kind, E, F),
                    (b + "ffn_down.weight", "q8_0" if kind == "q4_k" and F % 256 else kind, F, E)]
    meta = [kv_string("general.architecture", "llama"), kv_string("general.name", "cuda-bench"),
            kv_u32("general.alignment", ALIGN), kv_u32("llama.context_length", 4096),
            kv_u32("llama.embedding_length", E), kv_u32("llama.block_count", L),
            kv_u32("llama.feed_forward_length", F), kv_u32("llama.attention.head_count", NH),
            kv_u32("llama.attention.head_count_kv", NH), kv_u32("llama.vocab_size", V),
            kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
            kv_f32("llama.rope.freq_base", 10000.0)]
    infos, offset, sizes = [], 0, []
    for name, k, n_in, n_out in tensors:
        n = name.encode()
        dims = [n_in] if n_out == 1 else [n_in, n_out]
        be, bb = BLOCK[k]
        size = n_in * n_out // be * bb
        infos.append(struct.pack("<Q", len(n)) + n + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) +
                     struct.pack("<IQ", GGML[k], offset))
        sizes.append(size)
        offset += (size + ALIGN - 1) // ALIGN * ALIGN
    with open(out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))
        for m in meta:
            f.write(m)
        for i in infos:
            f.write(i)
        f.write(b"\0" * ((-f.tell()) % ALIGN))
        for (name, k, n_in, n_out), size in zip(tensors, sizes):
            data = tensor_bytes(rng, k, n_in, n_out)
            assert len(data) == size, name
            f.write(data)
            f.write(b"\0" * ((-size) % ALIGN))
    print(f"{out}: {kind}, {L} layers, {offset / 2**30:.2f} GiB of tensors")


if __name__ == "__main__":
    main()
