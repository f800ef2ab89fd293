#!/usr/bin/env python3
"""Prompt processing and decode speed of deepinfer vs llama.cpp on one GGUF.

Both run in this process, on the same model file, prompt and thread count:
deepinfer through its public C API (ctypes over libdeepinfer.so: di_model_load,
di_model_eval), llama.cpp through llama-cpp-python (the model oracle venv,
tests/oracle/requirements-model.txt). Decode is greedy, one token per call, with
the argmax taken the same way for both. Each phase is repeated --reps times and
the best time kept.

Also reported: decode as a fraction of the memory-bandwidth roofline, i.e.
(bytes of weights read per token / measured bandwidth) / (measured time per
token). Bytes per token: every tensor's bytes, except token_embd when the model
has a separate output.weight (only one row of it is read). Bandwidth: the best
of a few numpy copies of a 512 MiB buffer (bytes read + bytes written) / time.

Usage:
  python bench/model_bench.py --lib build/lib/libdeepinfer.so --model M.gguf \
      [--threads 2] [--prompt 128] [--gen 64] [--reps 2]
Ratios (deepinfer / llama.cpp, > 1 means deepinfer is faster) are printed last.
"""
import argparse
import ctypes
import os
import time

import numpy as np


class DiModelOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_threads", ctypes.c_int32),
                ("kv_cache_f32", ctypes.c_int32), ("n_ctx", ctypes.c_int64),
                ("kv_cache_type", ctypes.c_int32), ("reserved", ctypes.c_int32)]

# di_kv_cache_type by the names llama.cpp's --cache-type-k/v use, and llama.cpp's ggml_type
KV_CACHE_TYPES = {"f16": (0, 1), "f32": (1, 0), "q8_0": (2, 8), "q4_0": (3, 2)}


def load_deepinfer(lib_path, model, threads, n_ctx, kv_cache_type="f16"):
    lib = ctypes.CDLL(lib_path)
    lib.di_model_options_init_size.argtypes = [ctypes.POINTER(DiModelOptions), ctypes.c_size_t]
    lib.di_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(DiModelOptions),
                                  ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    lib.di_model_eval.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                  ctypes.POINTER(ctypes.c_float), ctypes.c_uint, ctypes.c_void_p]
    lib.di_model_vocab_size.argtypes = [ctypes.c_void_p]
    lib.di_model_reset.argtypes = [ctypes.c_void_p]
    lib.di_model_free.argtypes = [ctypes.c_void_p]
    opts = DiModelOptions()
    lib.di_model_options_init_size(ctypes.byref(opts), ctypes.sizeof(opts))  # no byte past it
    opts.n_threads = threads
    opts.n_ctx = n_ctx
    opts.kv_cache_type = KV_CACHE_TYPES[kv_cache_type][0]
    handle = ctypes.c_void_p()
    st = lib.di_model_load(model.encode(), ctypes.byref(opts), ctypes.byref(handle), None)
    if st != 0:
        raise SystemExit(f"di_model_load failed with status {st}")
    return lib, handle


def bench_deepinfer(lib, h, prompt, n_gen, reps):
    vocab = lib.di_model_vocab_size(h)
    logits = (ctypes.c_float * vocab)()
    arr = np.frombuffer(logits, dtype=np.float32)
    ids = (ctypes.c_int32 * len(prompt))(*prompt)
    one = (ctypes.c_int32 * 1)()
    best_pp = best_tg = float("inf")
    tokens = []
    for _ in range(reps):
        lib.di_model_reset(h)
        t0 = time.perf_counter()
        assert lib.di_model_eval(h, ids, len(prompt), logits, 0, None) == 0
        best_pp = min(best_pp, time.perf_counter() - t0)
        tokens = []
        t0 = time.perf_counter()
        for _ in range(n_gen):
            one[0] = int(arr.argmax())
            tokens.append(one[0])
            assert lib.di_model_eval(h, one, 1, logits, 0, None) == 0
        best_tg = min(best_tg, time.perf_counter() - t0)
    return best_pp, best_tg, tokens


