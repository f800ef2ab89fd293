#!/usr/bin/env python3
"""Output-side throughput: deepinfer's di_stream vs deepseek-recipe's
StreamProcessor on the same generated text, side by side in one run.

    .venv-oracle/bin/python bench/stream_bench.py BUILD_DIR [REPEATS]

A long agent turn (reasoning, an answer, 40 DSML tool calls with string and JSON
arguments; about 60k tokens of V4 text) is cut into the pieces a backend emits —
one per token, decoded with the V4 tokenizer — and pushed through each library
for each protocol; both run through Python (ctypes / PyO3), so per-push call
overhead is on both sides. The chunk streams are compared first (random call-id
suffixes and clocks blanked). Prints the time per turn for each and the ratio last.
"""
import ctypes
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import deepseek_recipe as dr

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "parity"))
import stream_lib as sl  # noqa: E402

TOK = str(next(p for p in [ROOT / ".cache/assets/deepseek-v4/tokenizer.json",
                           pathlib.Path.home() / ".cache/deepinfer/assets/deepseek-v4/tokenizer.json"]
               if p.exists()))
WORDS = ("the quick brown fox jumps over the lazy dog while 天气 data flows through "
         "café naïve 函数 pipelines and λ calculus 🎉").split()


def generated_text():
    reasoning = " ".join(WORDS[i % len(WORDS)] for i in range(6000))
    answer = "\n".join(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(40)) for i in range(60))
    calls = []
    for k in range(40):
        calls.append('<｜DSML｜invoke name="tool_%d">\n'
                     '<｜DSML｜parameter name="query" string="true">%s "quoted" \\ path/%d</｜DSML｜parameter>\n'
                     '<｜DSML｜parameter name="options" string="false">{"limit": %d, "tags": ["a", "b"]}</｜DSML｜parameter>\n'
                     '</｜DSML｜invoke>\n' % (k % 8, " ".join(WORDS[:30]), k, k))
    return reasoning + "</think>" + answer + "\n\n<｜DSML｜tool_calls>\n" + "".join(calls) + "</｜DSML｜tool_calls>"


def bodies():
    fn = {"type": "object", "properties": {"query": {"type": "string"}, "options": {"type": "object"}}}
    return {
        "chat": {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "go"}], "stream": True,
                 "tools": [{"type": "function", "function": {"name": f"tool_{k}", "parameters": fn}} for k in range(8)]},
        "messages": {"model": "DeepSeek-V4-Pro", "max_tokens": 100000, "messages": [{"role": "user", "content": "go"}],
                     "tools": [{"name": f"tool_{k}", "input_schema": fn} for k in range(8)]},
        "responses": {"model": "DeepSeek-V4-Pro", "input": "go",
                      "tools": [{"type": "function", "name": f"tool_{k}", "parameters": fn} for k in range(8)]},
    }


def norm(s):
    s = re.sub(r"call_(\d+)_(ET_)?[0-9A-Za-z]{20}[0-9]{4}", r"call_\1_X", s)
    return re.sub(r'"(created|created_at|completed_at)":\d+', r'"\1":0', s)


REQ = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest, "responses": dr.ResponsesRequest}
RESP = {"chat": dr.ChatCompletionResponse, "messages": dr.MessagesResponse, "responses": dr.ResponsesResponse}


def run_reference(proto, body, pieces, tok):
    cr = REQ[proto](json.dumps(body)).convert(dr.ConversionOptions())
    sp = dr.StreamProcessor(REQ[proto].chunk_generator(cr, "bench", body["model"]), cr.parsing_options, tok)
    out = [c.to_json() for c in sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=100)))]
    for p in pieces:
        out += [c.to_json() for c in sp.push(dr.InferenceChunk.text(p, 1))]
    out += [c.to_json() for c in sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))]
    return out


def run_deepinfer(lib, ctok, codec, proto, body, pieces):
    calls, _ = sl.run_case(lib, ctok, codec, proto, json.dumps(body),
                           [{"text": p, "tokens": 1} for p in pieces], "stop", 100, 0,
                           response_id="bench")
    return [j for c in calls for _, j in c if j is not None]


def main():
    build = pathlib.Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    lib = sl.load(str(build / "lib" / "libdeepinfer.so"))
    ctok, codec = sl.make_codec(lib, TOK)
    tok = dr.Tokenizer.from_file(TOK)
    text = generated_text()
    ids = tok.encode(text)
    # one piece per token, cut on character boundaries as a detokenizer emits them
    pieces, buf = [], b""
    raw = text.encode()
    pos = 0
    for i in range(len(ids)):
        step = max(1, len(raw) // len(ids))
        end = min(len(raw), pos + step) if i < len(ids) - 1 else len(raw)
        while end < len(raw) and (raw[end] & 0xC0) == 0x80:
            end += 1
        pieces.append(raw[pos:end].decode())
        pos = end
    pieces = [p for p in pieces if p]
    print(f"generated turn: {len(raw)} bytes, {len(ids)} tokens, {len(pieces)} pushes")
    total_ref = total_di = total_c = 0.0
    for proto, body in bodies().items():
        a = [norm(x) for x in run_reference(proto, body, pieces, tok)]
        b = [norm(x) for x in run_deepinfer(lib, ctok, codec, proto, body, pieces)]
        if a != b:
            k = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if any(
                x != y for x, y in zip(a, b)) else min(len(a), len(b))
            sys.exit(f"{proto}: outputs differ at chunk {k} of {len(a)}/{len(b)}")
        best_ref = best_di = float("inf")
        for _ in range(repeats):
            t = time.perf_counter(); run_reference(proto, body, pieces, tok); best_ref = min(best_ref, time.perf_counter() - t)
            t = time.perf_counter(); run_deepinfer(lib, ctok, codec, proto, body, pieces); best_di = min(best_di, time.perf_counter() - t)
        with tempfile.TemporaryDirectory() as tmp:
            (pathlib.Path(tmp) / "req.json").write_text(json.dumps(body))
            (pathlib.Path(tmp) / "pieces").write_bytes(b"\0".join(p.encode() for p in pieces))
            out = subprocess.run([str(build / "bench" / "stream_push"), TOK, proto,
                                  f"{tmp}/req.json", f"{tmp}/pieces", str(repeats)],
                                 check=True, capture_output=True, text=True).stdout
        best_c = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        total_ref += best_ref
        total_di += best_di
        total_c += best_c
        print(f"{proto:9s}: {len(a)} chunks identical; deepseek-recipe (Python) {best_ref * 1e3:6.1f} ms, "
              f"deepinfer via ctypes {best_di * 1e3:6.1f} ms ({best_ref / best_di:.2f}x), "
              f"deepinfer from C {best_c * 1e3:6.1f} ms ({best_ref / best_c:.2f}x)")
    print(f"all protocols, per turn: deepseek-recipe {total_ref * 1e3:.1f} ms; deepinfer from C "
          f"{total_c * 1e3:.1f} ms, through ctypes {total_di * 1e3:.1f} ms; "
          f"ratio {total_ref / total_c:.2f}x (from C), {total_ref / total_di:.2f}x (ctypes)")


if __name__ == "__main__":
    main()
