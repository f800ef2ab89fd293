#!/usr/bin/env python3
"""SmolLM2 token requests constrained by JSON schemas from grammar_parity.py's
seeded generator: every output that finished (the end token) must validate
with the `jsonschema` package; one cut by max_tokens must be a prefix the
grammar allowed (not checked here beyond its status).

usage: grammar_e2e.py <grammar_e2e> <SmolLM2 .gguf> [--schemas N] [--seed S]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grammar_parity import gen_root  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("model")
    ap.add_argument("--schemas", type=int, default=8)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    schemas = [gen_root(rng) for _ in range(a.schemas)]
    d = tempfile.mkdtemp()
    paths = []
    for i, s in enumerate(schemas):
        p = os.path.join(d, f"s{i}.json")
        with open(p, "w") as f:
            json.dump(s, f)
        paths.append(p)
    r = subprocess.run([a.exe, a.model] + paths, capture_output=True, text=True, check=True)
    lines = r.stdout.split("\n")
    for line in lines:
        if "submit error" in line:
            print(line)
    body = "\n".join(line for line in lines if "submit error" not in line)
    parts = body.split("\n\x1e\n")
    valid = cut = bad = 0
    for s, part in zip(schemas, parts):
        head, _, text = part.partition("\n")
        fields = head.split(" ", 3)
        if fields[2] != "0":
            print("FAILED request:", head, json.dumps(s)[:300])
            bad += 1
            continue
        if fields[1] == "length":
            cut += 1
            continue
        try:
            jsonschema.validate(json.loads(text), s)
            valid += 1
        except Exception as ex:  # noqa: BLE001
            print("INVALID:", repr(text[:300]), "\n  schema:", json.dumps(s)[:300], "\n ", ex)
            bad += 1
    print(f"grammar e2e: {valid} outputs valid, {cut} cut by max_tokens, {bad} bad, of "
          f"{len(schemas)}")
    return 0 if bad == 0 and valid > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