def bench_llama(model, threads, prompt, n_gen, reps, n_ctx, kv_cache_type="f16", flash_attn=None):
    """llama.cpp with type_k = type_v = the cache type; its flash attention as
    flash_attn says, by default only where a quantized V needs it
    (llama-cpp-python's default is off; llama.cpp's own tools default to auto,
    which turns it on on the CPU)."""
    import llama_cpp
    t = KV_CACHE_TYPES[kv_cache_type][1]
    if flash_attn is None:
        flash_attn = kv_cache_type in ("q8_0", "q4_0")
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                          n_threads=threads, n_threads_batch=threads, logits_all=False,
                          flash_attn=flash_attn, type_k=t, type_v=t, n_gpu_layers=0,
                          verbose=False)
    n_vocab = llm.n_vocab()

    def last_logits():
        # with logits_all=False llama-cpp-python keeps no scores: read the
        # context's last logits row directly (llama_get_logits_ith(ctx, -1))
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,))

    best_pp = best_tg = float("inf")
    tokens = []
    for _ in range(reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        best_pp = min(best_pp, time.perf_counter() - t0)
        tokens = []
        t0 = time.perf_counter()
        for _ in range(n_gen):
            nxt = int(np.argmax(last_logits()))
            tokens.append(nxt)
            llm.eval([nxt])
        best_tg = min(best_tg, time.perf_counter() - t0)
    return best_pp, best_tg, tokens, llama_cpp.__version__


def bytes_per_token(model):
    try:
        from gguf import GGUFReader
    except ImportError:
        return os.path.getsize(model)
    r = GGUFReader(model)
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    total = sum(sizes.values())
    if "output.weight" in sizes and "token_embd.weight" in sizes:
        total -= sizes["token_embd.weight"]
    return total


def bench_transformers_cached(model_cls, model_dir, threads, prompt, n_gen, reps):
    """Best-of-reps prefill and greedy decode times of a transformers model class
    (float32, its own cache) on model_dir, and the decoded tokens."""
    import torch
    torch.set_num_threads(threads)
    model = model_cls.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    best_pp = best_tg = float("inf")
    tokens = []
    with torch.no_grad():
        for _ in range(reps):
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            best_pp = min(best_pp, time.perf_counter() - t0)
            cache, logits = out.cache, out.logits[0, -1]
            tokens = []
            t0 = time.perf_counter()
            for _ in range(n_gen):
                nxt = int(torch.argmax(logits))
                tokens.append(nxt)
                out = model(torch.tensor([[nxt]]), cache=cache, use_cache=True)
                cache, logits = out.cache, out.logits[0, -1]
            best_tg = min(best_tg, time.perf_counter() - t0)
    return best_pp, best_tg, tokens


def bandwidth():
    a = np.ones(512 << 20, dtype=np.uint8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(4):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/lib/libdeepinfer.so")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    ap.add_argument("--gen", type=int, default=64, help="decoded tokens")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    n_ctx = a.prompt + a.gen + 8
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(100, 10000, a.prompt)]

    lib, h = load_deepinfer(a.lib, a.model, a.threads, n_ctx)
    di_pp, di_tg, di_tokens = bench_deepinfer(lib, h, prompt, a.gen, a.reps)
    lib.di_model_free(h)
    ll_pp, ll_tg, ll_tokens, ll_version = bench_llama(a.model, a.threads, prompt, a.gen, a.reps,
                                                      n_ctx)
    bpt = bytes_per_token(a.model)
    bw = bandwidth()
    same = 0
    while same < min(len(di_tokens), len(ll_tokens)) and di_tokens[same] == ll_tokens[same]:
        same += 1

    print(f"model {os.path.basename(a.model)}, {a.threads} threads, prompt {a.prompt} tokens, "
          f"decode {a.gen} tokens, best of {a.reps}; llama-cpp-python {ll_version}")
    print(f"greedy tokens identical for {same}/{a.gen} steps")
    print(f"prompt processing: deepinfer {a.prompt / di_pp:8.1f} tok/s   "
          f"llama.cpp {a.prompt / ll_pp:8.1f} tok/s")
    print(f"decode:            deepinfer {a.gen / di_tg:8.1f} tok/s   "
          f"llama.cpp {a.gen / ll_tg:8.1f} tok/s")
    roof = bw / bpt
    print(f"weights read per token {bpt / 1e6:.1f} MB; copy bandwidth {bw / 1e9:.1f} GB/s; "
          f"roofline {roof:.1f} tok/s")
    print(f"decode roofline fraction: deepinfer {a.gen / di_tg / roof:.2f}   "
          f"llama.cpp {a.gen / ll_tg / roof:.2f}")
    print(f"RATIO prompt processing deepinfer/llama.cpp = {ll_pp / di_pp:.2f}")
    print(f"RATIO decode deepinfer/llama.cpp = {ll_tg / di_tg:.2f}")


if __name__ == "__main__":
    main()
