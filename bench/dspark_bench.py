#!/usr/bin/env python3
"""DeepSeek-V4's DSpark draft head: deepinfer vs llama.cpp (dflash) on the same GGUF pair.

--make-dspark DIR writes dsv4_bench.py's V4-Flash-shaped model (CONFIG there: hidden
1024, 6 layers of HCA/CSA, 16 heads of 128, sliding window 128, 32 experts top-4 + 1
shared, vocab 4096) with a DSpark head, random weights (a fixed seed), in DeepSeek's
release layout as tests/oracle/make_dspark_fixtures.py writes its tiny fixture:
3 stages mtp.0..2 (sliding-window V4 layers with scored MoE, as the main layers'),
mtp.0.main_proj / main_norm, the last stage's norm, hc_head_*, markov_head.markov_w1/w2
(rank 64) and confidence_head.proj; config keys dspark_block_size 16,
dspark_target_layer_ids [1, 3, 5], dspark_noise_token_id 3; routed experts MXFP4,
everything else bf16. Then llama.cpp's converter (the pinned llama-cpp-python sdist's)
writes DIR/dspark-bench-target.gguf (bf16) and DIR/dspark-bench-draft.gguf (--dspark
--target-model-dir). DIR/release/ keeps the checkpoint (deepinfer loads it too).

The benchmark (--dir DIR): per prompt length P, interleaved (deepinfer, then llama.cpp,
--rounds times; the best of each op over every round):

  deepinfer   build/.../bench/dspark_bench (bench/dspark_bench.c, the internal API) on
              the target GGUF with the DSpark GGUF attached (model_attach_dspark);
  llama.cpp   llama-cpp-python's low-level API on the same two files, as
              common/speculative.cpp's draft-dspark drives them: a target context
              extracting its layer inputs j + 1, a draft context (ctx_other the
              target's, non-causal, its nextn output on), both with flash attention
              and f16 caches, n_batch = n_ubatch = 512.

Both prefill P random tokens and inject every position's target features into the
draft (untimed), then time (best of --reps, each op undone before the next: the
memory's cells past P removed / the sequences truncated):

  decode   the target's step of 1 token at P (llama.cpp: also its plain decode, a
           context without n_rs_seq, whose steps cannot be undone: P, P + 1, ...)
  verify   the target's step of 1 + block tokens, every row's logits (verifying a block)
  inject   the draft's injection of 1 + block feature rows (the verify step's)
  draft1   the draft's block (anchor + block - 1 noise tokens) of one sequence
  draftN   deepinfer only: --seqs (8) sequences' blocks in one call

and print ms per op, the ratios llama.cpp / deepinfer (> 1: deepinfer faster), and
the draft's cost per block (inject + draft1) as a fraction of a target decode step.

Usage (the model venv, which has torch, transformers and llama-cpp-python):
  python bench/dspark_bench.py --make-dspark /tmp/dspark-bench
  python bench/dspark_bench.py --dir /tmp/dspark-bench --exe build/release/bench/dspark_bench \\
      [--threads 2] [--prompts 512,4096] [--reps 10] [--rounds 2]
"""
import argparse
import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dsv4_bench import CONFIG, SW  # noqa: E402

STAGES = 3
BLOCK = 16
TARGET_LAYERS = [1, 3, 5]
RANK = 64
NOISE = 3
SEED = 1234
TARGET_GGUF = "dspark-bench-target.gguf"
DRAFT_GGUF = "dspark-bench-draft.gguf"
OPS = ["decode_plain", "decode", "verify", "inject", "draft1", "draftN"]


