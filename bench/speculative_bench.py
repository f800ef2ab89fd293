#!/usr/bin/env python3
"""Speculative decoding by prompt lookup against llama.cpp's, in one run
(docs/speculative.md).

Workloads (SmolLM2-135M-Instruct's ChatML prompts, tokenized once by deepinfer
and fed as the same token IDs to everyone), greedy, up to --gen tokens each (to
the model's end token unless --ignore-eos); the
issue's three are rewrite, quote and free:
  rewrite  an agent's edit: a 300-line Python module to return whole with one
           function renamed everywhere (the issue's (a); the instruction after the
           file, where SmolLM2-135M follows it)
  quote    a 30-paragraph document and a request to quote one paragraph word
           for word (the issue's (b))
  free     a question whose answer copies nothing (drafting's overhead, (c))
  copy     "Repeat this code exactly" over a 40-line Python file
  edit     a JSON object to return with one field changed

Runs, interleaved, best of --reps, each on the same GGUF and threads:
  di        deepinfer, speculative_tokens 0
  di-spec   deepinfer, speculative_tokens --draft (prompt lookup, drafts chosen
            by the confidence-scheduled allocation)
  di-fixed  the same verifying every proposal (speculative_fixed)
  llama     llama-cpp-python's Llama.generate
  llama-pl  the same with LlamaPromptLookupDecoding(num_pred_tokens=--draft)
            (llama-cpp-python's prompt-lookup draft model)
For each: decode tokens/s (after the first token), and for deepinfer the
drafts verified and kept. Every run's greedy tokens are checked equal to its
own non-speculative run (lossless). Ratios last: di-spec / di,
llama-pl / llama, and di-spec / llama-pl (> 1: deepinfer faster); di-spec / di
and di-fixed / di are the median over the reps of each rep's ratio to the di
run just before it (the same moment of a shared machine's load).

With --concurrent N (16 by default; 0: not), the three deepinfer runs again
with N copies of each request at once (engines of max_running N): their
decode throughput together, every copy's tokens checked equal to the plain
output. llama-cpp-python decodes one sequence: it has no such run.

    bench/speculative_bench.py [--model GGUF] [--threads 2] [--gen 128] [--draft 8]
                               [--reps 2] [--concurrent 16]
Needs the deepinfer Python package (bindings/python) and, for the anchor,
llama-cpp-python (the model-oracle venv: scripts/oracle-venv.sh --model).
"""
import argparse
from statistics import median
import os
import subprocess
import sys
import threading
import time

import deepinfer

CODE = "\n".join(
    [f"def step_{i}(state, x):\n    state[{i}] = state.get({i}, 0) + x * {i + 1}\n    return state"
     for i in range(13)]
) + "\n"

JSON = ('{"id": 4182, "name": "Ada Lovelace", "email": "ada@example.com", "roles": ["admin", '
        '"editor"], "settings": {"theme": "dark", "language": "en", "notifications": true}, '
        '"projects": [{"id": 1, "title": "Analytical Engine", "status": "active"}, {"id": 2, '
        '"title": "Notes", "status": "archived"}]}')


