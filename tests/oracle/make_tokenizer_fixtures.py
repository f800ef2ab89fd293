#!/usr/bin/env python3
"""Generate the tokenizer parity fixtures from the oracle (HF tokenizers).

    .venv-oracle/bin/python tests/oracle/make_tokenizer_fixtures.py [--out DIR] [NAME ...]

For each tokenizer (assets from scripts/fetch_assets.py) and each chunk of the
committed corpus (tests/data/tokenizer_corpus.txt.zst, cut at line breaks into
chunks of about 256 KiB), records the number of token IDs and the XXH3-128 of
the IDs (little-endian int32) in two modes:
  "hf":    HF encode(text, add_special_tokens=False) — added tokens recognised;
           deepinfer's DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED
  "plain": the same tokenizer without its added vocabulary — deepinfer's flags 0,
           how deepseek-recipe encodes text between special tokens
and the length and XXH3-128 of HF's decode of the "hf" IDs (the chunk itself
unless the vocabulary lacks some byte), plus short edge-case strings with their full IDs in every mode (add_special_tokens
too), and random ID sequences with HF's decode (skip_special_tokens False/True).
Writes tests/fixtures/tokenizer/NAME.json. Deterministic for a given corpus.
"""
import argparse
import json
import pathlib
import random
import struct
import subprocess
import sys

import xxhash

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_oracle  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/tokenizer_corpus.txt.zst"
CHUNK = 256 * 1024
TOKENIZERS = {
    "deepseek-v4": "deepseek-v4-tokenizer",
    "deepseek-v3": "deepseek-v3-tokenizer",
    "r1-distill-qwen": "r1-distill-qwen-7b-part0",
    "smollm2": "smollm2-135m-instruct",
}

EDGE_CASES = [
    "", " ", "  ", "\n", "\r\n", "\t\t x", "hello world", "Hello, world! 123 4567 89012",
    "don't I'M you'Re we'LL it'ſ", "a<think>b</think>c", "<｜begin▁of▁sentence｜>hi",
    "<｜User｜>x<｜Assistant｜>", "｜DSML｜｜｜ ‖ ｜", "中文字符和日本語のテキスト、カタカナ・ひらがな",
    "한국어 텍스트", "العربية", "עברית", "हिन्दी", "ไทย", "Ελληνικά", "Ёжик",
    "👨‍👩‍👧‍👦 👍🏽 🇫🇷 1️⃣ ❤️", "e\u0301 a\u0308 \u0915\u094d\u0937", "   \u3000\u00a0 x  \n\n  y",
    "１２３ ٣٤٥ ४५६", "x" * 3000, " " * 2000 + "end", "\x00\x01\x1f\x7f",
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "<tool_call>x</tool_call>",
]


def ids_digest(ids):
    return xxhash.xxh3_128_hexdigest(struct.pack(f"<{len(ids)}i", *ids))


def chunks_of(text_bytes):
    out, start = [], 0
    while start < len(text_bytes):
        end = min(start + CHUNK, len(text_bytes))
        if end < len(text_bytes):
            nl = text_bytes.rfind(b"\n", start, end)
            end = nl + 1 if nl > start else end
            while end < len(text_bytes) and (text_bytes[end] & 0xC0) == 0x80:
                end += 1  # never cut inside a character
        out.append((start, end - start))
        start = end
    return out


def asset_path(name):
    out = subprocess.run([sys.executable, str(ROOT / "scripts/fetch_assets.py"), name],
                         check=True, capture_output=True, text=True).stdout.split()
    return out[1]


def build(name, corpus):
    path = asset_path(TOKENIZERS[name])
    hf = tokenizer_oracle.load(path)
    plain = tokenizer_oracle.without_added_tokens(hf)
    chunks = []
    for offset, length in chunks_of(corpus):
        text = corpus[offset:offset + length].decode("utf-8")
        a = hf.encode(text, add_special_tokens=False).ids
        b = plain.encode(text, add_special_tokens=False).ids
        decoded = hf.decode(a, skip_special_tokens=False).encode("utf-8")
        chunks.append({"offset": offset, "length": length,
                       "hf": [len(a), ids_digest(a)], "plain": [len(b), ids_digest(b)],
                       "decode": [len(decoded), xxhash.xxh3_128_hexdigest(decoded)]})
    edges = []
    for text in EDGE_CASES:
        edges.append({"text": text,
                      "hf": hf.encode(text, add_special_tokens=False).ids,
                      "hf_add_special": hf.encode(text, add_special_tokens=True).ids,
                      "plain": plain.encode(text, add_special_tokens=False).ids})
    rng = random.Random(20261130)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    added = sorted(int(k) for k in hf.get_added_tokens_decoder())
    decodes = []
    for _ in range(300):
        ids = [rng.choice(added) if added and rng.random() < 0.1 else rng.randrange(vocab)
               for _ in range(rng.randint(1, 12))]
        ids = [i for i in ids if hf.id_to_token(i) is not None]
        decodes.append({"ids": ids, "text": hf.decode(ids, skip_special_tokens=False),
                        "text_skip_special": hf.decode(ids, skip_special_tokens=True)})
    return {"tokenizer": name, "asset": TOKENIZERS[name],
            "corpus_xxh3": xxhash.xxh3_128_hexdigest(corpus), "chunks": chunks,
            "edge_cases": edges, "decode": decodes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/tokenizer"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    corpus = subprocess.run(["zstd", "-dc", str(CORPUS)], check=True, capture_output=True).stdout
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or TOKENIZERS:
        fixture = build(name, corpus)
        (out / f"{name}.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=0) + "\n",
                                          encoding="utf-8")
        print(f"{name}: {len(fixture['chunks'])} chunks, "
              f"{sum(c['hf'][0] for c in fixture['chunks'])} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
