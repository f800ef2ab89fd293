#!/usr/bin/env python3
"""The prefix cache on a replayed multi-turn agent trace, against llama.cpp's
prompt caches, in one run (docs/prefix-cache.md).

The trace (written here, deterministic): --sessions agent sessions sharing one
system prompt with tool schemas, each --turns turns of a user request, the
assistant's tool call (Hermes <tool_call> JSON, as SmolLM2's ChatML template
writes it) and a tool result of file contents, so each session's context grows
past 3,000 tokens. The sessions are interleaved turn by turn (every session's
turn 1, then every session's turn 2, ...), the order an agent runtime serving
many users sees; each request asks for --gen tokens of the assistant's next
message, greedily, and waits for it (an agent waits for the answer). Prompts
are token IDs, tokenized once by deepinfer's tokenizer, the same for everyone.

Runs, each on a fresh engine over the same GGUF and threads:
  unlimited  deepinfer, a KV cache room for the whole trace: the hit rate an
             unlimited cache gets
  limited    deepinfer, a KV cache of --kv-fraction of what the trace needs,
             with the host tier (--host-fraction of it, zstd) and the disk tier
             (a temporary directory) under it
  off        deepinfer with the prefix cache off (every prompt prefilled whole;
             only with --with-off: slow)
  llama-ram  llama-cpp-python's Llama with LlamaRAMCache (its prompt cache of
             whole saved states; capacity --llama-ram-gb)
  llama-disk the same with LlamaDiskCache (a temporary directory)
For each: the hit rate (prompt tokens taken from the cache / prompt tokens;
deepinfer reports it per request; llama.cpp does not, so it is blank there),
the mean and p50/p90 time to first token, and the whole trace's time.

Then two micro-measurements on one --prefix-tokens prefix:
  hit vs cold   TTFT of a prompt whose first --prefix-tokens tokens another
                request computed, against the same prompt with the cache off
  disk restore  TTFT of the same prompt on a new engine that finds the prefix
                on disk (the first engine wrote it and was destroyed), against
                recomputing it

Ratios last: hit rate limited / unlimited (goal >= 0.95), TTFT hit / cold (goal
<= 0.10), disk restore / recompute, and deepinfer's trace time against
llama.cpp's (> 1: deepinfer faster).

Usage (the model oracle venv has llama-cpp-python and diskcache):
  DEEPINFER_LIBRARY=build/release/lib/libdeepinfer.so \\
  .venv-model/bin/python bench/prefix_cache_bench.py --model SmolLM2.gguf
      [--sessions 20] [--turns 12] [--threads 2] [--gen 4] [--skip-llama]
"""
import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
import deepinfer  # noqa: E402

WORDS = ("the of and to in is that for it as with was on be by this are from at or an have not "
         "which but all were when we there can more if will one about up out do so into than "
         "them only other new some could time these two may then first any like now such make "
         "over our even most after also made many before must through back years where much "
         "your way well down should because each just those people how too little state good "
         "very still own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since against go came "
         "right used take three").split()

TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository and return its text.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                    "required": ["path"]}},
    {"name": "search", "description": "Search the repository for a regular expression.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"},
                                                     "glob": {"type": "string"}},
                    "required": ["pattern"]}},
    {"name": "run_tests", "description": "Run the test suite and report the failures.",
     "parameters": {"type": "object", "properties": {"filter": {"type": "string"}}}},
]


