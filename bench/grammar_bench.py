#!/usr/bin/env python3
"""Token-mask time per step against xgrammar, on the same grammar and vocabulary.

A JSON-schema workload (grammar_parity.py's seeded generator) on SmolLM2's
vocabulary: both engines walk the same random accepted token sequences; each
step times our grammar_matcher_fill_mask (inside tests/parity/grammar_driver,
clock_gettime around the call) and xgrammar's fill_next_token_bitmask
(perf_counter around the call). Prints p50 / p99 of each, compile time is not
measured, and the ratios ours / xgrammar last (< 1: we are faster).

usage: grammar_bench.py <grammar_driver> <tokenizer .gguf|.json> [--schemas N] [--steps N]
(run with a Python that has xgrammar, e.g. the model oracle venv)
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import xgrammar as xg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "parity"))
from grammar_parity import Driver, gen_root, vocab  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("tokenizer")
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eos", type=int, default=-1,
                    help="the end token's id (a tokenizer.json without a config names none)")
    a = ap.parse_args()
    eos, special, toks = vocab(a.driver, a.tokenizer, a.eos)
    if eos < 0:
        sys.exit(f"{a.tokenizer}: no end token known; pass --eos ID")
    ti = xg.TokenizerInfo(toks, vocab_type=xg.VocabType.RAW, stop_token_ids=[eos])
    compiler = xg.GrammarCompiler(ti)
    rng = random.Random(a.seed)
    ours, theirs = [], []
    compile_ours, compile_theirs = [], []
    bm = xg.allocate_token_bitmask(1, ti.vocab_size)
    for _ in range(a.schemas):
        text = json.dumps(gen_root(rng))
        t0 = time.perf_counter()
        m = xg.GrammarMatcher(compiler.compile_json_schema(text))
        compile_theirs.append((time.perf_counter() - t0) * 1e9)
        d = Driver(a.driver, a.tokenizer, "json", text, eos)
        compile_ours.append(int(d.cmd("k")))
        for _step in range(a.steps):
            line = d.cmd("m")
            ours.append(int(d.cmd("t")))
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bm)
            theirs.append((time.perf_counter() - t0) * 1e9)
            allowed = [int(x) for x in line.split()]
            if not allowed:
                break
            short = [i for i in allowed if len(toks[i]) == 1]
            t = rng.choice(short if short and rng.random() < 0.5 else allowed)
            m.accept_token(t)
            d.cmd(f"a {t}")
            if t == eos:
                break
        d.close()
    o, x = np.array(ours), np.array(theirs)
    p = {q: (np.percentile(o, q) / 1e3, np.percentile(x, q) / 1e3) for q in (50, 99)}
    print(f"mask per token over {len(o)} steps ({a.schemas} JSON schemas, "
          f"vocabulary of {len(toks)}):")
    print(f"  deepinfer  p50 {p[50][0]:9.1f} us   p99 {p[99][0]:9.1f} us   "
          f"mean {o.mean() / 1e3:9.1f} us")
    print(f"  xgrammar   p50 {p[50][1]:9.1f} us   p99 {p[99][1]:9.1f} us   "
          f"mean {x.mean() / 1e3:9.1f} us")
    co, cx = np.array(compile_ours) / 1e6, np.array(compile_theirs) / 1e6
    print(f"compile per schema (ours: grammar, matcher and its precomputed adaptive entries; "
          f"xgrammar: compile_json_schema and GrammarMatcher):")
    print(f"  deepinfer  p50 {np.median(co):9.2f} ms  max {co.max():9.2f} ms")
    print(f"  xgrammar   p50 {np.median(cx):9.2f} ms  max {cx.max():9.2f} ms")
    print(f"ratio deepinfer/xgrammar: mask p50 {p[50][0] / p[50][1]:.2f}x  p99 "
          f"{p[99][0] / p[99][1]:.2f}x  compile p50 {np.median(co) / np.median(cx):.2f}x")


if __name__ == "__main__":
    main()