def make_dspark(out):
    """The release checkpoint with its DSpark head, then both GGUFs."""
    import tempfile

    import safetensors.torch
    import torch
    from torch import nn
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import (DeepseekV4HyperHead,
                                                                      DeepseekV4RMSNorm)
    oracle = HERE.parent / "tests" / "oracle"
    sys.path.insert(0, str(oracle))
    import make_dsv4_fixtures as m4
    import make_dspark_fixtures as mdf
    import make_model_fixtures as mmf
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    L = CONFIG["num_hidden_layers"]
    main_cfg = DeepseekV4Config(**dict(CONFIG, num_nextn_predict_layers=STAGES))
    # the stages: layers L .. L + S - 1 of a model S layers longer (sliding, scored MoE)
    ext = dict(CONFIG, layer_types=CONFIG["layer_types"] + [SW] * STAGES,
               mlp_layer_types=CONFIG["mlp_layer_types"] + ["moe"] * STAGES,
               num_hidden_layers=L + STAGES)
    torch.manual_seed(SEED)
    big = DeepseekV4ForCausalLM(DeepseekV4Config(**ext)).to(torch.bfloat16)
    E, V = CONFIG["hidden_size"], CONFIG["vocab_size"]
    glue = nn.ModuleDict({
        "main_proj": nn.Linear(len(TARGET_LAYERS) * E, E, bias=False),
        "main_norm": DeepseekV4RMSNorm(E, eps=main_cfg.rms_norm_eps),
        "norm": DeepseekV4RMSNorm(E, eps=main_cfg.rms_norm_eps),
        "hc_head": DeepseekV4HyperHead(main_cfg),
        "markov_w1": nn.Embedding(V, RANK),
        "markov_w2": nn.Linear(RANK, V, bias=False),
        "conf": nn.Linear(E + RANK, 1, bias=False)}).to(torch.float32)
    with torch.no_grad():
        for name, b in big.named_buffers():
            if name.endswith("tid2eid"):
                e, k = CONFIG["n_routed_experts"], CONFIG["num_experts_per_tok"]
                b.copy_(torch.stack([torch.randperm(e)[:k] for _ in range(V)]))
        for pname, p in glue.named_parameters():  # (as make_dspark_fixtures.build)
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("hc_base"):
                p.copy_(0.5 * torch.randn_like(p))
            elif pname.endswith("hc_scale"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.startswith("markov"):
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(main_cfg.initializer_range * torch.randn_like(p))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        big.save_pretrained(tmp / "big", safe_serialization=True)
        main_cfg.save_pretrained(tmp / "main")
        saved = safetensors.torch.load_file(tmp / "big" / "model.safetensors")
        del big
        # the glue in the release names (mdf.glue_tensors's, at this stage count)
        last = f"mtp.{STAGES - 1}."
        saved.update({k: v.detach().clone().contiguous() for k, v in {
            "mtp.0.main_proj.weight": glue["main_proj"].weight,
            "mtp.0.main_norm.weight": glue["main_norm"].weight,
            last + "norm.weight": glue["norm"].weight,
            last + "hc_head_fn": glue["hc_head"].hc_fn,
            last + "hc_head_base": glue["hc_head"].hc_base,
            last + "hc_head_scale": glue["hc_head"].hc_scale,
            last + "markov_head.markov_w1.weight": glue["markov_w1"].weight,
            last + "markov_head.markov_w2.weight": glue["markov_w2"].weight,
            last + "confidence_head.proj.weight": glue["conf"].weight}.items()})
        state = {}
        for k, v in sorted(saved.items()):
            release = m4.release_name(k)
            for s in range(STAGES):
                if release.startswith(f"layers.{L + s}."):
                    release = f"mtp.{s}." + release[len(f"layers.{L + s}."):]
            if ".ffn.experts." in k and k.endswith(".weight") and v.dim() == 2:
                codes, e8, _ = m4.mxfp4_quantize(v.to(torch.float32))
                state[release], state[release[:-len("weight")] + "scale"] = codes, e8
            elif v.is_floating_point():
                state[release] = v.to(torch.bfloat16).contiguous()
            else:
                state[release] = v.contiguous()
        rel = out / "release"
        rel.mkdir(exist_ok=True)
        safetensors.torch.save_file(state, rel / "model.safetensors", metadata={"format": "pt"})
        cfg = mdf.release_config(tmp, STAGES, BLOCK, TARGET_LAYERS, NOISE)
        cfg["architectures"] = ["DeepseekV4ForCausalLM"]  # (a config saved alone has none)
        (rel / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        n_params = sum(v.numel() for v in state.values())
        print(f"wrote {rel}: {len(state)} tensors, {n_params / 1e6:.0f} M stored elements")
        tok = tmp / "target-tokenizer"
        mmf.stand_in_tokenizer(tok, V)
        (tok / "config.json").write_text(json.dumps(cfg))
        mmf.convert_checkpoint(rel, out / TARGET_GGUF, "bf16")
        mmf.convert_checkpoint(rel, out / DRAFT_GGUF, "bf16",
                               extra_args=["--dspark", "--target-model-dir", str(tok)])
    for f in (TARGET_GGUF, DRAFT_GGUF):
        print(f"wrote {out / f}: {(out / f).stat().st_size / 1e6:.1f} MB")


# --- deepinfer: bench/dspark_bench.c as a subprocess ---

def bench_deepinfer(a, P):
    d = pathlib.Path(a.dir)
    cmd = [a.exe, str(d / TARGET_GGUF), "--dspark", str(d / DRAFT_GGUF), "--threads",
           str(a.threads), "--prompt", str(P), "--reps", str(a.reps), "--seqs", str(a.seqs),
           "--n-batch", "512"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"RESULT (\S+) (\S+) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    out["decode_plain"] = out["decode"]  # (deepinfer's decode step is the same either way)
    return out


# --- llama.cpp: the dflash draft through llama-cpp-python's low-level API ---

class Llama:
    """The target and draft contexts (make_dspark_fixtures.llama_cpp_dspark's
    calls, as common/speculative.cpp's draft-dspark makes them)."""

    def __init__(self, d, threads, n_ctx, n_rs_seq, draft=True):
        import llama_cpp as lc
        self.lc = lc
        lib = lc.llama_cpp._lib
        self.set_nextn = getattr(lib, "_Z26llama_set_embeddings_nextnP13llama_contextbb")
        self.set_nextn.argtypes = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool]
        self.set_nextn.restype = None
        self.set_inp = getattr(lib, "_Z30llama_set_embeddings_layer_inpP13llama_contextjb")
        self.set_inp.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
        self.set_inp.restype = None
        self.get_inp = getattr(lib, "_Z30llama_get_embeddings_layer_inpP13llama_contextj")
        self.get_inp.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self.get_inp.restype = ctypes.POINTER(ctypes.c_float)
        self.quiet = lc.llama_log_callback(lambda level, text, user: None)
        lc.llama_log_set(self.quiet, None)
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.tm = lc.llama_model_load_from_file(str(d / TARGET_GGUF).encode(), mp)
        self.dm = lc.llama_model_load_from_file(str(d / DRAFT_GGUF).encode(), mp) if draft else None
        assert self.tm and (self.dm or not draft), "llama.cpp did not load the GGUFs"

        def params():
            p = lc.llama_context_default_params()
            p.n_ctx = n_ctx
            p.n_batch = p.n_ubatch = 512
            p.n_threads = p.n_threads_batch = threads
            p.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
            return p

        tp = params()
        tp.n_rs_seq = n_rs_seq
        self.tctx = lc.llama_init_from_model(self.tm, tp)
        assert self.tctx
        self.tmem = lc.llama_get_memory(self.tctx)
        self.E = lc.llama_model_n_embd(self.tm)
        self.keep = []
        self.dctx = None
        if not draft:
            return
        for j in TARGET_LAYERS:  # (the draft reads layer inputs j + 1)
            self.set_inp(self.tctx, j + 1, True)
        dp = params()
        dp.ctx_other = self.tctx
        self.dctx = lc.llama_init_from_model(self.dm, dp)
        assert self.dctx, "llama.cpp did not make the draft context"
        lc.llama_set_causal_attn(self.dctx, False)
        self.set_nextn(self.dctx, True, True)
        self.dmem = lc.llama_get_memory(self.dctx)

    def token_batch(self, ctx, tokens, p0, logits):
        lc = self.lc
        b = lc.llama_batch_ext_init(ctx)
        for i, t in enumerate(tokens):
            idx = lc.llama_batch_ext_add_token(b, 0, int(t))
            pos = lc.llama_pos(p0 + i)
            assert idx == i and lc.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos))
            if logits == "all" or (logits == "last" and i == len(tokens) - 1):
                assert lc.llama_batch_ext_set_output_logits(b, idx, True)
        return b

    def embd_batch(self, feats, p0):
        lc = self.lc
        f = np.ascontiguousarray(feats, dtype=np.float32)
        self.keep.append(f)
        b = lc.llama_batch_ext_init(self.dctx)
        for i in range(f.shape[0]):
            e = lc.llama_embd(f[i:].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, f.shape[1])
            idx = lc.llama_batch_ext_add_embd(b, 0, e)
            pos = lc.llama_pos(p0 + i)
            assert idx == i and lc.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos))
        return b

    def process(self, ctx, b):
        assert self.lc.llama_process(ctx, self.lc.LLAMA_PROCESS_TYPE_DECODE, b) == 0

    def features(self, n):
        return np.concatenate([np.ctypeslib.as_array(self.get_inp(self.tctx, j + 1),
                                                     shape=(n, self.E)).copy()
                               for j in TARGET_LAYERS], axis=1)

    def rm(self, mem, p0):
        assert self.lc.llama_memory_seq_rm(mem, 0, p0, -1), "llama_memory_seq_rm refused"

    def free(self):
        lc = self.lc
        if self.dctx:
            lc.llama_free(self.dctx)
            lc.llama_model_free(self.dm)
        lc.llama_free(self.tctx)
        lc.llama_model_free(self.tm)


