#!/usr/bin/env python3
"""CPU kernels on the files people download: deepinfer vs llama.cpp, format x
threads x prompt length, in one run (the CPU-kernel issue's table).

Files (made once, cached in --cache-dir, never committed):
  Q4_1      SmolLM2-135M-Instruct as shipped on PyPI (scripts/fetch_assets.py)
  Q4_K_M, Q5_K_M, Q8_0 (and Q2_K, Q3_K_M, Q6_K, Q4_0, Q5_0, Q5_1, IQ4_NL, IQ4_XS)
            the same file requantized by llama.cpp's own quantizer
            (llama_model_quantize, allow_requantize; rows of 576 are not a
            multiple of 256, so its K-quant mixes fall back to Q5_0/Q5_1/Q8_0
            where it must, as for any such model)
  F16, BF16 the same file dequantized by llama.cpp's quantizer (so Q4_1's values
            stored as f16/bf16: the weight bytes and kernels of a real F16/BF16
            file, not its values)
  7B-Q4_K_M a random Qwen2 of the DeepSeek-R1-Distill-Qwen-7B's head size and GQA
            shape, quantized by llama.cpp to Q4_K_M (bench/make_bench_gguf.py):
            its weights stream from memory whatever the caches hold
For each file, thread count and prompt length, interleaved (deepinfer, then
llama.cpp, on the same random prompt IDs): prefill tokens/s (the prompt in one
call) and decode tokens/s (--gen greedy tokens after that prompt, one per
call), best of --reps; decode's fraction of the memory-bandwidth roofline,
counting the weight bytes a token reads (as model_bench.py) and, in the next
column, those plus the KV cache it reads (di_model_kv_bytes_per_token times the
mean context of the decoded tokens: both engines keep the same cache type, so
the same bytes), each over the measured copy bandwidth. Ratios (deepinfer /
llama.cpp, > 1: deepinfer faster) in the last columns.

    python bench/kernels_bench.py --lib build/release/lib/libdeepinfer.so \\
        [--formats Q4_1,Q4_K_M,Q5_K_M,Q8_0,F16,BF16,7B-Q4_K_M] [--threads 1,2] \\
        [--prompts 64,512,2048,4096] [--gen 32] [--reps 2] [--kv-cache-type f16] \\
        [--llama-flash-attn auto|on|off]
--kv-cache-type q8_0 or q4_0 runs both engines with that KV cache (llama.cpp:
type_k and type_v, with its flash attention, which a quantized V needs; f16
runs llama.cpp without flash attention, as before, unless --llama-flash-attn on:
llama.cpp's own tools default to auto, which turns it on on the CPU).
Run with the model oracle venv (llama-cpp-python, gguf, numpy: scripts/oracle-venv.sh
--model); the llama.cpp anchor is that venv's build (portable x86-64-v3 unless
built otherwise, bench/README.md).
"""
import argparse
import ctypes
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_bench as mb  # noqa: E402

FTYPES = {"F16": 1, "BF16": 32, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q2_K": 10, "Q3_K_M": 12, "IQ4_NL": 25,
          "Q4_0": 2, "Q5_0": 8, "Q5_1": 9, "Q6_K": 18,
          "IQ4_XS": 30}  # llama_ftype values


def smollm2(asset_dir):
    return os.path.join(asset_dir, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def requantize(src, dst, ftype):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {src} -> {dst} failed ({rc})")


def model_file(fmt, asset_dir, cache):
    os.makedirs(cache, exist_ok=True)
    if fmt == "Q4_1":
        return smollm2(asset_dir)
    if fmt == "7B-Q4_K_M":
        path = os.path.join(cache, "qwen2-7b-shape-Q4_K_M.gguf")
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                         "make_bench_gguf.py"), path], check=True)
        return path
    path = os.path.join(cache, f"SmolLM2-135M-Instruct.{fmt}.gguf")
    if not os.path.exists(path):
        requantize(smollm2(asset_dir), path, FTYPES[fmt])
    return path


