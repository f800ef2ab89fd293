#!/usr/bin/env python3
"""Time to first token and decode speed of deepinfer's engine vs llama.cpp.

One run, one GGUF, the same prompt token IDs and thread count for everyone:

  engine     deepinfer's engine, as a host uses it: di_submit, then di_poll(-1)
             until the callback gets DI_EVENT_TOKENS (bench/ttft_bench.c, a C
             program, so no Python sits between the engine and the clock)
  model      deepinfer's di_model_eval: the prompt in one call, then one call
             per token, argmax in C (the path bench/model_bench.py measures)
  llama      llama.cpp through llama-cpp-python's Llama.eval (llama_decode in
             n_batch chunks) and a numpy argmax of the last logits row
  llama-gen  llama.cpp through Llama.generate (its greedy llama_sampler, one
             Python generator step per token) — the host-level API

Prompts are chat conversations rendered with the model's own chat template
(the GGUF's tokenizer.chat_template, through jinja2 as transformers renders
it) and trimmed to about --lengths tokens; they are tokenized by deepinfer's
tokenizer and the run stops unless llama.cpp's tokenizer gives the same IDs.
Every implementation generates --gen tokens greedily with end of sequence
ignored. TTFT is the wall time from the call (di_submit / the first eval) to the
first output token being in the host's hands; decode tok/s is
(gen - 1) / (time from the first to the last token).

The runs are interleaved (every repetition runs every prompt length through
every implementation, the order rotating), each implementation warmed up
first, and both the best and the median of --reps are reported, with the
median of the per-repetition ratios (adjacent runs, so a load spike hits both
sides). Ratios are printed last, > 1 meaning deepinfer is faster: TTFT as
llama.cpp time / deepinfer time, decode as deepinfer tok/s / llama.cpp tok/s.
The load average is printed before and after: compare ratios from a quiet run.

Usage (with the model oracle venv, which has llama-cpp-python and jinja2):
  python bench/ttft_bench.py --model M.gguf [--driver build/bench/ttft_bench]
      [--lib build/lib/libdeepinfer.so] [--threads 1,2] [--lengths 64,256,1024]
      [--gen 128] [--reps 5] [--n-batch 0] [--json out.json]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import time

import numpy as np

# A conversation to cut prompts from: a system prompt, then user / assistant
# turns (written for this benchmark), cycled as often as a length needs.
SYSTEM = ("You are a patient assistant who helps people plan projects at home. Answer "
          "in plain language, give concrete numbers when you can, and say when a "
          "question needs a professional.")
TURNS = [
    ("I have a sunny strip of garden about four metres long and one metre wide. "
     "What could I grow there this summer if I have never grown vegetables before?",
     "A strip that size is a good start. Four square metres in full sun can hold two "
     "tomato plants at one end, a row of bush beans in the middle and lettuce or "
     "radishes at the other end, where the tomatoes will shade them a little in the "
     "afternoon. Beans and radishes are forgiving: sow them straight into the soil once "
     "the nights stay above ten degrees. Buy the tomatoes as young plants rather than "
     "seeds, push a stake in beside each one when you plant it, and water at the base "
     "in the morning rather than over the leaves in the evening."),
    ("How much water will that need, roughly? I travel for work a couple of days a week.",
     "In warm weather, plan on about twenty to twenty-five litres per square metre per "
     "week, more for the tomatoes once they carry fruit. Two deep waterings a week are "
     "better than a little every day, because the roots follow the water down. If you "
     "are away, a layer of straw or shredded leaves five centimetres thick keeps the "
     "soil moist for much longer, and a cheap drip hose on a battery timer will cover "
     "a long weekend. Check the soil with a finger: if it is dry two knuckles deep, "
     "it is time to water."),
    ("The soil is heavy clay and cracks when it dries. Do I need to replace it?",
     "No, clay holds nutrients well; it only needs more air and organic matter. Spread "
     "five to eight centimetres of compost over the bed and fork it into the top layer "
     "without turning the soil over completely. Do this when the clay is moist but not "
     "sticky: if a handful smears like putty, wait a few days. Never walk on the bed "
     "itself, since your weight squeezes the air back out, so lay a plank or a few "
     "stepping stones along it. After two or three seasons of compost and mulch the "
     "clay will be darker, crumblier and much easier to work."),
    ("Something is eating holes in the lettuce leaves overnight. What is it likely to be?",
     "Irregular holes that appear overnight, often with silvery trails nearby, point to "
     "slugs or snails. Go out with a torch an hour after dark and you will probably see "
     "them. Hand picking for a few evenings makes a real difference. Beer traps sunk to "
     "the rim in the soil work, as do copper tape around a raised edge and a ring of "
     "grit, though none of them is perfect. Avoid slug pellets with metaldehyde, which "
     "harm birds and pets. Watering in the morning instead of the evening also helps, "
     "because the surface is dry by the time they come out."),
    ("When will the tomatoes be ready, and how do I know when to pick them?",
     "Most varieties start to ripen seventy to eighty days after you plant them out, so "
     "young plants set out in late spring give fruit from midsummer. Pick when the fruit "
     "has its full colour and gives slightly when you press it gently; it should come "
     "away with a light twist. Tomatoes picked when just turning colour will finish "
     "ripening indoors on a windowsill, which is useful when rain threatens to split "
     "them. Pinch out the side shoots that grow between the main stem and the leaves "
     "once a week, so the plant spends its energy on fruit instead of leaves."),
    ("Is it worth keeping a notebook of what I did, or is that overkill for a small bed?",
     "It is worth it, and it does not need to be elaborate. Write down what you sowed "
     "or planted and the date, the variety, when it first flowered and fruited, and "
     "anything that went wrong. Next year that page tells you which varieties suited "
     "your spot and when the slugs arrived. Rotating crops matters even in a small bed: "
     "grow the tomatoes at the other end next year, because the diseases that affect "
     "them build up in the soil, and a notebook is the easiest way to remember where "
     "everything was."),
]
QUESTION = ("Thanks. Could you now put all of that together into a short week by week "
            "plan for my first season, starting in mid April?")


class DeepinferTokenizer:
    """deepinfer's tokenizer through its C API (ctypes; tokenizing is not timed)."""

    def __init__(self, lib_path, model):
        lib = ctypes.CDLL(lib_path)
        lib.di_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.c_void_p]
        lib.di_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.c_uint,
                                            ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
        lib.di_tokens_free.argtypes = [ctypes.POINTER(ctypes.c_int32)]
        self.lib = lib
        self.tok = ctypes.c_void_p()
        if lib.di_tokenizer_load(model.encode(), ctypes.byref(self.tok), None) != 0:
            raise SystemExit(f"di_tokenizer_load failed on {model}")

    def encode(self, text):
        # DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED | DI_TOKENIZE_ADD_SPECIAL_TOKENS:
        # the chat template's special tokens are parsed, BOS follows the GGUF
        data = text.encode()
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        if self.lib.di_tokenizer_encode(self.tok, data, len(data), 7, ctypes.byref(ids),
                                        ctypes.byref(n), None) != 0:
            raise SystemExit("di_tokenizer_encode failed")
        out = [ids[i] for i in range(n.value)]
        self.lib.di_tokens_free(ids)
        return out