def prose(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def code(rng, n_lines):
    lines = []
    for i in range(n_lines):
        name = rng.choice(WORDS) + "_" + rng.choice(WORDS)
        lines.append(f"    {name} = compute_{rng.choice(WORDS)}({rng.randint(0, 999)}, "
                     f"{rng.choice(WORDS)!r})  # line {i}")
    return "\n".join(lines)


def system_prompt(rng):
    tools = "\n".join(json.dumps({"type": "function", "function": t}) for t in TOOLS)
    return ("You are a coding agent working in a large repository. Read files before you "
            "change them, run the tests after every change, and explain what you did. "
            + prose(rng, 120) + "\n\n# Tools\n\nYou may call one or more functions to assist "
            "with the user query.\n\nYou are provided with function signatures within "
            "<tools></tools> XML tags:\n<tools>\n" + tools + "\n</tools>\n\nFor each function "
            "call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags.")


def trace(sessions, turns, seed=7):
    """[(session, turn, ChatML prompt text)] in the interleaved order."""
    rng = random.Random(seed)
    system = system_prompt(rng)
    histories = []
    for s in range(sessions):
        histories.append([f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
                          f"Session {s}: {prose(rng, 40)}<|im_end|>\n"])
    out = []
    for t in range(turns):
        for s in range(sessions):
            h = histories[s]
            name = TOOLS[(s + t) % len(TOOLS)]["name"]
            call = json.dumps({"name": name, "arguments": {"path": f"src/{rng.choice(WORDS)}.py"}})
            h.append(f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n"
                     f"<|im_start|>user\n<tool_response>\n{code(rng, 9)}\n"
                     f"</tool_response><|im_end|>\n")
            out.append((s, t, "".join(h) + "<|im_start|>assistant\n"))
    return out


HEADER = f"{'run':<11} {'hit rate':>9} {'TTFT mean':>10} {'p50':>8} {'p90':>8} {'trace':>8}"


def row(name, r):
    hr = f"{r['hit'] / r['prompt']:.3f}" if "hit" in r else "-"
    return (f"{name:<11} {hr:>9} {statistics.mean(r['ttft']) * 1e3:>8.1f}ms "
            f"{pct(r['ttft'], 0.5) * 1e3:>6.1f}ms {pct(r['ttft'], 0.9) * 1e3:>6.1f}ms "
            f"{r['time']:>7.1f}s")


class Results(dict):
    """The runs' results, each printed as its run ends."""

    def __setitem__(self, name, r):
        super().__setitem__(name, r)
        print(row(name, r), flush=True)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def run_deepinfer(model, prompts, args, **engine_kw):
    """TTFTs, hit tokens and prompt tokens of every request, and the total time."""
    ttft, hits, total = [], 0, 0
    with deepinfer.Engine(model, n_threads=args.threads, max_running=4, n_ctx=4096,
                          **engine_kw) as e:
        t_all = time.perf_counter()
        for ids in prompts:
            t0 = time.perf_counter()
            req = e.submit(ids, max_tokens=args.gen, temperature=0.0, ignore_eos=True)
            first = None
            for ev in req:
                if first is None and isinstance(ev, deepinfer.Tokens):
                    first = time.perf_counter()
                if isinstance(ev, deepinfer.Done):
                    assert ev.ok, ev.message
                    hits += ev.prompt_cache_hit_tokens
                    total += ev.prompt_tokens
            ttft.append(first - t0)
        t_all = time.perf_counter() - t_all
    return {"ttft": ttft, "hit": hits, "prompt": total, "time": t_all}


def run_llama(model, prompts, args, cache):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=4096, n_threads=args.threads, n_batch=256,
                verbose=False)
    llm.set_cache(cache)
    ttft = []
    t_all = time.perf_counter()
    for ids in prompts:
        t0 = time.perf_counter()
        first = None
        for _ in llm.create_completion(ids, max_tokens=args.gen, temperature=0.0, stream=True):
            if first is None:
                first = time.perf_counter()
        ttft.append(first - t0)
    return {"ttft": ttft, "time": time.perf_counter() - t_all}


def model_kv_bytes_per_token(path):
    """di_model_kv_bytes_per_token of the model (the C model API, by ctypes)."""
    import ctypes
    lib = ctypes.CDLL(os.environ.get("DEEPINFER_LIBRARY", "libdeepinfer.so"))
    lib.di_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p]
    lib.di_model_kv_bytes_per_token.argtypes = [ctypes.c_void_p]
    lib.di_model_kv_bytes_per_token.restype = ctypes.c_size_t
    lib.di_model_free.argtypes = [ctypes.c_void_p]
    m = ctypes.c_void_p()
    if lib.di_model_load(os.fsencode(path), None, ctypes.byref(m), None) != 0:
        raise RuntimeError(f"cannot load {path}")
    n = lib.di_model_kv_bytes_per_token(m)
    lib.di_model_free(m)
    return n


def ttft_of(engine, ids):
    """Seconds from submit to the first token of a one-token request (run to its end)."""
    t0 = time.perf_counter()
    first = None
    for ev in engine.submit(ids, max_tokens=1, temperature=0.0):
        if first is None and isinstance(ev, deepinfer.Tokens):
            first = time.perf_counter() - t0
    return first