def tensor_types(path):
    from gguf import GGUFReader
    counts = {}
    for t in GGUFReader(path).tensors:
        if len(t.shape) >= 2:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def time_deepinfer(lib, h, prompt, n_gen, reps):
    vocab = lib.di_model_vocab_size(h)
    logits = (ctypes.c_float * vocab)()
    arr = np.frombuffer(logits, dtype=np.float32)
    ids = (ctypes.c_int32 * len(prompt))(*prompt)
    one = (ctypes.c_int32 * 1)()
    pp = tg = float("inf")
    for _ in range(reps):
        lib.di_model_reset(h)
        t0 = time.perf_counter()
        assert lib.di_model_eval(h, ids, len(prompt), logits, 0, None) == 0
        pp = min(pp, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            one[0] = int(arr.argmax())
            assert lib.di_model_eval(h, one, 1, logits, 0, None) == 0
        tg = min(tg, time.perf_counter() - t0)
    return len(prompt) / pp, n_gen / tg


def time_llama(llm, prompt, n_gen, reps):
    import llama_cpp
    n_vocab = llm.n_vocab()
    pp = tg = float("inf")
    for _ in range(reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        pp = min(pp, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                        shape=(n_vocab,))
            llm.eval([int(np.argmax(row))])
        tg = min(tg, time.perf_counter() - t0)
    return len(prompt) / pp, n_gen / tg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/release/lib/libdeepinfer.so")
    # scripts/fetch_assets.py says where the assets are ($DI_CACHE, else
    # $XDG_CACHE_HOME/deepinfer or ~/.cache/deepinfer, then assets/)
    assets = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "..", "scripts", "fetch_assets.py"),
                             "--asset-dir"], check=True, capture_output=True,
                            text=True).stdout.strip()
    ap.add_argument("--asset-dir", default=assets, help="the fetched assets (default: %(default)s)")
    ap.add_argument("--cache-dir", default=os.path.join(os.path.dirname(assets), "bench"),
                    help="the requantized files, made once (default: %(default)s)")
    ap.add_argument("--formats", default="Q4_1,Q4_K_M,Q5_K_M,Q8_0,7B-Q4_K_M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompts", default="64,512,2048,4096")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kv-cache-type", default="f16", choices=sorted(mb.KV_CACHE_TYPES))
    ap.add_argument("--llama-flash-attn", default="auto", choices=["auto", "on", "off"],
                    help="llama.cpp's flash attention: on, off, or auto (on only where a "
                         "quantized V needs it, llama-cpp-python's default otherwise)")
    a = ap.parse_args()
    import llama_cpp
    formats = a.formats.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    prompts = [int(p) for p in a.prompts.split(",")]
    n_ctx = max(prompts) + a.gen + 8
    bw = mb.bandwidth()
    rows = []
    for fmt in formats:
        path = model_file(fmt, a.asset_dir, a.cache_dir)
        bpt = mb.bytes_per_token(path)
        print(f"# {fmt}: {os.path.basename(path)} ({tensor_types(path)}); "
              f"{bpt / 1e6:.1f} MB of weights a token", flush=True)
        for nt in threads:
            lib, h = mb.load_deepinfer(a.lib, path, nt, n_ctx, a.kv_cache_type)
            ggml_type = mb.KV_CACHE_TYPES[a.kv_cache_type][1]
            llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                                  n_threads=nt, n_threads_batch=nt, logits_all=False,
                                  flash_attn=a.llama_flash_attn == "on" or (
                                      a.llama_flash_attn == "auto"
                                      and a.kv_cache_type in ("q8_0", "q4_0")),
                                  type_k=ggml_type, type_v=ggml_type, n_gpu_layers=0,
                                  verbose=False)
            vocab = lib.di_model_vocab_size(h)
            lib.di_model_kv_bytes_per_token.argtypes = [ctypes.c_void_p]
            lib.di_model_kv_bytes_per_token.restype = ctypes.c_int64
            kvb = lib.di_model_kv_bytes_per_token(h)
            for n in prompts:
                prompt = [int(x) for x in np.random.default_rng(n).integers(100, min(vocab, 10000), n)]
                di = time_deepinfer(lib, h, prompt, a.gen, a.reps)
                ll = time_llama(llm, prompt, a.gen, a.reps)
                kv_read = kvb * (n + (a.gen - 1) / 2)  # the mean context a decoded token reads
                rows.append((fmt, nt, n, di, ll, bw / bpt, bw / (bpt + kv_read)))
                print(f"  {fmt} threads {nt} prompt {n}: prefill {di[0]:.1f} vs {ll[0]:.1f}, "
                      f"decode {di[1]:.1f} vs {ll[1]:.1f} tok/s", flush=True)
            lib.di_model_free(h)
            del llm
    print(f"\ncopy bandwidth {bw / 1e9:.1f} GB/s; llama-cpp-python {llama_cpp.__version__}; "
          f"decode {a.gen} tokens after the prompt; best of {a.reps}; KV cache {a.kv_cache_type}; "
          f"llama.cpp flash attention {a.llama_flash_attn}")
    print("| format | threads | prompt | prefill di / llama (tok/s) | decode di / llama (tok/s) "
          "| decode roofline di / llama | with KV di / llama | prefill ratio | decode ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fmt, nt, n, di, ll, roof, roof_kv in rows:
        print(f"| {fmt} | {nt} | {n} | {di[0]:.1f} / {ll[0]:.1f} | {di[1]:.1f} / {ll[1]:.1f} | "
              f"{di[1] / roof:.2f} / {ll[1] / roof:.2f} | "
              f"{di[1] / roof_kv:.2f} / {ll[1] / roof_kv:.2f} | "
              f"{di[0] / ll[0]:.2f} | {di[1] / ll[1]:.2f} |")


if __name__ == "__main__":
    main()