def render(template, messages, bos, eos):
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token=bos, eos_token=eos)


def build_prompt(target, template, bos, eos, encode):
    """A conversation rendered to at most `target` tokens, as close as whole words
    allow: the system prompt, as many whole user / assistant turns as fit (cycled),
    then a last user message: the closing question followed by notes (the text of
    the next turns), cut at a word boundary."""
    def size(msgs):
        return len(encode(render(template, msgs, bos, eos)))

    system = [{"role": "system", "content": SYSTEM}]
    history = []
    turn = 0
    while True:
        user, assistant = TURNS[turn % len(TURNS)]
        more = history + [{"role": "user", "content": user},
                          {"role": "assistant", "content": assistant}]
        if size(system + more + [{"role": "user", "content": QUESTION}]) > target:
            break
        history = more
        turn += 1
    notes = " ".join(TURNS[(turn + i) % len(TURNS)][j] for i in range(4) for j in range(2))
    words = (QUESTION + " My notes so far: " + notes).split(" ")
    lo, hi = 1, len(words)  # the most words of the last message that fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(system + history + [{"role": "user", "content": " ".join(words[:mid])}]) <= target:
            lo = mid
        else:
            hi = mid - 1
    msgs = system + history + [{"role": "user", "content": " ".join(words[:lo])}]
    return render(template, msgs, bos, eos), msgs


