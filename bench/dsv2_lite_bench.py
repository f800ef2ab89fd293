#!/usr/bin/env python3
"""DeepSeek-V2-Lite-shaped MoE through the engine vs llama.cpp, same GGUF.

No DeepSeek GGUF can be fetched here (no model hub; PyPI has none), so --make
writes one with DeepSeek-V2-Lite's real shape and random weights, then has
llama.cpp's own quantizer (llama_model_quantize) turn it into Q4_K_M:

  vocab 102400, hidden 2048, 27 layers (1 dense of FFN 10944, then 26 MoE),
  16 heads, no q LoRA, kv_lora_rank 512, qk_nope 128 + rope 64, v 128,
  64 routed experts of 1408 (top-6, softmax gating) + 2 shared, YaRN x40:
  15.7 B parameters.

Weights are N(0, 0.02) drawn once into a pool and laid out at random offsets
(drawing 15.7 B normals would take longer than the benchmark), written as F16
with llama.cpp's deepseek2 tensor names and metadata (the layout
convert_hf_to_gguf.py writes: split attn_k_b / attn_v_b, stacked experts). Q4_K_M
keeps K-quants where rows allow and falls back to Q5_0 / Q8_0 where they do not
(attn_k_b's rows of 128, ffn_down_exps' rows of 1408), as it does for the real
model. The logits are noise; greedy agreement is reported, speed is the point.

Usage (model oracle venv: gguf, llama-cpp-python):
  python bench/dsv2_lite_bench.py --make /tmp/dsv2-lite.Q4_K_M.gguf [--layers 27]
  python bench/dsv2_lite_bench.py --model /tmp/dsv2-lite.Q4_K_M.gguf \\
      [--exe build/bench/ttft_bench] [--threads 1,2] [--prompt 64] [--gen 16] \\
      [--concurrent 8] [--reps 2]

Per thread count, after one untimed warm-up run of each (paging the weights in):
deepinfer through the engine (bench/ttft_bench.c as a
coprocess: one token request, then K submitted at once) and llama.cpp
(llama-cpp-python: Llama.eval for one sequence; K sequences in one llama_batch
per step with the low-level API, as llama.cpp's batched example does), greedy,
interleaved, best of --reps. Prefill tok/s = prompt tokens / time to the first
token (K prompts: K x prompt / time until every sequence has its first token);
decode tok/s = tokens after the first / time after the first (K: aggregate).
Last, the logits after a 16-token prompt from both on the same file (max |diff|
over llama.cpp's range, argmax, top-10 overlap): the parity check on this
K-quant deepseek2 file (the random weights make the logits nearly flat, so
greedy tokens soon part on near-ties). Roofline: weight bytes one decode step reads (everything but the embedding,
routed experts at their top-k share) / measured copy bandwidth. Ratios
deepinfer / llama.cpp last (> 1: deepinfer faster).
"""
import argparse
import ctypes
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_bench import bandwidth, load_deepinfer  # noqa: E402
from ttft_bench import Driver, llama_eval_run  # noqa: E402

V2_LITE = dict(vocab=102400, hidden=2048, layers=27, ff=10944, heads=16, kv_lora=512,
               nope=128, rope=64, v=128, experts=64, used=6, shared=2, ff_exp=1408,
               dense=1, ctx=163840, theta=10000.0, yarn_factor=40.0, yarn_orig=4096,
               mscale_all_dim=0.707)


