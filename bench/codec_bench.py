#!/usr/bin/env python3
"""Render + encode throughput: deepinfer's codec vs deepseek-recipe, one long agent
conversation (Chat Completions, tools, parallel tool calls, tool results,
reasoning history; >= 50k tokens), side by side in one run.

    .venv-oracle/bin/python bench/codec_bench.py BUILD_DIR [REPEATS]

Both take the same request text and produce the V4 prompt and its token IDs
(the outputs are compared first). Prints the time per request for each and the
ratio last.
"""
import ctypes
import json
import pathlib
import subprocess
import sys
import time

import deepseek_recipe as dr

ROOT = pathlib.Path(__file__).resolve().parent.parent


def conversation():
    words = ("the quick brown fox jumps over the lazy dog while 天气 data flows through "
             "café naïve 函数 pipelines and λ calculus ").split()
    tools = [{"type": "function", "function": {
        "name": f"tool_{k}", "description": f"Tool number {k} does " + " ".join(words[:12]),
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look up"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["query"]}}}
        for k in range(12)]
    messages = [{"role": "system", "content": "You are an agent. " * 40}]
    for turn in range(60):
        text = " ".join(words[(turn + i) % len(words)] for i in range(80))
        messages.append({"role": "user", "content": f"Step {turn}: {text}"})
        calls = [{"id": f"call_{turn}_{c}", "type": "function", "function": {
            "name": f"tool_{(turn + c) % 12}",
            "arguments": json.dumps({"query": text[:60], "limit": 10 + c})}} for c in range(2)]
        messages.append({"role": "assistant", "content": "Working on it.",
                         "reasoning_content": "I should call the tools. " * 8, "tool_calls": calls})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": ("result " + text) * 3})
        messages.append({"role": "assistant", "content": "Done with step %d. " % turn + text[:200],
                         "reasoning_content": "Summarise. " * 6})
    messages.append({"role": "user", "content": "Now finish."})
    return {"model": "DeepSeek-V4-Pro", "messages": messages, "tools": tools}


def best(repeats, fn):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    build = pathlib.Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    tok_path = subprocess.run([sys.executable, str(ROOT / "scripts/fetch_assets.py"),
                               "deepseek-v4-tokenizer"], check=True, capture_output=True,
                              text=True).stdout.split()[1]
    body = json.dumps(conversation(), ensure_ascii=False, separators=(",", ":")).encode()

    lib = ctypes.CDLL(str(build / "lib/libdeepinfer.so"))
    c_p = ctypes.c_void_p
    lib.di_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_codec_create.argtypes = [c_p, ctypes.c_int, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_codec_render.argtypes = [c_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_prompt_tokens.argtypes = [c_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                     ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(c_p)]
    lib.di_prompt_free.argtypes = [c_p]
    tok, codec = c_p(), c_p()
    assert lib.di_tokenizer_load(tok_path.encode(), ctypes.byref(tok), None) == 0
    assert lib.di_codec_create(tok, 1, ctypes.byref(codec), None) == 0

    def ours():
        prompt = c_p()
        assert lib.di_codec_render(codec, 1, body, len(body), ctypes.byref(prompt), None) == 0
        ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
        assert lib.di_prompt_tokens(prompt, ctypes.byref(ids), ctypes.byref(n), None) == 0
        out = ids[:n.value]
        lib.di_prompt_free(prompt)
        return out

    encoding = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(tok_path))

    def reference():
        conv = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
        return encoding.encode(conv.conversation)

    ours_s, ours_ids = best(repeats, ours)
    ref_s, ref_ids = best(repeats, reference)
    same = ours_ids == ref_ids
    print(f"request: {len(body)} bytes, {len(ref_ids)} tokens; best of {repeats}; one thread")
    print(f"  deepinfer        {ours_s * 1e3:8.2f} ms  ({len(ref_ids) / ours_s / 1e6:.2f} M tokens/s)")
    print(f"  deepseek-recipe  {ref_s * 1e3:8.2f} ms  ({len(ref_ids) / ref_s / 1e6:.2f} M tokens/s)")
    print(f"  token IDs identical: {same}")
    print(f"ratio: deepinfer/deepseek-recipe = {ref_s / ours_s:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
