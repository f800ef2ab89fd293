#!/usr/bin/env python3
"""Single-thread encode throughput: deepinfer vs HF tokenizers vs deepseek-recipe,
on the same corpus and tokenizer, in one run. Prints MB/s for each and the
ratios last.

    .venv-oracle/bin/python bench/tokenizer_bench.py BUILD_DIR [TOKENIZER] [REPEATS]

BUILD_DIR holds bench/tokenizer_encode (cmake builds it). TOKENIZER defaults to
the DeepSeek V4 tokenizer.json (scripts/fetch_assets.py). The corpus is
tests/data/tokenizer_corpus.txt.zst, cut at line breaks into chunks of about
4 KiB (a prompt or a document) and, in a second pass, 256 KiB (bulk text); every
encoder gets the same chunks and must produce the same number of tokens.
HF runs with RAYON_NUM_THREADS=1 (set before import), so all three use one thread.
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import deepseek_recipe  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/oracle"))
import tokenizer_oracle  # noqa: E402  (HF tokenizers; a .gguf becomes its tokenizer.json)
CHUNK_SIZES = (4 * 1024, 256 * 1024)


def chunks_of(data, chunk):
    out, start = [], 0
    while start < len(data):
        end = min(start + chunk, len(data))
        if end < len(data):
            nl = data.rfind(b"\n", start, end)
            end = nl + 1 if nl >= start and nl + 1 > start else end
            while end < len(data) and (data[end] & 0xC0) == 0x80:
                end += 1
        out.append(data[start:end].decode("utf-8"))
        start = end
    return out


def best_of(repeats, fn):
    best, result = 1e30, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main():
    build = pathlib.Path(sys.argv[1])
    tok_path = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else subprocess.run(
        [sys.executable, str(ROOT / "scripts/fetch_assets.py"), "deepseek-v4-tokenizer"],
        check=True, capture_output=True, text=True).stdout.split()[1]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    data = subprocess.run(["zstd", "-dc", str(ROOT / "tests/data/tokenizer_corpus.txt.zst")],
                          check=True, capture_output=True).stdout
    mb = len(data) / 1e6
    hf = tokenizer_oracle.load(tok_path)
    try:
        dr = deepseek_recipe.Tokenizer.from_file(tok_path)
    except Exception as e:  # a non-DeepSeek tokenizer the recipe cannot load
        dr = None
        print(f"deepseek-recipe: skipped ({e})")
    ratios = []
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(data)
        f.flush()
        for chunk in CHUNK_SIZES:
            chunks = chunks_of(data, chunk)
            out = subprocess.run([str(build / "bench/tokenizer_encode"), tok_path, f.name,
                                  str(repeats), str(chunk)],
                                 check=True, capture_output=True, text=True).stdout
            fields = dict(kv.split("=") for kv in out.split())
            di_s, di_tokens = float(fields["seconds"]), int(fields["tokens"])
            rows = [("deepinfer", di_s, di_tokens)]
            s, n = best_of(repeats, lambda: sum(
                len(hf.encode(c, add_special_tokens=False).ids) for c in chunks))
            rows.append(("HF tokenizers", s, n))
            if dr is not None:
                s, n = best_of(repeats, lambda: sum(len(dr.encode(c)) for c in chunks))
                rows.append(("deepseek-recipe", s, n))
            print(f"corpus: {mb:.1f} MB in {len(chunks)} chunks of ~{chunk // 1024} KiB; "
                  f"tokenizer: {tok_path}; one thread; best of {repeats}")
            for name, s, n in rows:
                print(f"  {name:16s} {mb / s:8.2f} MB/s  {n / s / 1e6:6.2f} M tokens/s  "
                      f"({n} tokens, {s:.3f} s)")
            if any(n != di_tokens for _, _, n in rows):
                print("  WARNING: token counts differ between encoders")
            ratios += [f"{chunk // 1024} KiB deepinfer/{name} = {s / di_s:.2f}x"
                       for name, s, _ in rows[1:]]
    print("ratio: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
