#!/usr/bin/env python3
"""`deepinfer info` against independent readers: the gguf package (llama.cpp's
own Python GGUF library, gguf 0.19.0) for GGUF files — name, architecture,
training context, vocabulary size, chat template, parameter count and the
tensors, parameters and bytes of every stored format — and the safetensors
package with config.json for Hugging Face folders (architecture, parameters,
formats; fp8 block scales are not parameters). Prints ok:/FAIL: lines; exits 1
on a difference.

    check_model_info.py --cli build/release/examples/deepinfer FILE.gguf|FOLDER...
"""
import argparse
import collections
import json
import subprocess
import sys

import glob
import os

import gguf
from safetensors import safe_open


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    return v.tolist()[0]


def expected(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    formats = collections.OrderedDict()
    params = 0
    for t in r.tensors:
        name = t.tensor_type.name
        n = int(t.n_elements)
        f = formats.setdefault(name, {"tensors": 0, "parameters": 0, "bytes": 0})
        f["tensors"] += 1
        f["parameters"] += n
        f["bytes"] += int(t.n_bytes)
        params += n
    tokens = r.fields.get("tokenizer.ggml.tokens")
    return {
        "name": field(r, "general.name"),
        "architecture": arch,
        "training_context_length": field(r, f"{arch}.context_length"),
        "vocab_size": len(tokens.data) if tokens is not None else None,
        "chat_template": field(r, "tokenizer.chat_template"),
        "parameters": params,
        "formats": dict(formats),
    }


# (I64 / I32: integer tables such as DeepSeek-V4's tid2eid, counted as stored)
ST_NAMES = {"F32": "F32", "F16": "F16", "BF16": "BF16", "F8_E4M3": "FP8_E4M3", "I64": "I64",
            "I32": "I32", "I8": "I8"}
ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "I64": 8, "I32": 4, "I8": 1}


def expected_folder(path):
    formats = collections.OrderedDict()
    params = 0
    for shard in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with safe_open(shard, "np") as f:
            names = set(f.keys())
            for name in f.keys():
                # block scales are their weight's metadata: transformers'
                # weight_scale_inv, or DeepSeek's release "X.scale" beside "X.weight"
                if name.endswith("weight_scale_inv") or (
                        name.endswith(".scale") and name[:-len("scale")] + "weight" in names):
                    continue
                sl = f.get_slice(name)
                n = 1
                for d in sl.get_shape():
                    n *= d
                kind, nbytes = ST_NAMES[sl.get_dtype()], n * ST_BYTES[sl.get_dtype()]
                if kind == "I8" and name.endswith(".weight"):
                    # DeepSeek-V4's MXFP4 experts: two e2m1 codes a byte
                    kind, n = "MXFP4", 2 * n
                fmt = formats.setdefault(kind, {"tensors": 0, "parameters": 0, "bytes": 0})
                fmt["tensors"] += 1
                fmt["parameters"] += n
                fmt["bytes"] += nbytes
                params += n
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    return {"architecture": config["architectures"][0], "parameters": params,
            "formats": dict(formats)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    bad = 0
    for path in args.files:
        got = json.loads(subprocess.run([args.cli, "info", "--model", path], check=True,
                                        capture_output=True, text=True).stdout)
        want = expected_folder(path) if os.path.isdir(path) else expected(path)
        diffs = []
        for k, v in want.items():
            if k == "name" and v is None:
                continue  # no general.name: the file's name (not the reader's to say)
            if k == "vocab_size" and v is None:
                continue
            if got.get(k) != v:
                diffs.append(f"{k}: deepinfer {got.get(k)!r}, gguf {v!r}")
        if diffs:
            bad += 1
            print(f"FAIL: {path}: " + "; ".join(diffs))
        else:
            print(f"ok: {path}: {want['parameters']} parameters in "
                  + ", ".join(f"{k} x{v['tensors']}" for k, v in want["formats"].items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