def module_source():
    """A 300-line Python module (deterministic): an inventory service whose
    helpers call compute_total, the function the rewrite renames."""
    goods = ["bolts", "nuts", "gears", "belts", "valves", "pumps", "hoses", "seals", "cables",
             "fuses", "relays", "motors", "sensors", "panels", "frames", "wheels", "chains",
             "springs", "filters", "brackets", "clamps", "pipes", "washers", "rivets"]
    lines = ['"""Inventory helpers for the warehouse service."""', "import json", "import math",
             "", "", "def compute_total(items, rate):",
             '    """The price of items at rate, rounded to cents."""',
             "    return round(sum(q * p for q, p in items) * rate, 2)", "", ""]
    for i, g in enumerate(goods):
        lines += [f"def price_{g}(stock, discount={i % 5}):",
                  f'    """What the {g} in stock cost after a {i % 5} % discount."""',
                  f'    items = [(row["count"], row["unit_{i}"]) for row in stock["{g}"]]',
                  "    if not items:",
                  f'        return {{"kind": "{g}", "total": 0.0, "bulk": False}}',
                  f"    # {g} are priced per unit; the discount applies to the whole order",
                  f"    total = compute_total(items, 1 - discount / 100)",
                  f"    if total > {100 * (i + 1)}:",
                  f'        return {{"kind": "{g}", "total": total, "bulk": True}}',
                  f'    return {{"kind": "{g}", "total": total, "bulk": False}}', "", ""]
    lines += ["def report(stock):", '    """Every kind\'s price, as JSON."""',
              "    rows = [f(stock) for f in PRICERS]", "    return json.dumps(rows, indent=2)",
              "", "", "PRICERS = [" + ", ".join(f"price_{g}" for g in goods) + "]"]
    return "\n".join(lines) + "\n"


def document():
    """30 paragraphs of plain prose (deterministic); the 17th is about the
    lighthouse keeper."""
    places = ["harbour", "market", "bridge", "mill", "school", "library", "station", "chapel",
              "orchard", "quarry", "bakery", "forge", "ferry", "granary", "tannery"]
    verbs = ["opened", "closed", "moved", "grew", "changed", "burned", "flooded", "reopened"]
    paras = []
    for i in range(30):
        a, b = places[i % len(places)], places[(i * 7 + 3) % len(places)]
        v = verbs[i % len(verbs)]
        y = 1820 + 3 * i
        if i == 16:
            paras.append("The lighthouse keeper, Marta Quell, kept a log of every ship that "
                         f"passed between {y} and {y + 11}. Her entries note the weather, the "
                         "colour of each hull and the hour it cleared the point, and they are "
                         "the only record of the storm that took the old pier.")
            continue
        paras.append(f"In {y} the {a} {v} for the first time since the {b} was built. The town "
                     f"council met {i % 4 + 2} times that year to decide what the {a} should "
                     f"become, and the minutes record {i % 9 + 3} proposals, none of which was "
                     f"adopted before the winter of {y + 1}.")
    return "\n\n".join(paras)


WORKLOADS = {
    "rewrite": "```python\n" + module_source() + "```\n\nRename the function compute_total to "
               "total_price everywhere in the file above. Return the whole updated file.",
    "quote": document() + "\n\nQuote, word for word, the paragraph about the lighthouse "
             "keeper.",
    "free": "Write a short poem about the sea at night.",
    "copy": f"Repeat this code exactly, with nothing before or after it:\n\n{CODE}",
    "edit": f"Return this JSON object unchanged except that theme is light:\n\n{JSON}",
}


def asset_path():
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..",
                                                       "scripts", "fetch_assets.py"),
                          "smollm2-135m-instruct"], check=True, capture_output=True, text=True)
    return out.stdout.split()[1]


def prompt_tokens(engine, text):
    """The ChatML prompt of one user message, as SmolLM2's chat template writes
    it (its default system prompt), tokenized with the special tokens."""
    prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
              "Hugging Face<|im_end|>\n<|im_start|>user\n" + text +
              "<|im_end|>\n<|im_start|>assistant\n")
    return engine.tokenizer.encode(prompt, special=True)


IGNORE_EOS = False  # --ignore-eos: every run decodes --gen tokens past the answer


def run_di(engine, tokens, gen):
    t0 = time.perf_counter()
    first = None
    out = []
    done = None
    for ev in engine.submit(tokens, max_tokens=gen, temperature=0, ignore_eos=IGNORE_EOS):
        if isinstance(ev, deepinfer.Tokens):
            if first is None:
                first = time.perf_counter()
            out += ev.ids
        elif isinstance(ev, deepinfer.Done):
            done = ev
    t1 = time.perf_counter()
    rate = (len(out) - 1) / (t1 - first) if len(out) > 1 else 0.0
    return out, rate, done.draft_tokens, done.accepted_draft_tokens, t1 - t0