def tensors(c):
    """(name, ggml ne) of every tensor, in file order."""
    h, qk = c["hidden"], c["nope"] + c["rope"]
    out = [("token_embd.weight", [h, c["vocab"]])]
    for i in range(c["layers"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", [h]),
                (b + "attn_q.weight", [h, c["heads"] * qk]),
                (b + "attn_kv_a_mqa.weight", [h, c["kv_lora"] + c["rope"]]),
                (b + "attn_kv_a_norm.weight", [c["kv_lora"]]),
                (b + "attn_k_b.weight", [c["nope"], c["kv_lora"], c["heads"]]),
                (b + "attn_v_b.weight", [c["kv_lora"], c["v"], c["heads"]]),
                (b + "attn_output.weight", [c["heads"] * c["v"], h]),
                (b + "ffn_norm.weight", [h])]
        if i < c["dense"]:
            out += [(b + "ffn_gate.weight", [h, c["ff"]]), (b + "ffn_up.weight", [h, c["ff"]]),
                    (b + "ffn_down.weight", [c["ff"], h])]
        else:
            e, fe, fs = c["experts"], c["ff_exp"], c["ff_exp"] * c["shared"]
            out += [(b + "ffn_gate_inp.weight", [h, e]),
                    (b + "ffn_gate_exps.weight", [h, fe, e]),
                    (b + "ffn_up_exps.weight", [h, fe, e]),
                    (b + "ffn_down_exps.weight", [fe, h, e]),
                    (b + "ffn_gate_shexp.weight", [h, fs]),
                    (b + "ffn_up_shexp.weight", [h, fs]),
                    (b + "ffn_down_shexp.weight", [fs, h])]
    out += [("output_norm.weight", [h]), ("output.weight", [h, c["vocab"]])]
    return out


def make(out, layers):
    import gguf
    import llama_cpp
    c = dict(V2_LITE, layers=layers)
    rng = np.random.default_rng(20261202)
    pool = (rng.standard_normal(1 << 26, dtype=np.float32) * 0.02).astype(np.float16)
    pool = np.concatenate([pool, pool])  # any offset below 2^26 has 2^26 values after it
    listing = tensors(c)
    n_params = sum(int(np.prod(ne)) for _, ne in listing)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as tmp:
        f16 = os.path.join(tmp, "f16.gguf")
        w = gguf.GGUFWriter(f16, "deepseek2")
        w.add_name("deepinfer-bench-deepseek-v2-lite-shape")
        w.add_context_length(c["ctx"])
        w.add_embedding_length(c["hidden"])
        w.add_block_count(c["layers"])
        w.add_feed_forward_length(c["ff"])
        w.add_head_count(c["heads"])
        w.add_head_count_kv(1)  # MLA: one latent "head" shared by all (the converter's)
        w.add_rope_freq_base(c["theta"])
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_used_count(c["used"])
        w.add_vocab_size(c["vocab"])
        w.add_kv_lora_rank(c["kv_lora"])
        w.add_key_length(c["kv_lora"] + c["rope"])
        w.add_value_length(c["kv_lora"])
        w.add_key_length_mla(c["nope"] + c["rope"])
        w.add_value_length_mla(c["v"])
        w.add_leading_dense_block_count(c["dense"])
        w.add_expert_feed_forward_length(c["ff_exp"])
        w.add_expert_count(c["experts"])
        w.add_expert_shared_count(c["shared"])
        w.add_expert_weights_scale(1.0)
        w.add_expert_weights_norm(False)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
        w.add_rope_dimension_count(c["rope"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["yarn_factor"])
        w.add_rope_scaling_orig_ctx_len(c["yarn_orig"])
        w.add_rope_scaling_yarn_log_mul(0.1 * c["mscale_all_dim"])
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        w.add_tokenizer_model("none")
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
        for name, ne in listing:
            dt = np.float32 if len(ne) == 1 else np.float16
            n = int(np.prod(ne))
            w.add_tensor_info(name, list(reversed(ne)), np.dtype(dt), n * np.dtype(dt).itemsize)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, ne in listing:
            n = int(np.prod(ne))
            if len(ne) == 1:  # norms: around 1
                t = (1.0 + rng.standard_normal(n, dtype=np.float32) * 0.1).reshape(
                    list(reversed(ne)))
            else:
                parts, left = [], n
                while left:
                    k = min(left, 1 << 26)
                    off = int(rng.integers(0, 1 << 26))
                    parts.append(pool[off:off + k])
                    left -= k
                t = np.concatenate(parts).reshape(list(reversed(ne)))
            w.write_tensor_data(t)
        w.close()
        print(f"wrote {n_params / 1e9:.2f} B parameters as F16 ({os.path.getsize(f16) >> 20} MiB); "
              "quantizing to Q4_K_M with llama.cpp", flush=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
        params.nthread = os.cpu_count() or 1
        t0 = time.perf_counter()
        if llama_cpp.llama_model_quantize(f16.encode(), str(out).encode(), params) != 0:
            sys.exit("llama_model_quantize failed")
    r = gguf.GGUFReader(out)
    types = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print(f"wrote {out}: {os.path.getsize(out) >> 20} MiB in {time.perf_counter() - t0:.0f} s of "
          f"quantizing; tensor types {types}")


def step_bytes(path):
    """Weight bytes a decode step reads, and the file's tensor types."""
    import gguf
    r = gguf.GGUFReader(path)
    used = int(r.fields["deepseek2.expert_used_count"].parts[-1][0])
    n_exp = int(r.fields["deepseek2.expert_count"].parts[-1][0])
    total, by_type = 0.0, {}
    for t in r.tensors:
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + 1
        if t.name == "token_embd.weight":
            continue
        total += int(t.n_bytes) * (used / n_exp if "_exps." in t.name else 1.0)
    return total, by_type, r


class LlamaBatch:
    """K sequences decoded together by llama.cpp: one llama_batch per step (the
    prompts in one batch, then one token of each sequence per step)."""

    def __init__(self, llm, k, n_per_seq, threads):
        import llama_cpp
        self.L = llama_cpp
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = k * n_per_seq
        p.n_batch = p.n_ubatch = max(512, k)
        p.n_seq_max = k
        p.n_threads = p.n_threads_batch = threads
        p.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(llm.model, p)
        if not self.ctx:
            raise SystemExit("llama.cpp: cannot create the batched context")
        self.k, self.n_vocab = k, llm.n_vocab()
        self.batch = llama_cpp.llama_batch_init(p.n_batch, 0, k)

    def _decode(self, items):
        """items: (token, pos, seq, want_logits); decoded in n_batch slices."""
        b, out = self.batch, []
        for s in range(0, len(items), self.batch_cap()):
            part = items[s:s + self.batch_cap()]
            b.n_tokens = len(part)
            for i, (tok, pos, seq, want) in enumerate(part):
                b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
                b.seq_id[i][0] = seq
                b.logits[i] = want
            if self.L.llama_decode(self.ctx, b) != 0:
                raise SystemExit("llama_decode failed")
            for i, (_, _, seq, want) in enumerate(part):
                if want:
                    row = self.L.llama_get_logits_ith(self.ctx, i)
                    out.append(int(np.argmax(np.ctypeslib.as_array(row, shape=(self.n_vocab,)))))
        return out

    def batch_cap(self):
        return 512

    def run(self, prompt, gen):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        n = len(prompt)
        t0 = time.perf_counter()
        items = []
        for s in range(self.k):
            p = [prompt[(i + s) % n] for i in range(n)]
            items += [(tok, i, s, i == n - 1) for i, tok in enumerate(p)]
        last = self._decode(items)
        all_first = time.perf_counter() - t0
        toks = [[t] for t in last]
        for step in range(1, gen):
            last = self._decode([(last[s], n + step - 1, s, True) for s in range(self.k)])
            for s in range(self.k):
                toks[s].append(last[s])
        end = time.perf_counter() - t0
        return {"all_first": all_first, "end": end, "after": self.k * (gen - 1), "tokens": toks}

    def close(self):
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)


def di_batch(drv, k, prompt, gen):
    drv.p.stdin.write(f"batch {k} {gen} {len(prompt)} {' '.join(map(str, prompt))}\n")
    drv.p.stdin.flush()
    r = json.loads(drv.p.stdout.readline() or "null") or sys.exit("ttft_bench batch failed")
    return {"all_first": r["all_first_s"], "end": r["end_s"],
            "after": r["n_out_after_all_first"], "tokens": r["tokens"]}


def parity(lib_path, model, llm, prompt):
    """Logits after `prompt` (one batch): deepinfer (di_model_eval) vs llama.cpp
    (Llama.eval) on the same file: max |diff| / llama.cpp's range, the argmax,
    and how many of llama.cpp's top 10 are deepinfer's top 10."""
    import llama_cpp
    lib, h = load_deepinfer(lib_path, model, 2, len(prompt) + 8)
    vocab = lib.di_model_vocab_size(h)
    buf = (ctypes.c_float * vocab)()
    ids = (ctypes.c_int32 * len(prompt))(*prompt)
    if lib.di_model_eval(h, ids, len(prompt), buf, 0, None) != 0:
        sys.exit("di_model_eval failed")
    di = np.frombuffer(buf, dtype=np.float32).copy()
    lib.di_model_free(h)
    llm.reset()
    llm.eval(prompt)
    ll = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,)).copy()
    top_di, top_ll = set(np.argsort(-di)[:10]), set(np.argsort(-ll)[:10])
    return (float(np.abs(di - ll).max() / (ll.max() - ll.min())), int(di.argmax()) == int(ll.argmax()),
            len(top_di & top_ll))