class Driver:
    """bench/ttft_bench.c as a coprocess: the engine and di_model stay loaded."""

    def __init__(self, exe, model, threads, n_ctx, n_batch):
        self.p = subprocess.Popen([exe, model, str(threads), str(n_ctx), str(n_batch)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.p.stdout.readline() or "{}")
        if not ready.get("ready"):
            raise SystemExit(f"{exe} did not start")

    def run(self, mode, prompt, gen):
        self.p.stdin.write(f"{mode} {gen} {len(prompt)} {' '.join(map(str, prompt))}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"ttft_bench {mode} failed")
        r = json.loads(line)
        return {"ttft": r["ttft_s"], "decode": r["decode_s"], "tokens": r["tokens"],
                "extra": {k: r[k] for k in ("submit_s", "done_s", "prefill_s", "cpu_s")
                          if k in r}}

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def llama_eval_run(llm, prompt, gen):
    import llama_cpp
    n_vocab = llm.n_vocab()
    tokens, t = [], []
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    while True:
        # logits_all=False keeps no scores: read the last logits row directly
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        tok = int(np.argmax(row))
        tokens.append(tok)
        t.append(time.perf_counter() - t0)
        if len(tokens) == gen:
            break
        llm.eval([tok])
    return {"ttft": t[0], "decode": t[-1] - t[0], "tokens": tokens, "extra": {}}


def llama_generate_run(llm, prompt, gen):
    tokens, t = [], []
    llm.reset()  # no prefix reuse from the previous run
    t0 = time.perf_counter()
    for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                            reset=True):
        tokens.append(int(tok))
        t.append(time.perf_counter() - t0)
        if len(tokens) == gen:
            break
    return {"ttft": t[0], "decode": t[-1] - t[0], "tokens": tokens, "extra": {}}


def agree(a, b):
    """(leading tokens identical, positions identical)."""
    lead = 0
    while lead < min(len(a), len(b)) and a[lead] == b[lead]:
        lead += 1
    return lead, sum(x == y for x, y in zip(a, b))


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--lib", default="build/lib/libdeepinfer.so")
    ap.add_argument("--driver", default="build/bench/ttft_bench")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--lengths", default="64,256,1024", help="prompt tokens, comma-separated")
    ap.add_argument("--gen", type=int, default=128, help="output tokens per request")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--impls", default="engine,model,llama,llama-gen")
    ap.add_argument("--n-batch", type=int, default=0,
                    help="tokens per forward step for both; 0: each one's default "
                         "(engine 256, llama.cpp 512)")
    ap.add_argument("--pause", type=float, default=0.2,
                    help="seconds of sleep between runs (idle thread pools settle)")
    ap.add_argument("--json", help="write every run's timings and tokens here")
    a = ap.parse_args()
    threads = [int(x) for x in a.threads.split(",")]
    lengths = [int(x) for x in a.lengths.split(",")]
    impls = a.impls.split(",")
    import llama_cpp

    load_before = loadavg()
    t_start = time.time()
    dtok = DeepinferTokenizer(a.lib, a.model)
    probe = llama_cpp.Llama(model_path=a.model, n_ctx=64, n_gpu_layers=0, verbose=False,
                            vocab_only=True)
    template = probe.metadata["tokenizer.chat_template"]
    bos = probe.detokenize([probe.token_bos()], special=True).decode()
    eos = probe.detokenize([probe.token_eos()], special=True).decode()
    prompts = {}
    for n in lengths:
        text, _ = build_prompt(n, template, bos, eos, dtok.encode)
        ids = dtok.encode(text)
        ll_ids = probe.tokenize(text.encode(), add_bos=probe.metadata.get(
            "tokenizer.ggml.add_bos_token") == "true", special=True)
        if ids != ll_ids:
            raise SystemExit(f"prompt of ~{n} tokens: deepinfer and llama.cpp tokenize it "
                             f"differently ({len(ids)} vs {len(ll_ids)} tokens)")
        prompts[n] = ids
    del probe
    n_ctx = max(len(p) for p in prompts.values()) + a.gen + 16
    ll_batch = a.n_batch or 512

    runs = {}  # (threads, length, impl) -> [run]
    for th in threads:
        drv = Driver(a.driver, a.model, th, n_ctx, a.n_batch)
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=n_ctx, n_batch=ll_batch,
                              n_ubatch=ll_batch, n_threads=th, n_threads_batch=th,
                              logits_all=False, flash_attn=False, n_gpu_layers=0, verbose=False)
        fns = {"engine": lambda p: drv.run("engine", p, a.gen),
               "model": lambda p: drv.run("model", p, a.gen),
               "llama": lambda p: llama_eval_run(llm, p, a.gen),
               "llama-gen": lambda p: llama_generate_run(llm, p, a.gen)}
        for impl in impls:  # warm-up: page in the weights, grow the buffers
            fns[impl](prompts[max(lengths)])
        for rep in range(a.reps):
            for n in lengths:
                order = impls[rep % len(impls):] + impls[:rep % len(impls)]
                for impl in order:
                    time.sleep(a.pause)
                    r = fns[impl](prompts[n])
                    r["load"] = os.getloadavg()[0]
                    runs.setdefault((th, n, impl), []).append(r)
            print(f"  threads {th}, repetition {rep + 1}/{a.reps} done, load {loadavg()}",
                  flush=True)
        drv.close()
        del llm
    load_after = loadavg()

    def tps(r):
        return (a.gen - 1) / r["decode"]

    print(f"\nmodel {os.path.basename(a.model)}; llama-cpp-python {llama_cpp.__version__}; "
          f"output {a.gen} tokens, greedy, end of sequence ignored; {a.reps} interleaved "
          f"repetitions; n_batch engine {a.n_batch or 'default (256)'}, llama.cpp {ll_batch}; "
          f"{time.time() - t_start:.0f} s")
    print(f"load average (1/5/15 min) before {load_before}, after {load_after}; "
          f"{os.cpu_count()} CPUs")
    print("prompt lengths (tokens, chat template, identical IDs in both tokenizers): " +
          ", ".join(str(len(prompts[n])) for n in lengths))
    print("\nbest / median of the repetitions; TTFT in ms, decode in tokens/s")
    hdr = f"{'thr':>3} {'prompt':>6} {'impl':>9} {'TTFT best':>10} {'TTFT med':>9} " \
          f"{'dec best':>9} {'dec med':>8}  tokens agree with llama (leading/all)"
    print(hdr)
    for th in threads:
        for n in lengths:
            ref = runs.get((th, n, "llama"), [None])[0]
            for impl in impls:
                rs = runs[(th, n, impl)]
                tt = [r["ttft"] * 1e3 for r in rs]
                dd = [tps(r) for r in rs]
                ag = ""
                if ref is not None:
                    lead, same = agree(rs[0]["tokens"], ref["tokens"])
                    ag = f"{lead}/{same} of {a.gen}"
                print(f"{th:>3} {len(prompts[n]):>6} {impl:>9} {min(tt):>10.1f} "
                      f"{statistics.median(tt):>9.1f} {max(dd):>9.1f} "
                      f"{statistics.median(dd):>8.1f}  {ag}")

    def ratio_lines(num_impl, den_impl, label):
        # TTFT: den time / num time; decode: num tok/s / den tok/s (> 1: num faster)
        out = []
        for th in threads:
            for n in lengths:
                A, B = runs.get((th, n, num_impl)), runs.get((th, n, den_impl))
                if not A or not B:
                    continue
                ttft_best = min(r["ttft"] for r in B) / min(r["ttft"] for r in A)
                ttft_pair = statistics.median(b["ttft"] / x["ttft"] for x, b in zip(A, B))
                dec_best = max(tps(r) for r in A) / max(tps(r) for r in B)
                dec_pair = statistics.median(tps(x) / tps(b) for x, b in zip(A, B))
                out.append(f"RATIO {label} threads {th} prompt {len(prompts[n])}: "
                           f"TTFT {ttft_best:.2f} (best) {ttft_pair:.2f} (median of pairs), "
                           f"decode {dec_best:.2f} (best) {dec_pair:.2f} (median of pairs)")
        return out

    if "engine" in impls and "model" in impls:
        print("\nengine overhead: di_model_eval time / engine time (TTFT) and engine tok/s / "
              "di_model_eval tok/s (decode); < 1 means the engine costs more than the model")
        eng = runs
        for th in threads:
            for n in lengths:
                E, M = eng[(th, n, "engine")], eng[(th, n, "model")]
                sub = statistics.median(r["extra"]["submit_s"] for r in E) * 1e3
                d_ttft = (statistics.median(r["ttft"] for r in E) -
                          statistics.median(r["ttft"] for r in M)) * 1e3
                d_tok = (statistics.median(r["decode"] for r in E) -
                         statistics.median(r["decode"] for r in M)) / (a.gen - 1) * 1e3
                print(f"  threads {th} prompt {len(prompts[n])}: di_submit {sub:.2f} ms; "
                      f"median TTFT engine - model {d_ttft:+.2f} ms; "
                      f"median per output token engine - model {d_tok:+.3f} ms")
        for line in ratio_lines("engine", "model", "engine/di_model_eval"):
            print(line)
    if "engine" in impls and "llama-gen" in impls:
        print("\nvs llama.cpp's host API (Llama.generate, its greedy sampler):")
        for line in ratio_lines("engine", "llama-gen", "engine/llama.cpp-generate"):
            print(line)
    if "model" in impls and "llama" in impls:
        print("\nmodels alone (di_model_eval vs llama_decode, argmax both):")
        for line in ratio_lines("model", "llama", "di_model_eval/llama.cpp-eval"):
            print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "gen": a.gen, "load_before": load_before,
                       "load_after": load_after, "prompts": {str(n): prompts[n] for n in lengths},
                       "runs": [{"threads": th, "length": n, "impl": impl, **r}
                                for (th, n, impl), rs in runs.items() for r in rs]},
                      f)
    print("\nTTFT ratio = llama.cpp time / deepinfer time; decode ratio = deepinfer tok/s / "
          "llama.cpp tok/s; > 1: deepinfer is faster")
    if "engine" in impls and "llama" in impls:
        for line in ratio_lines("engine", "llama", "engine/llama.cpp"):
            print(line)


if __name__ == "__main__":
    main()