def run_di_many(engine, tokens, gen, n):
    """n copies of the request at once: the decode throughput (generated
    tokens/s after every request has its first token, until the last ends),
    each request's tokens, and drafts verified and kept over all."""
    reqs = [engine.submit(tokens, max_tokens=gen, temperature=0, ignore_eos=IGNORE_EOS)
            for _ in range(n)]
    outs = [[] for _ in range(n)]
    times = [[] for _ in range(n)]
    dones = [None] * n

    def drain(i):
        for ev in reqs[i]:
            if isinstance(ev, deepinfer.Tokens):
                times[i].append((time.perf_counter(), len(ev.ids)))
                outs[i] += ev.ids
            elif isinstance(ev, deepinfer.Done):
                dones[i] = ev

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = max(ts[0][0] for ts in times)
    end = max(ts[-1][0] for ts in times)
    count = sum(c for ts in times for (t, c) in ts if t > start)
    rate = count / (end - start) if end > start else 0.0
    return (outs, rate, sum(d.draft_tokens for d in dones),
            sum(d.accepted_draft_tokens for d in dones))


def run_llama(llm, tokens, gen):
    llm.reset()
    out = []
    first = None
    for tok in llm.generate(tokens, temp=0.0, top_k=1, reset=True):
        if first is None:
            first = time.perf_counter()
        out.append(tok)
        if len(out) == gen or (tok == llm.token_eos() and not IGNORE_EOS):
            break
    t1 = time.perf_counter()
    rate = (len(out) - 1) / (t1 - first) if len(out) > 1 else 0.0
    return out, rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--draft", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="decode --gen tokens whatever the model ends (default: stop at its "
                         "end token, so a quote's speed is the quote's)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--concurrent", type=int, default=16,
                    help="also run this many copies of each request at once (0: not)")
    args = ap.parse_args()
    global IGNORE_EOS
    IGNORE_EOS = args.ignore_eos
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        ap.error(f"--workloads: unknown {', '.join(sorted(unknown))}")
    model = args.model or asset_path()
    di = deepinfer.Engine(model, n_threads=args.threads, max_running=1, n_ctx=8192)
    di_spec = deepinfer.Engine(model, n_threads=args.threads, max_running=1, n_ctx=8192,
                               speculative_tokens=args.draft)
    di_fixed = deepinfer.Engine(model, n_threads=args.threads, max_running=1, n_ctx=8192,
                                speculative_tokens=args.draft, speculative_fixed=True)
    n_conc = args.concurrent
    if n_conc > 0:
        conc = {name: deepinfer.Engine(model, n_threads=args.threads, max_running=n_conc, n_ctx=8192,
                                       speculative_tokens=k, speculative_fixed=fixed)
                for name, k, fixed in [("di", 0, False), ("di-spec", args.draft, False),
                                       ("di-fixed", args.draft, True)]}
    try:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        kw = dict(model_path=model, n_threads=args.threads, n_ctx=8192, verbose=False)
        llama = llama_cpp.Llama(**kw)
        # a draft model needs every row's logits (llama-cpp-python's requirement)
        llama_pl = llama_cpp.Llama(**kw, logits_all=True, draft_model=LlamaPromptLookupDecoding(
            num_pred_tokens=args.draft))
        anchor = True
    except ImportError:
        print("llama-cpp-python is not installed: the anchor runs are skipped")
        anchor = False
    rows = []
    for name in args.workloads.split(","):
        toks = prompt_tokens(di, WORKLOADS[name])
        best = {}
        for _ in range(args.reps):
            ref, r, *_ = run_di(di, toks, args.gen)
            best["di"] = max(best.get("di", 0), r)
            plain = r
            out, r, drafted, kept, _ = run_di(di_spec, toks, args.gen)
            best.setdefault("pairs-spec", []).append(r / plain)
            assert out == ref, f"{name}: speculation changed the output"
            best["di-spec"] = max(best.get("di-spec", 0), r)
            best["drafts"] = (drafted, kept)
            out, r, drafted, kept, _ = run_di(di_fixed, toks, args.gen)
            assert out == ref, f"{name}: fixed-length speculation changed the output"
            best["di-fixed"] = max(best.get("di-fixed", 0), r)
            best.setdefault("pairs-fixed", []).append(r / plain)
            best["fixed-drafts"] = (drafted, kept)
            if anchor:
                lref, r = run_llama(llama, toks, args.gen)
                best["llama"] = max(best.get("llama", 0), r)
                lout, r = run_llama(llama_pl, toks, args.gen)
                best["llama-pl"] = max(best.get("llama-pl", 0), r)
                best["llama-same"] = lout == lref
            if n_conc > 0:  # n at once: every request's tokens are the plain one's
                outs, r, *_ = run_di_many(conc["di"], toks, args.gen, n_conc)
                assert all(o == ref for o in outs), f"{name}: batched output differs"
                best["c-di"] = max(best.get("c-di", 0), r)
                plain = r
                for key in ("di-spec", "di-fixed"):
                    outs, r, drafted, kept = run_di_many(conc[key], toks, args.gen, n_conc)
                    assert all(o == ref for o in outs), f"{name}: {key} x{n_conc} changed it"
                    best["c-" + key] = max(best.get("c-" + key, 0), r)
                    best.setdefault("c-pairs-" + key, []).append(r / plain)
                    best["c-" + key + "-drafts"] = (drafted, kept)
        rows.append((name, len(toks), best))
    print(f"model {os.path.basename(model)}, threads {args.threads}, {args.gen} tokens, "
          f"draft {args.draft}, best of {args.reps}; decode tokens/s; di-spec/di and "
          f"di-fixed/di: the median over the reps of each rep's ratio to the di run just "
          f"before it; load average {os.getloadavg()[0]:.1f}")
    print("| workload | prompt | di | di-spec (kept/verified) | di-fixed (kept/verified) | "
          "llama | llama-pl | di-spec/di | di-fixed/di | llama-pl/llama | di-spec/llama-pl |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n, b in rows:
        d, k = b["drafts"][0], b["drafts"][1]
        fd, fk = b["fixed-drafts"]
        la, lp = b.get("llama"), b.get("llama-pl")
        cells = [name, str(n), f"{b['di']:.1f}", f"{b['di-spec']:.1f} ({k}/{d})",
                 f"{b['di-fixed']:.1f} ({fk}/{fd})",
                 f"{la:.1f}" if la else "-", f"{lp:.1f}" if lp else "-",
                 f"{median(b['pairs-spec']):.2f}", f"{median(b['pairs-fixed']):.2f}",
                 f"{lp / la:.2f}" if la else "-",
                 f"{b['di-spec'] / lp:.2f}" if lp else "-"]
        print("| " + " | ".join(cells) + " |")
        if la and not b.get("llama-same"):
            print(f"  note: llama-pl's tokens differ from llama's on {name}")
    if n_conc > 0:
        print(f"\n{n_conc} concurrent copies of each request (max_running {n_conc}); decode "
              "tokens/s of all of them together (after the last first token)")
        print("| workload | di | di-spec (kept/verified) | di-fixed (kept/verified) | "
              "di-spec/di | di-fixed/di |")
        print("|---|---|---|---|---|---|")
        for name, n, b in rows:
            d, k = b["c-di-spec-drafts"]
            fd, fk = b["c-di-fixed-drafts"]
            print(f"| {name} | {b['c-di']:.1f} | {b['c-di-spec']:.1f} ({k}/{d}) | "
                  f"{b['c-di-fixed']:.1f} ({fk}/{fd}) | {median(b['c-pairs-di-spec']):.2f} | "
                  f"{median(b['c-pairs-di-fixed']):.2f} |")
        for e in conc.values():
            e.close()
    di.close()
    di_spec.close()
    di_fixed.close()


if __name__ == "__main__":
    main()