def bench_llama(a, P, prompt, extra):
    """{op: best ms} for llama.cpp at prompt length P."""
    # the target's recurrent-state snapshots for rolling back rejected drafts
    # (llama.cpp's deepseek4 cache refuses a partial seq_rm without them;
    # common.cpp gives the target n_rs_seq = the draft's n_max, the block for
    # DSpark): 1 + block here, so that all of a verify step's rows can be removed
    lc_ = Llama(pathlib.Path(a.dir), a.threads, P + 256, 1 + BLOCK)
    lc = lc_.lc
    for c0 in range(0, P, 512):  # the prefill, each chunk's features into the draft
        chunk = prompt[c0:c0 + 512]
        b = lc_.token_batch(lc_.tctx, chunk, c0, "last")
        lc_.process(lc_.tctx, b)
        lc.llama_batch_ext_free(b)
        f = lc_.features(len(chunk))
        b = lc_.embd_batch(f, c0)
        lc_.process(lc_.dctx, b)
        lc.llama_batch_ext_free(b)
        lc_.keep.clear()
    # the verify step's features: the rows inject is timed on
    b = lc_.token_batch(lc_.tctx, extra, P, "all")
    lc_.process(lc_.tctx, b)
    lc.llama_batch_ext_free(b)
    vfeat = lc_.features(len(extra))
    lc_.rm(lc_.tmem, P)
    batches = {
        "decode": (lc_.tctx, lc_.tmem, lc_.token_batch(lc_.tctx, extra[:1], P, "all")),
        "verify": (lc_.tctx, lc_.tmem, lc_.token_batch(lc_.tctx, extra, P, "all")),
        "inject": (lc_.dctx, lc_.dmem, lc_.embd_batch(vfeat, P)),
        "draft1": (lc_.dctx, lc_.dmem,
                   lc_.token_batch(lc_.dctx, [extra[0]] + [NOISE] * (BLOCK - 1), P, "all")),
    }
    out = {}
    for op, (ctx, mem, b) in batches.items():
        times = []
        for r in range(a.reps + 1):  # (the first run untimed)
            t0 = time.perf_counter()
            lc_.process(ctx, b)
            t = time.perf_counter() - t0
            lc_.rm(mem, P)
            if r:
                times.append(t)
        out[op] = min(times) * 1e3
        lc.llama_batch_ext_free(b)
    lc_.free()
    # the target's plain decode (n_rs_seq 0, no speculation): steps at P, P + 1, ...
    lc_ = Llama(pathlib.Path(a.dir), a.threads, P + 256, 0, draft=False)
    for c0 in range(0, P, 512):
        b = lc_.token_batch(lc_.tctx, prompt[c0:c0 + 512], c0, "last")
        lc_.process(lc_.tctx, b)
        lc.llama_batch_ext_free(b)
    times = []
    for r in range(a.reps + 1):
        b = lc_.token_batch(lc_.tctx, extra[:1], P + r, "all")
        t0 = time.perf_counter()
        lc_.process(lc_.tctx, b)
        t = time.perf_counter() - t0
        lc.llama_batch_ext_free(b)
        if r:
            times.append(t)
    out["decode_plain"] = min(times) * 1e3
    lc_.free()
    return out


