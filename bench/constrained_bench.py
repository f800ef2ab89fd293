#!/usr/bin/env python3
"""Constrained decoding through the engine: decode tokens/s with a JSON-schema
constraint against the same requests unconstrained, and grammar compile time
against xgrammar (issue 20's "decode tokens/s constrained vs unconstrained
(goal: >= 95 %)" and "grammar compile time").

Workload: JSON schemas from tests/parity/grammar_parity.py's seeded generator
(gen_root), one SmolLM2-135M-Instruct token request each through the Python
binding (libdeepinfer's engine, one request at a time, so every mask is on the
decode's critical path).

Decode: each schema's constrained request (di_request.json_schema, greedy,
max_tokens --max-tokens) runs first; its completion token count n is then the
budget of the same prompt unconstrained (max_tokens n, ignore_eos), so both
decode the same number of tokens. A request's decode time is from its first
Tokens event to its Done (the prefill and the compile at di_submit are
outside); tokens/s is the (n - 1) tokens after the first over that time, summed
over the schemas. Each pair runs --repeats times, alternating which goes first,
and the fastest of each is kept (the shared machine's noise only slows). Two
clocks: wall time, and the process's CPU time (time.process_time: the engine's
worker and the Python thread copying the events, the same in both modes), which
other jobs on a shared machine disturb far less; with --threads 1 (default) the
forward pass has no spinning pool thread in it, so the CPU-time ratio is the
repeatable one (the grammar mask is serial work on the worker either way).

Compile: per schema, ours is di_submit's time with the schema minus di_submit's
time without one (the same prompt; the median of --compile-repeats each, the
request cancelled at once) — the JSON Schema compiled to a grammar and whatever
per-grammar state the first mask needs; xgrammar's is
GrammarCompiler(cache_enabled=False, max_threads=1).compile_json_schema on the
same vocabulary (its grammar plus its adaptive token-mask cache), median of the
same count. Ratios last: decode constrained/unconstrained (goal >= 0.95) and
compile deepinfer/xgrammar (< 1: we are faster).

usage (a Python with xgrammar: the model oracle venv, made by
scripts/oracle-venv.sh --model as .venv-model/; the binaries:
ninja -C build/release grammar_driver deepinfer; the model:
python3 scripts/fetch_assets.py smollm2-135m-instruct):
  .venv-model/bin/python bench/constrained_bench.py [BUILD_DIR] [MODEL.gguf] [--schemas N] [--repeats N]
BUILD_DIR (default build/release) gives BUILD_DIR/lib/libdeepinfer.so (unless
$DEEPINFER_LIBRARY is set) and BUILD_DIR/tests/grammar_driver (the vocabulary
xgrammar gets); MODEL defaults to SmolLM2 in the asset folder ($DI_ASSET_DIR, else
~/.cache/deepinfer/assets). The Python binding is bindings/python of this tree.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import xgrammar as xg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
from grammar_parity import gen_root, vocab  # noqa: E402

deepinfer = None  # imported in main(), once DEEPINFER_LIBRARY is set
SMOL = "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"


def prompt_ids(tok, schema_text):
    text = ("<|im_start|>system\nYou answer with one JSON value only.<|im_end|>\n"
            "<|im_start|>user\nWrite a JSON object that matches this JSON Schema:\n"
            f"{schema_text}<|im_end|>\n<|im_start|>assistant\n")
    return tok.encode(text, special=True)


def decode_run(engine, ids, **kw):
    """(completion tokens, wall seconds, process CPU seconds) of the decode: from
    the first Tokens event to the Done."""
    first = cpu0 = None
    n = 0
    for ev in engine.submit(ids, temperature=0, chunks=False, **kw):
        if isinstance(ev, deepinfer.Tokens):
            if first is None:
                first, cpu0 = time.perf_counter(), time.process_time()
            n += len(ev.ids)
        elif isinstance(ev, deepinfer.Done):
            end, cpu1 = time.perf_counter(), time.process_time()
            if not ev.ok:
                raise RuntimeError(f"request failed: {ev.status} {ev.message}")
    if first is None:
        return n, 0.0, 0.0
    return n, end - first, cpu1 - cpu0


def submit_time(engine, ids, **kw):
    t0 = time.perf_counter()
    req = engine.submit(ids, max_tokens=1, chunks=False, **kw)
    dt = time.perf_counter() - t0
    req.cancel()
    for _ in req:
        pass
    return dt


def main():
    global deepinfer
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build", "release"),
                    help="the build folder (lib/libdeepinfer.so, tests/grammar_driver)")
    ap.add_argument("model", nargs="?", help="SmolLM2-135M-Instruct .gguf")
    ap.add_argument("--schemas", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compile-repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.driver = os.path.join(a.build, "tests", "grammar_driver")
    if not os.environ.get("DEEPINFER_LIBRARY"):
        os.environ["DEEPINFER_LIBRARY"] = os.path.join(a.build, "lib", "libdeepinfer.so")
    if a.model is None:
        assets = os.environ.get("DI_ASSET_DIR") or os.path.expanduser(
            "~/.cache/deepinfer/assets")
        a.model = os.path.join(assets, SMOL)
    for path, what in ((a.driver, "ninja -C BUILD grammar_driver"),
                       (os.environ["DEEPINFER_LIBRARY"], "ninja -C BUILD deepinfer"),
                       (a.model, "scripts/fetch_assets.py")):
        if not os.path.isfile(path):
            sys.exit(f"constrained_bench: {path} is missing ({what})")
    import deepinfer as _di
    deepinfer = _di

    rng = random.Random(a.seed)
    schemas = [json.dumps(gen_root(rng)) for _ in range(a.schemas)]

    # ---- compile time
    eos, _special, toks = vocab(a.driver, a.model)
    ti = xg.TokenizerInfo(toks, vocab_type=xg.VocabType.RAW, stop_token_ids=[eos])
    compiler = xg.GrammarCompiler(ti, max_threads=1, cache_enabled=False)
    compiler.compile_json_schema(schemas[0])  # warm-up
    theirs = []
    for s in schemas:
        ts = []
        for _ in range(a.compile_repeats):
            t0 = time.perf_counter()
            compiler.compile_json_schema(s)
            ts.append(time.perf_counter() - t0)
        theirs.append(statistics.median(ts))

    with deepinfer.Engine(a.model, n_threads=a.threads, max_running=1) as engine:
        tok = engine.tokenizer
        prompts = [prompt_ids(tok, s) for s in schemas]
        submit_time(engine, prompts[0], json_schema=schemas[0])  # warm-up (vocabulary)
        ours = []
        for s, ids in zip(schemas, prompts):
            with_s = [submit_time(engine, ids, json_schema=s) for _ in range(a.compile_repeats)]
            without = [submit_time(engine, ids) for _ in range(a.compile_repeats)]
            ours.append(max(0.0, statistics.median(with_s) - statistics.median(without)))

        # ---- decode
        decode_run(engine, prompts[0], max_tokens=8)  # warm-up
        tot_n = 0
        tot = {"c": [0.0, 0.0], "u": [0.0, 0.0]}  # [wall, cpu] seconds, best of each
        finished = 0
        for i, (s, ids) in enumerate(zip(schemas, prompts)):
            best = {"c": [None, None], "u": [None, None]}
            n = None
            for r in range(a.repeats):
                order = ("c", "u") if (i + r) % 2 == 0 else ("u", "c")
                for which in order:
                    if which == "c":
                        got, wall, cpu = decode_run(engine, ids, json_schema=s,
                                                    max_tokens=a.max_tokens)
                        if n is None:
                            n = got
                        elif got != n:
                            raise RuntimeError(f"schema {i}: greedy constrained runs differ "
                                               f"({n} and {got} tokens)")
                    else:
                        if n is None:  # the constrained run sets the budget
                            n = decode_run(engine, ids, json_schema=s,
                                           max_tokens=a.max_tokens)[0]
                        got, wall, cpu = decode_run(engine, ids, max_tokens=n, ignore_eos=True)
                        if got != n:
                            raise RuntimeError(f"schema {i}: unconstrained gave {got} of {n}")
                    b = best[which]
                    b[0] = wall if b[0] is None else min(b[0], wall)
                    b[1] = cpu if b[1] is None else min(b[1], cpu)
            finished += n < a.max_tokens
            tot_n += n - 1
            for k in ("c", "u"):
                tot[k][0] += best[k][0]
                tot[k][1] += best[k][1]

    tps = {k: (tot_n / v[0], tot_n / v[1]) for k, v in tot.items()}
    print(f"SmolLM2-135M-Instruct, {a.schemas} JSON schemas (grammar_parity.py's generator, "
          f"seed {a.seed}), greedy, {a.threads} thread(s), one request at a time, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"compile per schema (median of {a.compile_repeats}):")
    print(f"  deepinfer (di_submit with - without)  p50 {statistics.median(ours) * 1e3:8.2f} ms"
          f"   max {max(ours) * 1e3:8.2f} ms")
    print(f"  xgrammar compile_json_schema          p50 {statistics.median(theirs) * 1e3:8.2f} ms"
          f"   max {max(theirs) * 1e3:8.2f} ms")
    print(f"decode: {tot_n} tokens each way ({finished} of {a.schemas} constrained outputs "
          f"finished before max_tokens {a.max_tokens}), best of {a.repeats}, tokens/s over "
          "wall time | over the process's CPU time:")
    print(f"  constrained    {tps['c'][0]:8.1f} | {tps['c'][1]:8.1f}")
    print(f"  unconstrained  {tps['u'][0]:8.1f} | {tps['u'][1]:8.1f}")
    print(f"ratio compile deepinfer/xgrammar: p50 "
          f"{statistics.median(ours) / statistics.median(theirs):.2f}x  "
          f"sum {sum(ours) / sum(theirs):.2f}x")
    print(f"ratio decode constrained/unconstrained (goal >= 0.95): wall "
          f"{tps['c'][0] / tps['u'][0]:.3f}  cpu {tps['c'][1] / tps['u'][1]:.3f}")


if __name__ == "__main__":
    main()
