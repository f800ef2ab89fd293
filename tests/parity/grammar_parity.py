#!/usr/bin/env python3
"""Grammar masks against xgrammar (issue 20's oracle).

For JSON schemas from a seeded random generator, for a few GBNF grammars and
regexes, drive grammar_driver (our engine) and xgrammar side by side along
random accepted token sequences, and check that the allowed-token set is the
same at every step. Special tokens are left out of the comparison (we never
allow them; xgrammar's RAW vocabulary sees them as text), except the end token.

usage: grammar_parity.py <grammar_driver> <tokenizer.json|.gguf> [--schemas N]
       [--steps N] [--seed S]
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile

import numpy as np
import xgrammar as xg


class Driver:
    def __init__(self, exe, tok, kind, text, eos=-1):
        self.f = tempfile.NamedTemporaryFile("w", suffix=".g", delete=False)
        self.f.write(text)
        self.f.close()
        self.p = subprocess.Popen([exe, tok, kind, self.f.name, str(eos)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def cmd(self, c):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().rstrip("\n")

    def first_line(self):
        return self.p.stdout.readline().rstrip("\n")

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def vocab(exe, tok, eos=-1):
    d = Driver(exe, tok, "gbnf", 'root ::= "x"\n', eos)
    d.p.stdin.write("v\n")
    d.p.stdin.flush()
    eos = int(d.first_line().split()[1])
    special, toks = [], []
    for line in d.p.stdout:
        if line.strip() == "end":
            break
        parts = line.split()
        special.append(parts[0] == "1")
        toks.append(bytes.fromhex(parts[1]) if len(parts) > 1 else b"")
    d.close()
    return eos, special, toks


# ---------------------------------------------------------------- generator

WORDS = ["id", "name", "age", "tags", "kind", "items", "value", "ok", "city", "note", "when",
         "email", "uid", "score", "level", "x", "y"]


def gen_schema(rng, depth=0, defs=None):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "strlen",
             "format", "pattern", "intrange"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyof"]
        if defs is not None:
            kinds.append("ref")
    k = rng.choice(kinds)
    if k in ("string", "integer", "number", "boolean", "null"):
        return {"type": k}
    if k == "enum":
        vals = rng.sample(["a", "b c", "red", "x\"y", 1, 2.5, True, None, "z"], rng.randint(1, 4))
        return {"enum": vals}
    if k == "const":
        return {"const": rng.choice(["fixed", 7, False, "q"])}
    if k == "strlen":
        lo = rng.randint(0, 3)
        s = {"type": "string", "minLength": lo}
        if rng.random() < 0.8:
            s["maxLength"] = lo + rng.randint(0, 5)
        return s
    if k == "format":
        return {"type": "string", "format": rng.choice(["date", "time", "date-time", "email",
                                                        "uuid"])}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]+$", "^[A-Z][a-z]{1,5}$",
                                                         "^\\d{3}-\\d{4}$", "^(ab|cd)+x?$",
                                                         "^[0-9a-f]{2,4}$"])}
    if k == "intrange":
        lo = rng.randint(-150, 150)
        s = {"type": "integer"}
        r = rng.random()
        if r < 0.7:
            s["minimum"], s["maximum"] = lo, lo + rng.randint(0, 1200)
        elif r < 0.85:
            s["minimum"] = lo
        else:
            s["maximum"] = lo
        return s
    if k == "array":
        s = {"type": "array", "items": gen_schema(rng, depth + 1, defs)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
        return s
    if k == "anyof":
        return {"anyOf": [gen_schema(rng, depth + 1, defs) for _ in range(rng.randint(2, 3))]}
    if k == "ref":
        name = "D%d" % len(defs)
        defs[name] = gen_schema(rng, 3, None)
        return {"$ref": "#/$defs/" + name}
    return gen_object(rng, depth, defs)


def gen_object(rng, depth, defs):
    names = rng.sample(WORDS, rng.randint(1, 4))
    props = {n: gen_schema(rng, depth + 1, defs) for n in names}
    req = names if rng.random() < 0.6 else [n for n in names if rng.random() < 0.5]
    return {"type": "object", "properties": props, "required": req,
            "additionalProperties": False}


def gen_root(rng):
    defs = {}
    s = gen_object(rng, 0, defs)
    if defs:
        s["$defs"] = defs
    return s


GBNF = [
    # arithmetic (llama.cpp's grammars/arithmetic.gbnf, in the syntax both read)
    'root ::= (expr "=" ws term "\\n")+\nexpr ::= term ([-+*/] term)*\n'
    'term ::= ident | num | "(" ws expr ")" ws\nident ::= [a-z] [a-z0-9_]* ws\n'
    'num ::= [0-9]+ ws\nws ::= [ \\t\\n]*\n',
    # lists with negated classes and bounded repetition (xgrammar 0.2.9's mask
    # allows the end token after an empty item when a bounded repetition {m,n}
    # holds the item or the list, "- a\n- " say, which its own string check
    # rejects: the bound here is on characters inside a right-recursive list)
    'root ::= "- " item ("\\n- " item)*\nitem ::= [^\\n\\x00-\\x1f] [a-z]{0,11}\n',
    # nested recursion
    'root ::= obj\nobj ::= "{" (pair ("," pair)*)? "}"\npair ::= [a-z]+ ":" (obj | [0-9]+ | '
    '"\\"" [a-zA-Z ]* "\\"")\n',
    # non-ASCII classes
    'root ::= [α-ω]+ " " [^a-z ]{2,3} "!"?\n',
]
REGEX = ["[a-z]+@[a-z]+\\.(com|org)", "(\\d{1,3}\\.){3}\\d{1,3}", "x(ab|c)*y?z{2,3}"]


def run_one(exe, tok, kind, text, ti, compiler, special, eos, steps, rng, label, toks):
    if kind == "json":
        cg = compiler.compile_json_schema(text)
    elif kind == "gbnf":
        cg = compiler.compile_grammar(text)
    else:
        cg = compiler.compile_regex(text)
    m = xg.GrammarMatcher(cg)
    d = Driver(exe, tok, kind, text, eos)
    V = len(special)
    bm = xg.allocate_token_bitmask(1, ti.vocab_size)
    keep = np.array([not s for s in special] + [False] * (ti.vocab_size - V))
    keep[eos] = True
    n_steps = 0
    hist = []
    for step in range(steps):
        line = d.cmd("m")
        if line.startswith("ERR"):
            print(f"{label}: our compile failed: {line}")
            return None
        ours = set(map(int, line.split())) if line else set()
        m.fill_next_token_bitmask(bm)
        bits = np.unpackbits(bm[0].numpy().view(np.uint8), bitorder="little")[:ti.vocab_size]
        theirs = set(np.nonzero(bits.astype(bool) & keep)[0].tolist())
        n_steps += 1
        if ours != theirs:
            a = sorted(ours - theirs)[:8]
            b = sorted(theirs - ours)[:8]
            print(f"{label} step {step}: MISMATCH ours-only {[(i, toks[i]) for i in a]}"
                  f" xgrammar-only {[(i, toks[i]) for i in b]} after {hist}")
            d.close()
            return False, n_steps
        if not ours:
            break
        cands = sorted(ours)
        if eos in ours and (step > steps * 0.7 or rng.random() < 0.05):
            t = eos
        elif rng.random() < 0.5:
            short = [i for i in cands if len(toks[i]) == 1]
            t = rng.choice(short or cands)
        else:
            t = rng.choice(cands)
        hist.append(toks[t])
        assert m.accept_token(t), (label, t)
        assert d.cmd(f"a {t}") == "ok", (label, t)
        if t == eos:
            break
    d.close()
    return True, n_steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("tokenizer")
    ap.add_argument("--schemas", type=int, default=40)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--eos", type=int, default=-1,
                    help="the end token's id (default: the tokenizer's own; a tokenizer.json "
                         "without a config names none)")
    a = ap.parse_args()
    eos, special, toks = vocab(a.driver, a.tokenizer, a.eos)
    if eos < 0:
        sys.exit(f"{a.tokenizer}: no end token known; pass --eos ID")
    ti = xg.TokenizerInfo(toks, vocab_type=xg.VocabType.RAW, stop_token_ids=[eos])
    compiler = xg.GrammarCompiler(ti)
    rng = random.Random(a.seed)
    cases = [("json", json.dumps(gen_root(rng)), f"schema#{i}") for i in range(a.schemas)]
    cases += [("gbnf", g, f"gbnf#{i}") for i, g in enumerate(GBNF)]
    cases += [("regex", r, f"regex#{i}") for i, r in enumerate(REGEX)]
    ok = bad = steps = 0
    for kind, text, label in cases:
        r = run_one(a.driver, a.tokenizer, kind, text, ti, compiler, special, eos, a.steps, rng,
                    label, toks)
        if r is None or not r[0]:
            bad += 1
            print("   ", text[:400])
        else:
            ok += 1
        if r:
            steps += r[1]
    print(f"grammar parity: {ok} of {len(cases)} grammars identical to xgrammar, "
          f"{steps} steps compared")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
