#!/usr/bin/env python3
"""GBNF grammars from llama.cpp's own grammars/ folder, our masks against
llama.cpp's grammar sampler (the format's own implementation) and llguidance.

For every *.gbnf of vendor/llama.cpp/grammars in the pinned llama-cpp-python
source distribution: the grammar must compile here, and along random accepted
token sequences (SmolLM2's vocabulary) the allowed-token set at each step must
equal what `llama_sampler_init_grammar` leaves unmasked (llama-cpp-python's
bindings of llama.cpp's sampler). One documented difference: a token whose
bytes end inside a UTF-8 character is allowed here when some completion of the
character is allowed; llama.cpp rejects it when some completion is excluded
by a negated class (its partial-character check is conservative), so for those
tokens ours must hold llama.cpp's set rather than equal it. And llama.cpp
reads a token's text as a C string, so a token holding a NUL byte is never
allowed there (a negated class allows it here): those are not compared.
llguidance 1.9
(its gbnf_to_lark conversion) is the second oracle, on the grammars whose
conversion keeps the language: its lexer reads a terminal that can match
nothing (json_arr's `ws`) differently, so a grammar where it disagrees with
llama.cpp is reported, not failed, when ours agrees with llama.cpp.

usage: grammar_llama.py <grammar_driver> <SmolLM2 .gguf> [--grammars DIR] [--walks N] [--steps N]
(DIR defaults to the pinned source distribution's, fetched from PyPI once into
the deepinfer cache as make_model_fixtures.py does)
(run with the model oracle venv: llama-cpp-python, llguidance)
"""
import argparse
import ctypes
import os
import pathlib
import random
import sys

import numpy as np
import llama_cpp as L
import llguidance as llg
import llguidance.numpy as lln
from llguidance.gbnf_to_lark import gbnf_to_lark

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from grammar_parity import Driver, vocab  # noqa: E402
from make_model_fixtures import llama_cpp_source  # noqa: E402


def incomplete_utf8(b):
    """True when b ends inside a UTF-8 character (a lead byte whose
    continuation bytes are not all there)."""
    for back in range(1, min(4, len(b)) + 1):
        c = b[-back]
        if c & 0xC0 == 0x80:
            continue
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return need > back
    return False


class LlamaMasks:
    def __init__(self, gguf, n):
        self.llm = L.Llama(gguf, vocab_only=True, verbose=False)
        self.vocab = L.llama_model_get_vocab(self.llm.model)
        self.n = n
        self.data = (L.llama_token_data * n)()
        self.view = np.frombuffer(self.data, dtype=np.dtype(
            [("id", np.int32), ("logit", np.float32), ("p", np.float32)]))

    def sampler(self, text):
        s = L.llama_sampler_init_grammar(self.vocab, text.encode(), b"root")
        if not s:
            raise RuntimeError("llama.cpp does not parse the grammar")
        return s

    def allowed(self, s):
        self.view["id"] = np.arange(self.n, dtype=np.int32)
        self.view["logit"] = 0.0
        cur = L.llama_token_data_array(data=self.data, size=self.n, selected=-1, sorted=False)
        L.llama_sampler_apply(s, ctypes.byref(cur))
        v = self.view[:cur.size]
        return set(v["id"][np.isfinite(v["logit"])].tolist())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("gguf")
    ap.add_argument("--grammars", help="a folder of *.gbnf (default: llama.cpp's grammars/)")
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    folder = pathlib.Path(a.grammars) if a.grammars else llama_cpp_source() / "grammars"
    files = sorted(folder.glob("*.gbnf"))
    if not files:
        sys.exit(f"{folder}: no *.gbnf files")
    eos, special, toks = vocab(a.driver, a.gguf)
    n = len(toks)
    keep = np.array([not s and b"\0" not in t for s, t in zip(special, toks)])
    keep[eos] = True
    partial = np.array([incomplete_utf8(t) for t in toks])
    lm = LlamaMasks(a.gguf, n)

    class Tok:  # llguidance's view of the same vocabulary and tokenizer
        eos_token_id = eos
        bos_token_id = None
        tokens = toks
        special_token_ids = [i for i, s in enumerate(special) if s]

        def __call__(self, b):
            return lm.llm.tokenize(b, add_bos=False, special=False)
    lt = llg.LLTokenizer(llg.TokenizerWrapper(Tok()))
    rng = random.Random(a.seed)
    bad = steps = 0
    llg_agree = llg_differ = 0
    for f in files:
        text = f.read_text()
        label = f"grammars/{f.name}"
        for walk in range(a.walks):
            d = Driver(a.driver, a.gguf, "gbnf", text, eos)
            first = d.cmd("m")
            if first.startswith("ERR"):
                print(f"{label}: ours does not compile it: {first}")
                bad += 1
                d.close()
                break
            ls = lm.sampler(text)
            gm = llg.LLMatcher(lt, llg.LLMatcher.grammar_from_lark(gbnf_to_lark(text)))
            bm = lln.allocate_token_bitmask(1, lt.vocab_size)
            llg_ok = not gm.is_error()
            hist, line = [], first
            for step in range(a.steps):
                if step:
                    line = d.cmd("m")
                ours_all = set(map(int, line.split())) if line else set()
                ours = {i for i in ours_all if keep[i]}
                theirs = {i for i in lm.allowed(ls) if keep[i]}
                steps += 1
                whole_o = {i for i in ours if not partial[i]}
                whole_t = {i for i in theirs if not partial[i]}
                if whole_o != whole_t or not (theirs - whole_t) <= ours:
                    x = sorted(whole_o - whole_t)[:6]
                    y = sorted((whole_t - whole_o) | ((theirs - whole_t) - ours))[:6]
                    print(f"{label} walk {walk} step {step}: MISMATCH ours-only "
                          f"{[(i, toks[i]) for i in x]} llama.cpp-only {[(i, toks[i]) for i in y]}"
                          f" after {hist[-10:]}")
                    bad += 1
                    break
                if llg_ok:
                    lln.fill_next_token_bitmask(gm, bm)
                    bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:n]
                    lset = set(np.nonzero(bits.astype(bool) & keep)[0].tolist())
                    if lset != ours:
                        llg_ok = False
                        llg_differ += 1
                        print(f"{label} walk {walk} step {step}: llguidance differs "
                              f"(its lexer; ours agrees with llama.cpp): ours-only "
                              f"{[toks[i] for i in sorted(ours - lset)[:4]]} llguidance-only "
                              f"{[toks[i] for i in sorted(lset - ours)[:4]]}")
                cands = sorted(i for i in ours if not partial[i]) or sorted(ours)
                if not cands:
                    break
                t = rng.choice(cands)
                if t == eos:
                    break
                hist.append(toks[t])
                L.llama_sampler_accept(ls, t)
                if llg_ok and not gm.consume_token(t):
                    llg_ok = False
                    llg_differ += 1
                d.cmd(f"a {t}")
            if llg_ok:
                llg_agree += 1
            L.llama_sampler_free(ls)
            d.close()
    print(f"llama.cpp grammars: {len(files)} files, {steps} steps, {bad} mismatches against "
          f"llama.cpp's sampler; llguidance identical on {llg_agree} of "
          f"{llg_agree + llg_differ} walks")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