def ttft_once(model, ids, args, **kw):
    """ttft_of on a fresh engine."""
    with deepinfer.Engine(model, n_threads=args.threads, max_running=4, n_ctx=4096, **kw) as e:
        return ttft_of(e, ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=4)
    ap.add_argument("--kv-fraction", type=float, default=0.25)
    ap.add_argument("--host-fraction", type=float, default=0.25)
    ap.add_argument("--prefix-tokens", type=int, default=2000)
    ap.add_argument("--llama-ram-gb", type=float, default=2.0)
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--llama-disk-requests", type=int, default=40,
                    help="the trace's first N requests only through LlamaDiskCache (it pickles "
                         "the whole state per request: ~30 s each at 3,000 tokens)")
    ap.add_argument("--with-off", action="store_true")
    ap.add_argument("--unlimited-run", action="store_true",
                    help="also run the unlimited cache (its hit count must equal the computed one)")
    ap.add_argument("--json")
    args = ap.parse_args()

    tok = deepinfer.Tokenizer.load(args.model)
    prompts = [tok.encode(text, special=True) for _, _, text in trace(args.sessions, args.turns)]
    # what the whole trace keeps: every session's last context, plus the outputs
    need_tokens = sum(len(p) for p in prompts[-args.sessions:]) + len(prompts) * args.gen
    kv_token = model_kv_bytes_per_token(args.model)
    need = need_tokens * kv_token
    n_prompt = sum(len(p) for p in prompts)
    print(f"trace: {args.sessions} sessions x {args.turns} turns = {len(prompts)} requests, "
          f"{n_prompt} prompt tokens, contexts up to {max(len(p) for p in prompts)} tokens; "
          f"the cache needs {need / 2**20:.0f} MiB for all of it")
    print(f"load average {os.getloadavg()[0]:.2f}")
    res = Results()
    print(HEADER, flush=True)
    # What an unlimited cache gets, exactly: each prompt's longest run of whole
    # blocks (short of its last token) that an earlier prompt computed. The
    # replayed trace's prompts do not contain the earlier outputs, so prompts
    # are all that can match. --unlimited-run measures it with an engine too.
    unlimited_hit = 0
    for i, p in enumerate(prompts):
        best = 0
        for q in prompts[:i]:
            n = 0
            lim = min(len(p) - 1, len(q))
            while n < lim and p[n] == q[n]:
                n += 1
            best = max(best, n // 16 * 16)
        unlimited_hit += best
    print(f"{'unlimited':<11} {unlimited_hit / n_prompt:>9.3f}  (computed from the trace)")
    if args.unlimited_run:
        res["unlimited"] = run_deepinfer(args.model, prompts, args, kv_cache_bytes=int(need * 1.5))
        assert res["unlimited"]["hit"] == unlimited_hit, (res["unlimited"]["hit"], unlimited_hit)
    with tempfile.TemporaryDirectory() as d:
        res["limited"] = run_deepinfer(args.model, prompts, args,
                                       kv_cache_bytes=int(need * args.kv_fraction),
                                       kv_host_cache_bytes=int(need * args.host_fraction),
                                       kv_cache_dir=d)
    if args.with_off:
        res["off"] = run_deepinfer(args.model, prompts, args, prefix_cache=False)
    if not args.skip_llama:
        from llama_cpp import LlamaDiskCache, LlamaRAMCache
        res["llama-ram"] = run_llama(args.model, prompts, args,
                                     LlamaRAMCache(capacity_bytes=int(args.llama_ram_gb * 2**30)))
        # LlamaDiskCache prints three lines per request: kept off the report
        with tempfile.TemporaryDirectory() as d, open(os.devnull, "w") as quiet, \
                contextlib.redirect_stdout(quiet):
            res["llama-disk"] = run_llama(args.model, prompts[: args.llama_disk_requests], args,
                                          LlamaDiskCache(cache_dir=d))

    print("\n(the table again, all runs together)")
    print(HEADER)
    for name, r in res.items():
        print(row(name, r))

    # one long prefix: a hit against cold, and a disk restore against recompute
    rng = random.Random(3)
    prefix = tok.encode(prose(rng, args.prefix_tokens), special=False)[: args.prefix_tokens]
    a = prefix + tok.encode(" What does it say about time?")
    questions = [f" Question {i}: summarise part {i} of it in one line." for i in range(4)]
    cold = [ttft_once(args.model, prefix + tok.encode(q), args, prefix_cache=False)
            for q in questions[:3]]
    hit = []
    with deepinfer.Engine(args.model, n_threads=args.threads, max_running=4, n_ctx=4096) as e:
        e.generate(a, max_tokens=1)
        for q in questions:
            hit.append(ttft_of(e, prefix + tok.encode(q)))
    restore = []
    for q in questions[:3]:
        with tempfile.TemporaryDirectory() as d:
            with deepinfer.Engine(args.model, n_threads=args.threads, kv_cache_dir=d) as e:
                e.generate(a, max_tokens=1)
            restore.append(ttft_once(args.model, prefix + tok.encode(q), args, kv_cache_dir=d))
    c, h, r = statistics.median(cold), statistics.median(hit), statistics.median(restore)
    print(f"\n{len(prefix)}-token prefix: TTFT cold {c * 1e3:.1f} ms, hit {h * 1e3:.1f} ms, "
          f"restored from disk by a new engine {r * 1e3:.1f} ms (medians)")

    print("\nratios:")
    print(f"  hit rate, limited cache (KV {args.kv_fraction:.0%} + host {args.host_fraction:.0%} "
          f"of the need, disk) / unlimited: "
          f"{res['limited']['hit'] / unlimited_hit:.3f}"
          "  (goal >= 0.95)")
    print(f"  TTFT on a {len(prefix)}-token hit / cold: {h / c:.3f}  (goal <= 0.10)")
    print(f"  TTFT restored from disk / recomputed: {r / c:.3f}")
    for name in ("llama-ram", "llama-disk"):
        if name in res:
            n = len(res[name]["ttft"])
            ours = res["limited"]["ttft"][:n]
            print(f"  {name} / deepinfer limited, the same {n} requests: "
                  f"time {sum(res[name]['ttft']) / sum(ours):.2f} (TTFT summed), mean TTFT "
                  f"{statistics.mean(res[name]['ttft']) / statistics.mean(ours):.2f}  "
                  "(> 1: deepinfer faster)")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {kk: vv for kk, vv in v.items()} for k, v in res.items()}, f)


if __name__ == "__main__":
    main()
