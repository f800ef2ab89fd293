#!/usr/bin/env python3
"""DeepSeek-V4.1 Engram's metadata, from DeepSeek's own code, as fixtures for
tests/unit/test_engram.c (lib/model/engram.c, lib/tokenizer/compressed_vocab.c):

  deepinfer 0.1.0 (PyPI sdist)     model_executor/models/v4_modules/engram_metadata.py:
                                   CompressedVocabulary (HF tokenizers' normalizers over
                                   every token of tokenizer.json), EngramLayout.from_cfg
                                   (sympy's nextprime, unique across tables),
                                   NgramHashMapping (NumPy's default_rng multipliers)
  tile-kernels 2.1.0 (PyPI wheel)  tile_kernels/torch/engram.py: make_offsets,
                                   engram_hash_ref (the rows a token's n-grams pick)

Their classes and functions are read out of their files (check_dsv41_ops.py's
fetch: the packages need GPUs to import) and run on the CPU. Also NumPy's
default_rng(seed).integers itself and sympy.nextprime on edge cases.

    make_engram_fixtures.py [--check] [--out FILE]   (model oracle venv)

--check regenerates and compares with the committed fixture (exit 1, naming the
part, when they differ). Needs the fetched tokenizers (scripts/fetch_assets.py).
"""
import __future__
import argparse
import ast
import dataclasses
import functools
import json
import pathlib
import subprocess
import sys
import types

import numpy as np
import sympy
import torch
from tokenizers import Regex, Tokenizer, normalizers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_dsv41_ops import fetch, functions  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/model/engram/engram.json"


class AttrDict(dict):
    __getattr__ = dict.__getitem__


@functools.lru_cache(maxsize=None)
def deepinfer_engram():
    """engram_metadata.py's classes, executed with its imports supplied (tile_kernels
    by the wheel's torch/engram.py)."""
    path = fetch("deepinfer") / "deepinfer/model_executor/models/v4_modules/engram_metadata.py"
    tk_engram = functions(fetch("tile-kernels") / "tile_kernels/torch/engram.py",
                          ["make_offsets", "engram_hash_ref"])
    tile_kernels = types.SimpleNamespace(torch=types.SimpleNamespace(
        engram=types.SimpleNamespace(make_offsets=tk_engram["make_offsets"])))
    mod = types.ModuleType("engram_metadata")  # (dataclass looks its module up)
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    ns.update({"np": np, "torch": torch, "nextprime": sympy.nextprime, "Regex": Regex,
          "Tokenizer": Tokenizer, "normalizers": normalizers, "AttrDict": AttrDict,
          "dataclass": dataclasses.dataclass, "tile_kernels": tile_kernels})
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            exec(compile(ast.Module([node], []), str(path), "exec",
                         flags=__future__.annotations.compiler_flag, dont_inherit=True), ns)
    return ns, tk_engram["engram_hash_ref"]



# (seed, bound): the multipliers' seeds for layers 0, 1, 7, 42; bounds from a
# compressed vocabulary of 99,092 (V4's), 300 (a tiny model's), 1 and past 2^32
NUMPY_CASES = [(0, 46542547906384), (10007, 46542547906384), (70049, 15372286728091293),
               (420294, 4611686018427387903), (1, 4294967297), (2**32 + 5, 9223372036854775807),
               (123456789, 5000000000000000000)]
PRIME_CASES = [0, 1, 2, 3, 89, 96, 97, 1000, 65536, 99091, 2**31 - 2, 2**31 - 1, 4294967291,
               10**12, 2**61 - 2]
# layouts: (engram layer ids, max n-gram, table vocab per n-gram size, heads, vocab)
LAYOUTS = [([1, 3], 3, [97, 97], 4, 300),
           ([2], 4, [509, 257, 1021], 2, 99092),
           ([0, 5, 9], 2, [100003], 8, 129280)]


def asset_dir():
    """Where scripts/fetch_assets.py keeps the fetched tokenizers and models."""
    return pathlib.Path(subprocess.run([sys.executable, str(ROOT / "scripts/fetch_assets.py"),
                                        "--asset-dir"], capture_output=True, text=True,
                                       check=True).stdout.strip())


