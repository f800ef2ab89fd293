#!/usr/bin/env python3
"""Two (or more) builds of libdeepinfer on one GGUF, interleaved run by run:
prefill and decode tokens/s, medians and bests (a kernel change against the
library before it, on a machine too noisy for runs minutes apart).

Each round runs every library once, in turn, in a process of its own: load,
then --reps times a prompt of --prompt random IDs in one call and --gen greedy
tokens one call each. The medians over all rounds' reps are the numbers to
compare; the bests beside them.

    python bench/lib_ab.py --model FILE.gguf --libs OLD.so,NEW.so \\
        [--threads 2] [--prompt 64] [--gen 64] [--rounds 6] [--reps 2] [--kv-cache-type f16]

Run with any Python that has numpy (the model oracle venv has it). A library
built from an older commit: `git worktree add /tmp/old REV && cmake -S /tmp/old
-B /tmp/old/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build
/tmp/old/build --target deepinfer`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def one_run(lib_path, model, threads, plen, n_gen, reps, kv_cache_type):
    """The child: load once, then reps x model_bench's prefill-and-decode run;
    prints JSON."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import model_bench as mb
    lib, h = mb.load_deepinfer(lib_path, model, threads, plen + n_gen + 8, kv_cache_type)
    vocab = lib.di_model_vocab_size(h)
    prompt = [int(x) for x in np.random.default_rng(plen).integers(100, min(vocab, 10000), plen)]
    out = {"prefill": [], "decode": []}
    for _ in range(reps):  # one rep a call: every run's time, not only the best
        pp, tg, _ = mb.bench_deepinfer(lib, h, prompt, n_gen, 1)
        out["prefill"].append(plen / pp)
        out["decode"].append(n_gen / tg)
    lib.di_model_free(h)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--libs", required=True, help="comma-separated libdeepinfer.so paths")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kv-cache-type", default="f16", help="f16, f32, q8_0 or q4_0")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    libs = a.libs.split(",")
    if a.child:
        one_run(libs[0], a.model, a.threads, a.prompt, a.gen, a.reps, a.kv_cache_type)
        return
    for lib in libs:
        if not os.path.exists(lib):
            raise SystemExit(f"no library at {lib}")
    res = [{"prefill": [], "decode": []} for _ in libs]  # by position: a library may come twice
    for _ in range(a.rounds):
        for n, lib in enumerate(libs):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--libs", lib, "--model",
                   a.model, "--threads", str(a.threads), "--prompt", str(a.prompt), "--gen",
                   str(a.gen), "--reps", str(a.reps), "--kv-cache-type", a.kv_cache_type]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{lib}: the run failed:\n{r.stderr}")
            got = json.loads(r.stdout.strip().splitlines()[-1])
            for k in got:
                res[n][k] += got[k]
    print(f"{os.path.basename(a.model)}, {a.threads} threads, prompt {a.prompt}, decode {a.gen}, "
          f"KV cache {a.kv_cache_type}; {a.rounds} rounds x {a.reps} reps, interleaved")
    print("| library | prefill median (best) tok/s | decode median (best) tok/s | decode / first |")
    print("|---|---|---|---|")
    base = statistics.median(res[0]["decode"])
    for lib, r in zip(libs, res):
        p, d = r["prefill"], r["decode"]
        print(f"| {lib} | {statistics.median(p):.1f} ({max(p):.1f}) | "
              f"{statistics.median(d):.1f} ({max(d):.1f}) | {statistics.median(d) / base:.2f} |")


if __name__ == "__main__":
    main()