def agree(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make", metavar="OUT.gguf")
    ap.add_argument("--layers", type=int, default=V2_LITE["layers"])
    ap.add_argument("--model")
    ap.add_argument("--exe", default="build/bench/ttft_bench")
    ap.add_argument("--lib", help="libdeepinfer.so for the logits check (default: beside --exe)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    if a.make:
        # llama.cpp reads a deepseek2 file without q LoRA only as a "lite" model,
        # which it recognises by 26 or 27 layers (src/models/deepseek2.cpp):
        # other counts fail in its quantizer with "key not found ... q_lora_rank"
        if a.layers not in (26, 27):
            ap.error(f"--layers {a.layers}: llama.cpp runs a deepseek2 file without q LoRA "
                     "only at 26 or 27 layers (its rule for DeepSeek-V2-Lite)")
        make(a.make, a.layers)
        return
    if not a.model:
        ap.error("--model or --make")
    import llama_cpp
    step, types, _ = step_bytes(a.model)
    bw = bandwidth()
    print(f"{a.model}: {types}; a decode step reads {step / 1e9:.3f} GB of weights; copy "
          f"bandwidth {bw / 1e9:.1f} GB/s; llama-cpp-python {llama_cpp.__version__} "
          f"({llama_cpp.llama_print_system_info().decode().strip()})", flush=True)
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(2, 100000, a.prompt)]
    k, n_per = a.concurrent, a.prompt + a.gen + 8
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        t0 = time.perf_counter()
        drv = Driver(a.exe, a.model, threads, k * n_per, 0)
        t_di = time.perf_counter() - t0
        t0 = time.perf_counter()
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=n_per, n_batch=512, n_ubatch=512,
                              n_threads=threads, n_threads_batch=threads, logits_all=False,
                              flash_attn=False, n_gpu_layers=0, verbose=False)
        lb = LlamaBatch(llm, k, n_per, threads)
        t_ll = time.perf_counter() - t0
        print(f"threads {threads}: loaded deepinfer in {t_di:.1f} s, llama.cpp in {t_ll:.1f} s; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        # warm-up, untimed: the first run of each pages the weights in
        drv.run("engine", prompt, 2)
        llama_eval_run(llm, prompt, 2)
        di_batch(drv, k, prompt, 2)
        lb.run(prompt, 2)
        best = {}
        tokens = {}

        def keep(key, pp, tg):
            b = best.setdefault(key, [0.0, 0.0])
            b[0], b[1] = max(b[0], pp), max(b[1], tg)

        for rep in range(a.reps):
            runs = [("di", 1), ("llama", 1), ("di", k), ("llama", k)]
            for impl, n in runs[rep % 2:] + runs[:rep % 2]:
                if n == 1:
                    r = (drv.run("engine", prompt, a.gen) if impl == "di"
                         else llama_eval_run(llm, prompt, a.gen))
                    keep((impl, 1), a.prompt / r["ttft"], (a.gen - 1) / r["decode"])
                    tokens[impl] = r["tokens"]
                else:
                    r = di_batch(drv, k, prompt, a.gen) if impl == "di" else lb.run(prompt, a.gen)
                    keep((impl, k), k * a.prompt / r["all_first"],
                         r["after"] / (r["end"] - r["all_first"]))
                    tokens[(impl, k)] = r["tokens"]
                time.sleep(0.2)
        same = agree(tokens["di"], tokens["llama"])
        same_k = [agree(x, y) for x, y in zip(tokens[("di", k)], tokens[("llama", k)])]
        print(f"threads {threads}: greedy tokens deepinfer = llama.cpp for {same}/{a.gen} "
              f"(one request), {same_k} (the {k}); load average {os.getloadavg()[0]:.1f}",
              flush=True)
        for n in (1, k):
            di, ll = best[("di", n)], best[("llama", n)]
            rows.append((threads, n, di, ll))
        drv.close()
        lb.close()
        if threads == int(a.threads.split(",")[-1]):
            lib = a.lib or str(pathlib.Path(a.exe).resolve().parent.parent / "lib" / "libdeepinfer.so")
            diff, same_top, top10 = parity(lib, a.model, llm, prompt[:16])
            print(f"logits after a 16-token prompt, deepinfer vs llama.cpp: max |diff| = "
                  f"{diff:.2e} of llama.cpp's range, argmax {'equal' if same_top else 'differs'}, "
                  f"{top10}/10 of the top 10 shared", flush=True)
        del llm
    print("\n| threads | requests | prefill deepinfer / llama.cpp (tok/s) | decode deepinfer / "
          "llama.cpp (tok/s) | decode roofline fraction |")
    print("|---|---|---|---|---|")
    for threads, n, di, ll in rows:
        roof = (f"{di[1] * step / bw:.2f} vs {ll[1] * step / bw:.2f}" if n == 1 else
                "(batched)")
        print(f"| {threads} | {n} | {di[0]:.1f} / {ll[0]:.1f} = {di[0] / ll[0]:.2f}x | "
              f"{di[1]:.2f} / {ll[1]:.2f} = {di[1] / ll[1]:.2f}x | {roof} |")
    print("ratios (deepinfer / llama.cpp; prefill, decode): " + ", ".join(
        f"{t}T x{n}: {di[0] / ll[0]:.2f}, {di[1] / ll[1]:.2f}" for t, n, di, ll in rows))


if __name__ == "__main__":
    main()