def layout_fixture(ns, hash_ref, layer_ids, max_ngram, table_vocab, heads, vocab):
    cfg = AttrDict(engram_max_ngram_size=max_ngram, engram_layer_ids=layer_ids,
                   vocab_size=table_vocab, n_embed_per_ngram=[heads * 8] * (max_ngram - 1),
                   n_head_per_ngram=[heads] * (max_ngram - 1), enable_tokenizer_compression=False,
                   tokenizer_vocab_size=vocab)
    m = ns["NgramHashMapping"](cfg, device="cpu")
    g = torch.Generator().manual_seed(len(layer_ids) * 100 + max_ngram)
    ids = torch.randint(0, vocab, (12, max_ngram), generator=g, dtype=torch.int32)
    ids[0] = vocab - 1
    ids[1] = 0
    rows = hash_ref(ids, m.ngram_multipliers, m.ngram_vocab_sizes, m.ngram_offsets)
    return {"layer_ids": layer_ids, "max_ngram": max_ngram, "table_vocab": table_vocab,
            "n_heads": heads, "vocab": vocab,
            "multipliers": m.ngram_multipliers.tolist(),
            "table_rows": m.ngram_vocab_sizes.reshape(len(layer_ids), -1).tolist(),
            "offsets": m.ngram_offsets.tolist(),
            "ids": ids.tolist(), "rows": rows.tolist()}


def compressed_fixture(ns, name, assets):
    path = assets / name / "tokenizer.json"
    v = ns["CompressedVocabulary"](str(path))
    # the tokens that take an earlier key's ID; every other token opens the next ID
    repeats, fresh = [], 0
    for i, new in enumerate(v.old2new):
        if new == fresh:
            fresh += 1
        else:
            repeats.append([i, new])
    return {"tokenizer": name, "n_vocab": len(v.old2new), "n_keys": len(v), "repeats": repeats}


def crafted_fixtures(ns, assets):
    """Two tokenizers cut from DeepSeek-V4's: its first 300 tokens and an added token
    at 310 (IDs 300-309 holes: DeepInfer maps range(get_vocab_size()), 301 IDs), and
    the same with the pad token renamed (DeepInfer refuses it)."""
    import tempfile
    t = json.loads((assets / "deepseek-v4" / "tokenizer.json").read_text())
    keep = {k: i for k, i in t["model"]["vocab"].items() if i < 300}
    t["model"]["vocab"] = keep
    t["model"]["merges"] = [m for m in t["model"]["merges"]
                            if all(p in keep for p in m.split(" ")) and m.replace(" ", "") in keep]
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < 300] + [
        {"id": 310, "content": "<hole>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    out = []
    for name in ("holes", "no_pad"):
        if name == "no_pad":
            pad = next(k for k, i in keep.items() if i == 2)
            keep["<pad>"] = keep.pop(pad)
            t["added_tokens"] = [dict(a, content="<pad>") if a["id"] == 2 else a
                                 for a in t["added_tokens"]]
        text = json.dumps(t, ensure_ascii=False)
        with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            try:
                v = ns["CompressedVocabulary"](f.name)
                out.append({"name": name, "tokenizer": text, "old2new": v.old2new, "n_keys": len(v)})
            except AssertionError as e:
                out.append({"name": name, "tokenizer": text, "error": str(e)})
    return out


def build(assets):
    ns, hash_ref = deepinfer_engram()
    return {
        "source": "tests/oracle/make_engram_fixtures.py: deepinfer 0.1.0 engram_metadata.py, "
                  "tile-kernels 2.1.0 engram_hash_ref, numpy, sympy",
        "numpy": [{"seed": s, "bound": b,
                   "values": np.random.default_rng(s).integers(0, b, size=5, dtype=np.int64).tolist()}
                  for s, b in NUMPY_CASES],
        "next_prime": [[n, int(sympy.nextprime(n))] for n in PRIME_CASES],
        "layouts": [layout_fixture(ns, hash_ref, *c) for c in LAYOUTS],
        "compressed": [compressed_fixture(ns, n, assets) for n in ("deepseek-v4",)],
        "crafted": crafted_fixtures(ns, assets),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", type=pathlib.Path, default=FIXTURE)
    args = ap.parse_args()
    got = build(asset_dir())
    if args.check:
        want = json.loads(FIXTURE.read_text())
        bad = [k for k in got if got[k] != want.get(k)]
        for k in bad:
            print(f"FAIL: engram fixture part {k!r} differs from the live oracle")
        if bad:
            return 1
        print(f"ok: engram fixtures reproduced ({len(got['layouts'])} layouts, "
              f"{sum(len(c['repeats']) for c in got['compressed'])} shared compressed IDs)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(got, separators=(",", ":")) + "\n")
    print(f"ok: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