def loadavg():
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run(a):
    import llama_cpp
    V = CONFIG["vocab_size"]
    rng = np.random.default_rng(0)
    results = {}
    load = [loadavg()]
    for P in a.prompts:
        prompt = [int(x) for x in rng.integers(2, V, P)]
        extra = [int(x) for x in rng.integers(2, V, 1 + BLOCK)]
        best_di, best_ll = {}, {}
        for _ in range(a.rounds):
            for k, v in bench_deepinfer(a, P).items():
                best_di[k] = min(v, best_di.get(k, v))
            for k, v in bench_llama(a, P, prompt, extra).items():
                best_ll[k] = min(v, best_ll.get(k, v))
        results[P] = (best_di, best_ll)
        load.append(loadavg())
    print(f"DSpark draft head, {a.threads} threads, block {BLOCK}, best of {a.reps} x {a.rounds} "
          f"rounds (engines alternated per prompt length); llama.cpp = llama-cpp-python "
          f"{llama_cpp.__version__} ({llama_cpp.llama_print_system_info().decode().strip()}), "
          f"flash attention, f16 caches; load average {' -> '.join(load)}")
    names = {"decode_plain": "target decode, 1 token (llama.cpp: n_rs_seq 0)",
             "decode": f"target decode, 1 token (llama.cpp: n_rs_seq {1 + BLOCK})",
             "verify": f"target verify, 1 + {BLOCK} tokens",
             "inject": f"draft inject, 1 + {BLOCK} rows", "draft1": "draft block, 1 sequence",
             "draftN": f"draft block, {a.seqs} sequences"}
    print("| P | operation | deepinfer ms | llama.cpp ms | llama.cpp / deepinfer |")
    print("|---|---|---|---|---|")
    for P, (di, ll) in results.items():
        for op in OPS:
            l_ = f"{ll[op]:.3f}" if op in ll else "—"
            r_ = f"{ll[op] / di[op]:.2f}" if op in ll else "—"
            print(f"| {P} | {names[op]} | {di[op]:.3f} | {l_} | {r_} |")
        for eng, d in (("deepinfer", di), ("llama.cpp", ll)):
            print(f"| {P} | {eng}: a block's draft (inject + draft1) / a plain decode step | "
                  f"{(d['inject'] + d['draft1']) / d['decode_plain']:.2f} | draft1 alone "
                  f"{d['draft1'] / d['decode_plain']:.2f} | |")
    for P, (di, ll) in results.items():
        for op in OPS:
            if op in ll:
                print(f"RATIO P={P} {op} llama.cpp/deepinfer = {ll[op] / di[op]:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-dspark", metavar="DIR")
    ap.add_argument("--dir", help="the folder --make-dspark wrote")
    ap.add_argument("--exe", default="build/release/bench/dspark_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="512,4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8)
    a = ap.parse_args()
    if a.make_dspark:
        make_dspark(a.make_dspark)
        return
    if not a.dir:
        ap.error("--dir or --make-dspark is required")
    a.prompts = [int(x) for x in a.prompts.split(",")]
    run(a)


if __name__ == "__main__":
    main()
