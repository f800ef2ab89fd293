#!/usr/bin/env python3
"""Prefill and decode speed at a short and a long prompt (the CPU-kernel
issue's long-context goal: tokens/s at 4,096 tokens within 25 % of that at 256).

SmolLM2-135M-Instruct Q4_1 through the Python binding: random prompt token ids
of each length (fresh each rep), then --gen greedy tokens (ignore_eos); prefill
tokens/s (prompt / time to the first token) and decode tokens/s after the first
token, best of --reps. Compare two libraries by running it once per
DEEPINFER_LIBRARY, alternated (the machine's load moves between runs).

    DEEPINFER_LIBRARY=build/release/lib/libdeepinfer.so PYTHONPATH=bindings/python \\
        python bench/long_decode_bench.py [--model GGUF] [--threads 2] \\
        [--prompts 256,4096] [--gen 32] [--reps 2]
"""
import argparse
import os
import random
import time

import deepinfer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/deepinfer/assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="256,4096")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    lengths = [int(x) for x in a.prompts.split(",")]
    e = deepinfer.Engine(a.model, n_threads=a.threads, n_ctx=max(lengths) + a.gen + 1)
    rng = random.Random(1)
    rates, prefill = {}, {}
    for n in lengths:
        best = best_prefill = 0.0
        for _ in range(a.reps):
            # fresh ids each rep: a cached prefix would not be a prefill
            toks = [rng.randrange(100, 40000) for _ in range(n)]
            start, first, count = time.perf_counter(), None, 0
            for ev in e.submit(toks, max_tokens=a.gen + 1, temperature=0, ignore_eos=True):
                if isinstance(ev, deepinfer.Tokens):
                    if first is None:
                        first = time.perf_counter()
                    else:
                        count += len(ev.ids)
            best = max(best, count / (time.perf_counter() - first))
            best_prefill = max(best_prefill, n / (first - start))
        rates[n], prefill[n] = best, best_prefill
    e.close()
    lib = os.environ.get("DEEPINFER_LIBRARY", "(the bundled library)")
    print(f"{lib}: threads {a.threads}, decode tok/s after " +
          ", ".join(f"{n}: {r:.1f}" for n, r in rates.items()) +
          "; prefill tok/s at " + ", ".join(f"{n}: {r:.0f}" for n, r in prefill.items()) +
          f"; load {os.getloadavg()[0]:.1f}")
    lo, hi = min(lengths), max(lengths)
    print(f"ratio decode after {hi} / after {lo}: {rates[hi] / rates[lo]:.2f}, "
          f"prefill at {hi} / at {lo}: {prefill[hi] / prefill[lo]:.2f} (goal >= 0.75)")


if __name__ == "__main__":
    main()
