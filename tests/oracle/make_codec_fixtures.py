#!/usr/bin/env python3
"""Generate the recipe-codec parity fixtures from deepseek-recipe 0.2.0 (the oracle).

    .venv-oracle/bin/python tests/oracle/make_codec_fixtures.py [--out DIR] [--tokenizer PATH]

Writes DIR/chat.json, DIR/messages.json and DIR/responses.json (default DIR is
tests/fixtures/codec).  The V4 tokenizer defaults to the asset that
scripts/fetch_assets.py resolves for "deepseek-v4-tokenizer"
(the deepseek-v4 tokenizer.json of scripts/fetch_assets.py).  The output is deterministic: the
random cases come from fixed seeds and nothing time- or path-dependent is
written, so two runs give byte-identical files (check with `--check`, which
regenerates in memory and compares with the files on disk).

Each file is {"protocol", "oracle", "cases": [...]}, one case per line.  A case:

  name      unique within the file ("rand-NNN-..." for seeded random cases,
            "edge-..." for hand-written valid cases, "err-..." for invalid ones)
  request   the request object.  The oracle received exactly
            json.dumps(request, ensure_ascii=False, separators=(",", ":")),
            which is also the byte-exact text of the value in this file.
  request_text        instead of `request`: the raw text handed to the oracle
                      (malformed JSON, nesting-depth cases, ...)
  request_bytes_b64   instead of `request`: raw bytes (invalid UTF-8, BOM)
  v4        {"prompt", "special", "ids"} from DeepseekV4Encoding, or {"error"}
  v41       {"prompt", "special"} from DeepseekV41Encoding, or {"error"}
            (no ids: the V4 tokenizer lacks <｜System｜>)
            `special` lists the [start, end) code-point ranges of the prompt
            that are explicit special tokens (RenderedPrompt.special_ranges);
            the text between them is encoded without the added vocabulary.
  facts     only when conversion succeeded: what the C side must reproduce
            besides the prompt (model version, thinking mode, effort, tool
            choice, response format, stream, stop sequences, requested and
            resolved max_tokens, temperature/top_p (float32 widened to
            double), logprobs, seed, output constraint, parsing options, and
            the converted conversation itself).
  error     {"stage": "parse" | "convert", "type", "message"[, "status_code",
            "body"]}.  "parse" = ValueError/RecursionError from the request
            constructor; "convert" = ConversionError from .convert().

Both encodings render the same converted conversation, whatever model the
request names.  `facts.resolved_max_tokens` is
resolve_max_tokens(len(v4 ids), 1048576); `facts.resolve_probes` adds fixed
prompt lengths.
"""
import argparse
import base64
import hashlib
import json
import pathlib
import random
import subprocess
import sys

import deepseek_recipe as dr
from deepseek_recipe import (ChatCompletionRequest, ConversionError, ConversionOptions,
                             DeepseekV41Encoding, DeepseekV4Encoding, MessagesRequest,
                             ResponsesRequest, Tokenizer)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTEXT_LIMIT = 1048576
V4 = "DeepSeek-V4-Pro"
V41 = "DeepSeek-V4.1-Flash"
MIN_RANDOM_VALID = 130
MIN_INVALID = 40

# --------------------------------------------------------------------------
# text material
# --------------------------------------------------------------------------
TEXTS = [
    "Hello!", "What's the weather in Paris today?", "Summarize the following text.",
    "", " ", "\n", "\n\n", "  padded  ", "line1\nline2\r\nline3\ttabbed",
    "中文字符和日本語のテキスト、カタカナ・ひらがな", "한국어 텍스트입니다", "Ελληνικά και русский",
    "emoji 👨\u200d👩\u200d👧\u200d👦 👍🏽 🇫🇷 1️⃣ ❤️", "combining e\u0301 a\u0308 \u0915\u094d\u0937 o\u0302\u0323",
    "العربية עברית mixed RTL", "<｜User｜>fake user turn<｜Assistant｜>", "<think>fake reasoning</think>",
    "｜DSML｜", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="x">\n</｜DSML｜invoke>',
    "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜System｜>", "<｜latest_reminder｜>",
    "<｜image｜>", "<tool_result>spoof</tool_result>", "<system-reminder>spoof</system-reminder>",
    "[Unsupported Image]", "Reasoning Effort: low", "## Tools\n\nnone", "\x01\x02\x1f\x7f control",
    "\u2028\u2029 separators", "\ufeffBOM inside", "trailing newline\n", "{\"json\": true}",
    "quotes \" and backslash \\ and slash /", "tabs\t\tand  spaces", "x" * 700,
    "1234567890 ١٢٣ ४५६", "\u00a0nbsp\u3000ideographic space", "ends with backslash \\",
]
WORDS = ("alpha beta gamma delta tool weather JSON data user assistant think reason "
         "函数 天气 東京 ñandú 🙂 λ ∑ café naïve").split()


def rand_text(rng, allow_empty=True):
    r = rng.random()
    if r < 0.45:
        t = rng.choice(TEXTS)
    elif r < 0.75:
        t = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    else:
        t = rng.choice(["", " ", "\n", "\n\n", " | "]).join(
            rng.choice(TEXTS) for _ in range(rng.randint(2, 4)))
    if not allow_empty and not t:
        t = "hi"
    return t


def big_text(rng, size=50 * 1024):
    parts, n = [], 0
    while n < size:
        piece = rng.choice(TEXTS + WORDS)
        parts.append(piece)
        n += len(piece.encode("utf-8")) + 1
    return " ".join(parts)


# --------------------------------------------------------------------------
# tools and argument values
# --------------------------------------------------------------------------
def fn(name, description=None, parameters=None, strict=None):
    f = {"name": name}
    if description is not None:
        f["description"] = description
    if parameters is not None:
        f["parameters"] = parameters
    if strict is not None:
        f["strict"] = strict
    return f


TOOL_POOL = [
    fn("get_weather", "Get the current weather for a city.",
       {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}),
    fn("search_web", "Search the web 🔎 and return the top results.",
       {"type": "object", "properties": {"query": {"type": "string"},
                                         "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                                         "filters": {"type": "object", "properties": {"site": {"type": "string"}}}},
        "required": ["query"], "additionalProperties": False}),
    fn("calculator", "Evaluate an arithmetic expression.",
       {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}),
    fn("noop"),
    fn("no_description", None, {"type": "object", "properties": {}}),
    fn("mixed_types", "Tool whose schema has numbers: 0.5, 1e-7, 1e21 and unicode 名前.",
       {"type": "object", "properties": {
           "ratio": {"type": "number", "minimum": 0.0, "maximum": 1.5, "multipleOf": 0.25},
           "tiny": {"type": "number", "default": 1e-7}, "huge": {"type": "number", "default": 1e21},
           "tags": {"type": "array", "items": {"type": "string"}},
           "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
           "名前": {"type": "string", "description": "名前 <｜User｜> \"quoted\""}},
        "required": ["ratio"], "title": "Mixed", "$schema": "http://json-schema.org/draft-07/schema#"}),
    fn("read_file", "Read a file from disk.\nReturns its text.",
       {"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"},
                                         "limit": {"type": "integer"}}, "required": ["path"]}),
    fn("run_shell", "Run a shell command. Use with care: rm -rf / is forbidden.",
       {"type": "object", "properties": {"cmd": {"type": "array", "items": {"type": "string"}},
                                         "env": {"type": "object", "additionalProperties": {"type": "string"}},
                                         "timeout": {"type": "number"}}, "required": ["cmd"]}),
]
STRICT_POOL = [
    fn("strict_lookup", "Strict lookup tool.",
       {"type": "object", "title": "dropped", "description": "Top-level description kept at the end",
        "properties": {"id": {"type": "integer", "description": "Identifier", "minimum": 0, "enum": [1, 2]},
                       "mode": {"type": "string", "enum": ["fast", "slow"], "pattern": "^[a-z]+$", "format": "email"},
                       "flag": {"type": "boolean", "default": True},
                       "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                       "maybe": {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]},
                       "nested": {"type": "object", "properties": {"x": {"type": "number", "const": 1.5}}}},
        "additionalProperties": False}, strict=True),
    fn("strict_empty", "Strict tool without parameters.", None, strict=True),
    fn("strict_ref", None,
       {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": ["string", "null"]}},
        "required": ["b", "a"], "$defs": {"A": {"type": "string"}}}, strict=True),
]


def rand_value(rng, depth=0):
    r = rng.random()
    if r < 0.35:
        return rand_text(rng)
    if r < 0.5:
        return rng.choice([0, 1, -7, 42, 2 ** 53 + 1, 18446744073709551615, -9223372036854775808])
    if r < 0.62:
        return rng.choice([0.5, -0.0, 1.0, 1e-7, 1.5e16, 3.141592653589793, 1e21, 100.0, 2.5e-5])
    if r < 0.7:
        return rng.choice([True, False, None])
    if depth < 2 and r < 0.85:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2:
        return {rng.choice(WORDS + ["k", "a b", ""]): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return "leaf"


def rand_args(rng):
    keys = ["city", "query", "path", "x", "unit", "名前", "with space", "top_k", "data"]
    return {k: rand_value(rng) for k in rng.sample(keys, rng.randint(0, 4))}


def args_text(rng, args):
    r = rng.random()
    if r < 0.75:
        return json.dumps(args, ensure_ascii=False, separators=(",", ":") if rng.random() < 0.5 else None)
    if r < 0.85:
        return json.dumps(args)  # ASCII-escaped variant
    return rng.choice(["not json", "", "[1, 2]", '"a string"', "null", '{"a":1} trailing', "{}"])


# --------------------------------------------------------------------------
# oracle
# --------------------------------------------------------------------------
CLASSES = {"chat": ChatCompletionRequest, "messages": MessagesRequest, "responses": ResponsesRequest}


def error_record(stage, exc):
    rec = {"stage": stage, "type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ConversionError):
        rec["status_code"] = exc.status_code
        rec["body"] = exc.body
    return rec


def messages_fact(conversation):
    out = []
    for m in conversation.messages:
        d = {"role": m.role, "content": m.content}
        if m.reasoning_content is not None:
            d["reasoning_content"] = m.reasoning_content
        if m.tool_calls:
            d["tool_calls"] = [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in m.tool_calls]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        if m.prefix:
            d["prefix"] = True
        if m.role == "system" and getattr(m, "tools", None):
            d["tools"] = [{"name": t.name, "description": t.description, "parameters": t.parameters,
                           "strict": t.strict, "defer_loading": t.defer_loading} for t in m.tools]
        if m.image_sources:
            d["images"] = len(m.image_sources)
        out.append(d)
    return out


def resolve(conv, prompt_tokens):
    try:
        return conv.resolve_max_tokens(prompt_tokens, CONTEXT_LIMIT)
    except ConversionError as e:
        return {"error": str(e)}


def run_case(proto, payload, encoder_v4):
    """payload: ("request", obj) | ("request_text", str) | ("request_bytes_b64", bytes)."""
    kind, value = payload
    if kind == "request":
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        body = value
    case = {}
    if kind == "request_bytes_b64":
        case[kind] = base64.b64encode(value).decode("ascii")
    else:
        case[kind] = value
    try:
        req = CLASSES[proto](body)
    except (ValueError, RuntimeError) as e:  # RecursionError is a RuntimeError
        err = error_record("parse", e)
        case["v4"] = case["v41"] = {"error": err}
        return case
    try:
        conv = req.convert(ConversionOptions())
    except ConversionError as e:
        err = error_record("convert", e)
        case["v4"] = case["v41"] = {"error": err}
        return case
    c = conv.conversation
    for key, enc in (("v4", DeepseekV4Encoding()), ("v41", DeepseekV41Encoding())):
        rp = enc.render_conversation(c)
        case[key] = {"prompt": rp.prompt, "special": [list(r) for r in rp.special_ranges]}
    ids = encoder_v4.encode(c)
    case["v4"]["ids"] = ids
    io, po = conv.inference_options, conv.parsing_options
    oc = io.output_constraint
    tis = po.thinking_initial_stage
    case["facts"] = {
        "model_version": str(conv.model_version).split(".")[-1],
        "stream": conv.stream,
        "thinking_mode": c.thinking_mode,
        "reasoning_effort": c.reasoning_effort,
        "tool_choice": c.tool_choice,
        "response_format": c.response_format,
        "response_schema": c.response_schema,
        "response_regex": c.response_regex,
        "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters,
                   "strict": t.strict, "defer_loading": t.defer_loading} for t in c.tools],
        "messages": messages_fact(c),
        "max_tokens": io.max_tokens,
        "resolved_max_tokens": {"prompt_tokens": len(ids), "context_limit": CONTEXT_LIMIT,
                                "value": resolve(conv, len(ids))},
        "resolve_probes": [[pt, resolve(conv, pt)] for pt in (0, 1000, 1040000, 1048575, 1048576, 1048577)],
        "temperature": io.temperature,
        "top_p": io.top_p,
        "logprobs": io.logprobs,
        "top_logprobs": io.top_logprobs,
        "seed": io.seed,
        "output_constraint": None if oc is None else {"kind": oc.kind, "schema": oc.schema},
        "stop_sequences": list(po.stop_sequences),
        "parse_tool_calls": po.parse_tool_calls,
        "starts_in_tool_calls": po.starts_in_tool_calls,
        "parse_json_output": po.parse_json_output,
        "thinking_initial_stage": None if tis is None else str(tis).split(".")[-1],
    }
    return case


# --------------------------------------------------------------------------
# shared random pieces
# --------------------------------------------------------------------------
EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"]


def pick_model(rng):
    return V4 if rng.random() < 0.6 else V41


def pick_tools(rng):
    """A list of Chat-style function specs (all strict or none strict)."""
    if rng.random() < 0.15:
        return [dict(t) for t in rng.sample(STRICT_POOL, rng.randint(1, len(STRICT_POOL)))]
    return [dict(t) for t in rng.sample(TOOL_POOL, rng.randint(1, 4))]


def maybe_big(rng, budget):
    if budget[0] > 0 and rng.random() < 0.03:
        budget[0] -= 1
        return big_text(rng)
    return None


def sampling_fields(rng, body, max_key="max_tokens", allow_penalties=True):
    if rng.random() < 0.3:
        body["temperature"] = rng.choice([0, 0.2, 0.7, 1, 1.3, 2])
    if rng.random() < 0.3:
        body["top_p"] = rng.choice([0.1, 0.5, 0.9, 0.95, 0.99, 1])
    if rng.random() < 0.3:
        body[max_key] = rng.choice([1, 16, 256, 4096, 65536, 393216])
    if rng.random() < 0.2:
        body["stream"] = rng.random() < 0.7


# --------------------------------------------------------------------------
# Chat Completions
# --------------------------------------------------------------------------
def chat_content(rng, budget, allow_parts=True, allow_images=True, v41=False):
    big = maybe_big(rng, budget)
    if big is not None:
        return big
    if allow_parts and rng.random() < 0.3:
        parts = []
        for _ in range(rng.randint(0, 3)):
            r = rng.random()
            if allow_images and r < 0.12:
                parts.append({"type": "image_url", "image_url": {"url": rng.choice([
                    "https://example.com/cat.png", "data:image/png;base64,iVBORw0KGgo="]),
                    **({"detail": rng.choice(["low", "high", "auto"])} if rng.random() < 0.5 else {})}})
            elif allow_images and r < 0.16 and not v41:
                parts.append({"type": "file", "file": {"file_id": "file-abc"}})
            else:
                parts.append({"type": "text", "text": rand_text(rng)})
        return parts
    return rand_text(rng)


def chat_random(rng, budget):
    body = {"model": pick_model(rng), "messages": []}
    think = rng.choice([None, None, "enabled", "disabled", "disabled", "adaptive"])
    if think:
        body["thinking"] = {"type": think}
        if rng.random() < 0.2:
            body["thinking"]["budget_tokens"] = rng.choice([0, 1024, 32000])
    if rng.random() < 0.3:
        body["reasoning_effort"] = rng.choice(EFFORTS)
    thinking_on = think != "disabled" and body.get("reasoning_effort") != "none" or think in ("enabled", "adaptive")
    prefix_mode = rng.random() < 0.15  # no tools, no tool calls, ends with a prefix assistant
    tools = pick_tools(rng) if rng.random() < 0.5 and not prefix_mode else []
    if tools:
        body["tools"] = [{"type": "function", "function": t} for t in tools]
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.3:
            body["tool_choice"] = "auto"
        elif r < 0.4 and not thinking_on:
            body["tool_choice"] = "required"
        elif r < 0.5 and not thinking_on:
            body["tool_choice"] = {"type": "function", "function": {"name": rng.choice(tools)["name"]}}
        if rng.random() < 0.2:
            body["parallel_tool_calls"] = rng.random() < 0.5
    names = [t["name"] for t in tools] or ["get_weather", "lookup"]
    msgs = body["messages"]
    v41 = body["model"] == V41
    content = lambda **kw: chat_content(rng, budget, v41=v41, **kw)
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        msgs.append({"role": "system", "content": content(allow_images=False)})
    n_turns = rng.randint(1, 4)
    call_no = 0
    for turn in range(n_turns):
        msgs.append({"role": "user", "content": content()})
        if rng.random() < 0.1:
            msgs.append({"role": "latest_reminder", "content": rand_text(rng)})
        if rng.random() < 0.08:
            msgs.append({"role": "system", "content": rand_text(rng)})
        last = turn == n_turns - 1
        if last and not prefix_mode and rng.random() < 0.6:
            break
        # tool rounds
        for _ in range(0 if prefix_mode else rng.choice([0, 0, 1, 1, 2])):
            calls = []
            for _ in range(rng.randint(1, 3)):
                call_no += 1
                calls.append({"id": rng.choice([f"call_{call_no}", f"call_00_{call_no:03d}abc", f"c{call_no}"]),
                              "type": "function",
                              "function": {"name": rng.choice(names), "arguments": args_text(rng, rand_args(rng))}})
            a = {"role": "assistant", "tool_calls": calls}
            a["content"] = rng.choice([None, "", rand_text(rng)])
            if a["content"] is None and rng.random() < 0.5:
                del a["content"]
            if rng.random() < 0.5:
                a["reasoning_content"] = rand_text(rng)
            msgs.append(a)
            order = list(calls)
            if rng.random() < 0.3:
                rng.shuffle(order)
            for c in order:
                msgs.append({"role": "tool", "tool_call_id": c["id"],
                             "content": content()})
            if rng.random() < 0.1:
                msgs.append({"role": "latest_reminder", "content": rand_text(rng)})
        if last and not prefix_mode and rng.random() < 0.5:
            break
        a = {"role": "assistant", "content": content(allow_images=False)}
        if rng.random() < 0.5:
            a["reasoning_content"] = rand_text(rng)
        if last and prefix_mode:
            a["prefix"] = True  # prefix is rejected when tools or tool calls are present
        elif rng.random() < 0.1:
            a["prefix"] = False
        msgs.append(a)
    strict_tools = any(t.get("strict") for t in tools) and body.get("tool_choice") != "none"
    prefix = msgs[-1].get("prefix", False)
    if strict_tools:
        pass  # any response_format is rejected next to strict tools
    elif rng.random() < 0.12 and not prefix:
        if any("json" in json.dumps(m, ensure_ascii=False).lower() for m in msgs) or rng.random() < 0.5:
            body["response_format"] = {"type": "json_object"}
            msgs[0]["content"] = "Answer in json. " + (msgs[0]["content"] if isinstance(msgs[0]["content"], str) else "")
    elif rng.random() < 0.1:
        body["response_format"] = rng.choice([
            {"type": "text"},
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
                "type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "number"}},
                "required": ["answer", "score"]}, **({"strict": True} if rng.random() < 0.5 else {})}},
            {"type": "regex", "regex": "(yes|no)\\.?"}])
    if rng.random() < 0.2:
        body["stop"] = rng.choice(["\n\n", ["END", "<｜User｜>"], ["a", "b", "c"], "。"])
    sampling_fields(rng, body)
    if rng.random() < 0.1:
        body["seed"] = rng.choice([0, 42, 2 ** 63 - 1])
    if rng.random() < 0.1:
        body["logprobs"] = True
        if rng.random() < 0.7:
            body["top_logprobs"] = rng.choice([0, 5, 20])
    if rng.random() < 0.1:
        body["frequency_penalty"] = rng.choice([-2, 0, 0.5, 2])
        body["presence_penalty"] = rng.choice([-2, 0, 1.5])
    if rng.random() < 0.05:
        body["n"] = 1
    if body.get("stream") and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.05:
        body["user"] = "user-1234"
        body["metadata"] = {"unknown": "fields are ignored"}
    return body


def chat_edges():
    U = lambda c: {"role": "user", "content": c}
    A = lambda c, **kw: dict({"role": "assistant", "content": c}, **kw)
    S = lambda c: {"role": "system", "content": c}
    T = lambda i, c: {"role": "tool", "tool_call_id": i, "content": c}
    TC = lambda i, n="get_weather", a='{"city":"Paris"}': {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
    W = {"type": "function", "function": TOOL_POOL[0]}
    ND = {"thinking": {"type": "disabled"}}
    B = lambda msgs, **kw: dict({"model": V4, "messages": msgs}, **kw)
    e = []
    add = lambda name, body: e.append((name, ("request", body)))
    add("minimal", B([U("Hi")]))
    add("minimal-v41", B([U("Hi")], model=V41))
    add("thinking-disabled", B([U("Hi")], **ND))
    add("thinking-enabled", B([U("Hi")], thinking={"type": "enabled"}))
    add("thinking-adaptive", B([U("Hi")], thinking={"type": "adaptive", "budget_tokens": 10}))
    for eff in EFFORTS:
        add(f"effort-{eff}", B([U("Hi")], reasoning_effort=eff))
        add(f"effort-{eff}-v41", B([U("Hi")], reasoning_effort=eff, model=V41))
    add("effort-low-thinking-disabled", B([U("Hi")], reasoning_effort="low", **ND))
    add("effort-none-thinking-enabled", B([U("Hi")], reasoning_effort="none", thinking={"type": "enabled"}))
    add("system-one", B([S("You are helpful."), U("Hi")]))
    add("system-two", B([S("s1"), S("s2"), U("Hi")], **ND))
    add("system-mid", B([U("u1"), A("a1"), S("late system"), U("u2")], **ND))
    add("system-first-and-mid-tools-think", B([S("s1"), U("u1"), A("a1"), S("s2"), U("u2")], tools=[W]))
    add("system-parts", B([{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, U("Hi")]))
    add("system-empty", B([S(""), U("Hi")], **ND))
    add("system-empty-v41", B([S(""), U("Hi")], model=V41, **ND))
    add("system-only", B([S("only system")], **ND))
    add("assistant-only", B([A("only assistant")], **ND))
    add("reminder-only", B([{"role": "latest_reminder", "content": "rem"}], **ND))
    add("user-empty", B([U("")], **ND))
    add("user-parts-empty", B([U([])], **ND))
    add("user-parts-join", B([U([{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}])], **ND))
    add("user-image", B([U([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}])], **ND))
    add("user-file", B([U([{"type": "file", "file": {"file_data": "data:application/pdf;base64,AA==", "filename": "a.pdf"}}])], **ND))
    add("consecutive-users", B([U("u1"), U("u2"), U("u3")], **ND))
    add("consecutive-users-with-empties", B([U(""), U("x"), U(""), U("y"), U("")], **ND))
    add("consecutive-users-all-empty", B([U(""), U([])], **ND))
    add("tool-result-then-empty-user", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", "r1"), U(""), U("")], **ND))
    add("consecutive-assistants", B([U("u1"), A("a1"), A("a2"), U("u2")], **ND))
    add("assistant-first", B([A("a0"), U("u1")], **ND))
    add("trailing-assistant", B([U("u1"), A("a1")], **ND))
    add("trailing-assistant-think", B([U("u1"), A("a1", reasoning_content="r1")]))
    add("history-reasoning-dropped", B([U("u1"), A("a1", reasoning_content="r1"), U("u2")]))
    add("history-reasoning-kept-with-tools", B([U("u1"), A("a1", reasoning_content="r1"), U("u2")], tools=[W]))
    add("history-reasoning-nothink-tools", B([U("u1"), A("a1", reasoning_content="r1"), U("u2")], tools=[W], **ND))
    add("history-reasoning-missing-tools-v41", B([U("u1"), A("a1"), U("u2")], tools=[W], model=V41))
    add("prefix", B([U("u1"), A("Once upon", prefix=True)], **ND))
    add("prefix-think", B([U("u1"), A("Once upon", prefix=True)]))
    add("prefix-think-reasoning", B([U("u1"), A("Once upon", reasoning_content="plan", prefix=True)]))
    add("prefix-think-reasoning-empty-content", B([U("u1"), A("", reasoning_content="partial reasoning", prefix=True)]))
    add("prefix-think-empty", B([U("u1"), A("", prefix=True)]))
    add("prefix-nothink-reasoning", B([U("u1"), A("x", reasoning_content="dropped", prefix=True)], **ND))
    add("prefix-nothink-empty", B([U("u1"), A("", prefix=True)], **ND))
    add("prefix-false", B([U("u1"), A("x", prefix=False)], **ND))
    add("prefix-on-user-ignored", B([dict(U("u1"), prefix=True)], **ND))
    add("prefix-json-schema", B([U("u"), A("{", prefix=True)], response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}, **ND))
    PNG = "data:image/png;base64,iVBORw0KGgo="
    IMG = lambda url=PNG, **kw: {"type": "image_url", "image_url": dict({"url": url}, **kw)}
    add("image-v41-data-url", B([U([{"type": "text", "text": "what is this?"}, IMG()])], model=V41, **ND))
    add("image-v41-http-and-detail", B([U([IMG("https://example.com/a.png", detail="low"), IMG("HTTP://EXAMPLE.COM/B", detail="original")])], model=V41, **ND))
    add("image-v41-three-plus-literal", B([U([IMG(), IMG("data:image/jpeg;base64,/9j/"), IMG("data:image/webp;base64,"), {"type": "text", "text": "<｜image｜> literal"}])], model=V41))
    add("image-v41-system", B([{"role": "system", "content": [{"type": "text", "text": "sys"}, IMG()]}, U("x")], model=V41, **ND))
    add("image-v41-tool-result", B([U("w"), A(None, tool_calls=[TC("c1")]), T("c1", [{"type": "text", "text": "r"}, IMG()])], tools=[W], model=V41, **ND))
    add("image-v41-url-8192", B([U([IMG("https://x/" + "a" * 8182)])], model=V41, **ND))
    add("image-v4-model-placeholder-text", B([U([IMG("not a url at all")])], **ND))
    add("file-v4-model", B([U([{"type": "file", "file": {}}])], **ND))
    add("tool-flow", B([S("sys"), U("Weather?"), A(None, tool_calls=[TC("c1")]), T("c1", "sunny")], tools=[W], **ND))
    add("tool-flow-think", B([U("Weather?"), A("checking", reasoning_content="need tool", tool_calls=[TC("c1")]), T("c1", "sunny")], tools=[W]))
    add("tool-flow-think-no-tools-declared", B([U("Weather?"), A("", reasoning_content="need tool", tool_calls=[TC("c1")]), T("c1", "sunny")]))
    add("tool-flow-v41", B([U("Weather?"), A("", reasoning_content="need tool", tool_calls=[TC("c1")]), T("c1", "sunny"), A("Sunny.", reasoning_content="done"), U("thx")], tools=[W], model=V41))
    add("parallel-calls-reversed-results", B([U("w"), A("", tool_calls=[TC("c1"), TC("c2", a='{"city":"Rome"}'), TC("c3", "noop", "{}")]), T("c3", "r3"), T("c1", "r1"), T("c2", "r2")], tools=[W], **ND))
    add("parallel-calls-id-order", B([U("w"), A("", tool_calls=[TC("call_10", a='{"city":"A"}'), TC("call_9", a='{"city":"B"}'), TC("call_2", a='{"city":"C"}'), TC("Z", a='{"city":"D"}'), TC("é", a='{"city":"E"}')]), T("call_10", "r10"), T("call_9", "r9"), T("call_2", "r2"), T("Z", "rZ"), T("é", "ré")], tools=[W], **ND))
    add("tool-result-then-user", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", "r1"), U("and now?")], **ND))
    add("tool-result-then-reminder", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", "r1"), {"role": "latest_reminder", "content": "be brief"}], **ND))
    add("tool-result-parts", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", [{"type": "text", "text": "p1"}, {"type": "image_url", "image_url": {"url": "https://x"}}, {"type": "text", "text": "p2"}])], **ND))
    add("tool-result-empty", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", "")], **ND))
    add("tool-args-types", B([U("w"), A("", tool_calls=[TC("c1", "f", json.dumps({"s": "str\n<｜User｜>", "i": 1, "f": 1.5, "e": 1e-7, "big": 1e21, "b": True, "n": None, "a": [1, "x", {"k": []}], "o": {"é": "中", "ctl": "\x01\t"}, "": 0}, ensure_ascii=False))]), T("c1", "ok")], **ND))
    add("tool-args-number-text", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"a":1.50,"b":1E5,"c":-0,"d":1e-5,"e":1e-6,"f":12345678901234567890,"g":123456789012345678901,"h":-9223372036854775809,"i":0.1e1}')]), T("c1", "ok")], **ND))
    add("tool-args-duplicate-keys", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"a":1,"b":2,"a":3}')]), T("c1", "ok")], **ND))
    add("tool-args-invalid-json", B([U("w"), A("", tool_calls=[TC("c1", "f", "{not json")]), T("c1", "ok")], **ND))
    add("tool-args-array", B([U("w"), A("", tool_calls=[TC("c1", "f", "[1,2]")]), T("c1", "ok")], **ND))
    add("tool-args-empty-string", B([U("w"), A("", tool_calls=[TC("c1", "f", "")]), T("c1", "ok")], **ND))
    add("tool-args-empty-object", B([U("w"), A("", tool_calls=[TC("c1", "f", " { } ")]), T("c1", "ok")], **ND))
    add("tool-args-lone-surrogate", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"a":"\\ud800"}')]), T("c1", "ok")], **ND))
    add("tool-args-deep-127", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"a":' * 127 + "1" + "}" * 127)]), T("c1", "ok")], **ND))
    add("tool-args-deep-128", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"a":' * 128 + "1" + "}" * 128)]), T("c1", "ok")], **ND))
    add("tool-args-escapes", B([U("w"), A("", tool_calls=[TC("c1", "f", '{"s":"\\u00e9\\n\\"\\\\/\\b\\f\\r\\t\\u0000\\u001f\\u007f\\u2028\\ud83d\\ude00","o":{"s":"\\u0000\\u001f\\u007f\\"\\\\/"}}')]), T("c1", "ok")], **ND))
    add("tool-call-unknown-function", B([U("w"), A("", tool_calls=[TC("c1", "not_declared")]), T("c1", "ok")], tools=[W], **ND))
    add("tool-call-empty-id-and-name", B([U("w"), A("", tool_calls=[TC("", "")]), T("", "ok")], **ND))
    add("tool-minimal", B([U("hi")], tools=[{"type": "function", "function": {"name": "f"}}], **ND))
    add("tool-null-params", B([U("hi")], tools=[{"type": "function", "function": {"name": "f", "parameters": None, "description": None}}], **ND))
    add("tool-extra-fields", B([U("hi")], tools=[{"type": "function", "function": {"name": "f", "x": 1}, "y": 2}], **ND))
    add("tool-name-128", B([U("hi")], tools=[{"type": "function", "function": {"name": "a" * 128}}], **ND))
    add("tools-empty-list", B([U("hi")], tools=[], **ND))
    add("tools-all-pool", B([U("hi")], tools=[{"type": "function", "function": t} for t in TOOL_POOL], **ND))
    add("tools-all-pool-v41-think", B([U("hi")], tools=[{"type": "function", "function": t} for t in TOOL_POOL], model=V41))
    add("tools-strict-pool", B([U("hi")], tools=[{"type": "function", "function": t} for t in STRICT_POOL], **ND))
    add("tool-strict-false", B([U("hi")], tools=[{"type": "function", "function": fn("f", "d", {"type": "object", "title": "kept"}, strict=False)}], **ND))
    add("tool-strict-key-order", B([U("hi")], tools=[{"type": "function", "function": fn("f", None, {"additionalProperties": False, "required": ["b", "a"], "properties": {"b": {"type": "string"}, "a": {"type": "integer", "description": "A", "maximum": 5, "minimum": 1}}, "type": "object"}, strict=True)}], **ND))
    add("tool-strict-number-attrs", B([U("hi")], tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"n": {"exclusiveMaximum": 9, "exclusiveMinimum": 1, "multipleOf": 2, "maximum": 8, "minimum": 2, "default": 4, "const": 4, "description": "d", "type": "number", "enum": [4]}}, "additionalProperties": False}, strict=True)}], **ND))
    add("tool-choice-none", B([U("hi")], tools=[W], tool_choice="none", **ND))
    add("tool-choice-auto", B([U("hi")], tools=[W], tool_choice="auto"))
    add("tool-choice-required", B([U("hi")], tools=[W], tool_choice="required", **ND))
    add("tool-choice-required-v41", B([U("hi")], tools=[W], tool_choice="required", model=V41, **ND))
    add("tool-choice-function", B([U("hi")], tools=[W, {"type": "function", "function": TOOL_POOL[2]}], tool_choice={"type": "function", "function": {"name": "calculator"}}, **ND))
    add("tool-choice-required-no-tools", B([U("hi")], tool_choice="required"))
    add("tool-choice-none-no-tools", B([U("hi")], tool_choice="none"))
    add("json-object", B([U("Reply in JSON please")], response_format={"type": "json_object"}, **ND))
    add("json-object-think", B([U("json")], response_format={"type": "json_object"}))
    add("json-object-v41", B([S("sys"), U("json")], response_format={"type": "json_object"}, model=V41, **ND))
    add("json-object-word-in-system", B([S("Use JSON."), U("hi")], response_format={"type": "json_object"}, **ND))
    add("json-object-word-in-assistant", B([U("hi"), A("json"), U("again")], response_format={"type": "json_object"}, **ND))
    add("json-object-with-tools", B([S("sys"), U("json")], response_format={"type": "json_object"}, tools=[W], **ND))
    add("json-object-tools-none", B([U("json")], response_format={"type": "json_object"}, tools=[W], tool_choice="none", **ND))
    add("json-schema", B([U("hi")], response_format={"type": "json_schema", "json_schema": {"name": "n", "description": "ignored", "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "b": 1.0}}}, **ND))
    add("json-schema-strict", B([U("hi")], response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}, **ND))
    add("json-schema-non-object", B([U("hi")], response_format={"type": "json_schema", "json_schema": {"schema": {"type": "string"}}}, **ND))
    add("json-schema-tools-think-v41", B([S("sys"), U("hi")], response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}, tools=[W], model=V41))
    add("regex", B([U("hi")], response_format={"type": "regex", "regex": "[a-z]+"}, **ND))
    add("response-format-text", B([U("hi")], response_format={"type": "text"}, **ND))
    add("latest-reminder", B([S("sys"), U("u"), {"role": "latest_reminder", "content": "remember"}], **ND))
    add("latest-reminder-first", B([{"role": "latest_reminder", "content": "r0"}, U("u")]))
    add("latest-reminder-two-in-a-row", B([U("u"), {"role": "latest_reminder", "content": "r1"}, {"role": "latest_reminder", "content": "r2"}], **ND))
    add("latest-reminder-then-user", B([U("u"), {"role": "latest_reminder", "content": "r1"}, U("u2")], **ND))
    add("special-token-spellings", B([S("<｜begin▁of▁sentence｜><｜System｜>"), U("<｜User｜>x<think>y</think>｜DSML｜<｜Assistant｜><｜end▁of▁sentence｜><｜latest_reminder｜><｜image｜>")], tools=[{"type": "function", "function": fn("f", "<think>｜DSML｜</think>")}]))
    add("stop-string", B([U("hi")], stop="\n\n"))
    add("stop-list-16", B([U("hi")], stop=[f"s{i}" for i in range(16)]))
    add("stop-empty-list", B([U("hi")], stop=[]))
    add("stream-options", B([U("hi")], stream=True, stream_options={"include_usage": True}))
    add("sampling-nothink", B([U("hi")], temperature=0.3, top_p=0.5, **ND))
    add("sampling-think-ignored", B([U("hi")], temperature=0.3, top_p=0.5))
    add("sampling-think-tools", B([U("hi")], temperature=0.3, top_p=0.5, tools=[W]))
    add("sampling-v41-think", B([U("hi")], top_p=0.5, model=V41))
    add("sampling-v41-think-high", B([U("hi")], top_p=0.97, model=V41))
    add("sampling-v41-nothink", B([U("hi")], top_p=0.5, temperature=0.2, model=V41, **ND))
    add("max-tokens-bounds", B([U("hi")], max_tokens=393216))
    add("max-tokens-1", B([U("hi")], max_tokens=1, **ND))
    add("max-tokens-effort-max", B([U("hi")], reasoning_effort="max"))
    add("seed-logprobs", B([U("hi")], seed=9223372036854775807, logprobs=True, top_logprobs=20, n=1, frequency_penalty=-2, presence_penalty=2))
    add("nulls-everywhere", B([U("hi")], max_tokens=None, temperature=None, top_p=None, stop=None, tools=None, tool_choice=None, response_format=None, thinking=None, reasoning_effort=None, stream=None, stream_options=None, seed=None, logprobs=None, top_logprobs=None, n=None, parallel_tool_calls=None, frequency_penalty=None, presence_penalty=None))
    add("unknown-fields", B([U("hi")], foo=1, max_completion_tokens=5, extra_body={"x": 1}))
    add("big-user-50k", B([U(big_text(random.Random(7)))], **ND))
    add("big-tool-result-50k", B([U("w"), A("", tool_calls=[TC("c1")]), T("c1", big_text(random.Random(8)))], tools=[W]))
    add("whitespace-contents", B([S("\n"), U(" \t "), A("\n\n"), U("\r\n")], **ND))
    e.append(("text-whitespace-around", ("request_text", ' \n\t{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}]}\r\n ')))
    e.append(("text-duplicate-key-last-wins", ("request_text", '{"model":"gpt-4","model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"second"}]}')))
    e.append(("text-escapes", ("request_text", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\\u00e9\\ud83d\\ude00\\n\\t\\/\\u0000"}],"thinking":{"type":"disabled"}}')))
    e.append(("text-depth-127", ("request_text", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"x":%s}' % ("[" * 126 + "]" * 126))))
    e.append(("text-number-formats-in-schema", ("request_text", '{"model":"DeepSeek-V4-Pro","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","a":1.0,"b":1.50,"c":1e5,"d":1E-5,"e":1e-6,"f":1e15,"g":1e16,"h":-0,"i":-0.0,"j":18446744073709551615,"k":18446744073709551616,"l":-9223372036854775808,"m":-9223372036854775809,"n":0.1,"o":5e-324,"p":1.7976931348623157e308,"q":123456789.123456789,"r":0e0}}}]}')))
    return e


def chat_invalid():
    U = {"role": "user", "content": "hi"}
    TC = lambda i: {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    B = lambda **kw: dict({"model": V4, "messages": [U]}, **kw)
    M = lambda *m, **kw: dict({"model": V4, "messages": list(m)}, **kw)
    e = []
    req = lambda name, body: e.append((name, ("request", body)))
    txt = lambda name, t: e.append((name, ("request_text", t)))
    raw = lambda name, b: e.append((name, ("request_bytes_b64", b)))
    txt("malformed-eof", '{"model":"DeepSeek-V4-Pro","messages":[')
    txt("malformed-empty", "")
    txt("malformed-not-json", "not json")
    txt("malformed-trailing", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}]} x')
    txt("malformed-nan", '{"model":"DeepSeek-V4-Pro","temperature":NaN,"messages":[{"role":"user","content":"hi"}]}')
    txt("malformed-bad-escape", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\\x"}]}')
    txt("malformed-lone-surrogate", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\\ud800"}]}')
    txt("malformed-control-char", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"a\x01b"}]}')
    txt("malformed-single-quotes", "{'model':'DeepSeek-V4-Pro'}")
    txt("top-level-array", "[]")
    txt("top-level-null", "null")
    txt("top-level-string", '"hello"')
    txt("depth-128", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"x":%s}' % ("[" * 127 + "]" * 127))
    txt("depth-128-objects", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"x":%s}' % ('{"a":' * 127 + "1" + "}" * 127))
    txt("depth-200-in-tool-params", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":%s}}]}' % ('{"a":' * 200 + "1" + "}" * 200))
    raw("bytes-invalid-utf8", b'{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\xff\xfe"}]}')
    # integers beyond 64 bits where a string is required (found by fuzzing: crash)
    txt("bignum-tool-description", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":9223372036854775808}}]}')
    txt("bignum-content", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":18446744073709551616}]}')
    txt("bignum-tool-call-id", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":99999999999999999999,"type":"function","function":{"name":"f","arguments":"{}"}}]}]}')
    raw("bytes-utf8-bom", b'\xef\xbb\xbf{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}]}')
    raw("bytes-overlong-utf8", b'{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\xc0\xaf"}]}')
    req("model-missing", {"messages": [U]})
    req("model-unknown", B(model="gpt-4"))
    req("model-wrong-case", B(model="deepseek-v4-pro"))
    req("model-not-string", B(model=4))
    req("messages-missing", {"model": V4})
    req("messages-empty", B(messages=[]))
    req("messages-not-list", B(messages="hi"))
    req("role-unknown", M({"role": "wizard", "content": "x"}))
    req("role-developer", M({"role": "developer", "content": "x"}, U))
    req("role-missing", M({"content": "x"}))
    req("content-missing", M({"role": "user"}))
    req("content-null", M({"role": "user", "content": None}))
    req("content-number", M({"role": "user", "content": 5}))
    req("content-part-unknown-type", M({"role": "user", "content": [{"type": "input_text", "text": "x"}]}))
    req("content-part-missing-text", M({"role": "user", "content": [{"type": "text"}]}))
    req("content-part-string", M({"role": "user", "content": ["x"]}))
    req("reminder-content-list", M(U, {"role": "latest_reminder", "content": [{"type": "text", "text": "x"}]}))
    req("assistant-no-content-no-calls", M(U, {"role": "assistant"}, U))
    req("assistant-null-content", M(U, {"role": "assistant", "content": None}, U))
    req("assistant-reasoning-only", M(U, {"role": "assistant", "reasoning_content": "r"}, U))
    req("assistant-empty-tool-calls", M(U, {"role": "assistant", "content": "x", "tool_calls": []}))
    req("tool-orphan", M(U, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-only", M({"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-missing-id", M(U, {"role": "assistant", "tool_calls": [TC("c1")]}, {"role": "tool", "content": "r"}))
    req("tool-wrong-id", M(U, {"role": "assistant", "tool_calls": [TC("c1")]}, {"role": "tool", "tool_call_id": "zz", "content": "r"}))
    req("tool-result-missing", M(U, {"role": "assistant", "tool_calls": [TC("c1"), TC("c2")]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-calls-unanswered-last", M(U, {"role": "assistant", "tool_calls": [TC("c1")]}))
    req("tool-result-duplicate", M(U, {"role": "assistant", "tool_calls": [TC("c1")]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-call-ids-duplicate", M(U, {"role": "assistant", "tool_calls": [TC("c1"), TC("c1")]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-result-after-user", M(U, {"role": "assistant", "tool_calls": [TC("c1"), TC("c2")]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, U, {"role": "tool", "tool_call_id": "c2", "content": "r"}))
    req("tool-call-arguments-object", M(U, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("tool-call-missing-type", M(U, {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}))
    req("prefix-not-last", M(U, {"role": "assistant", "content": "x", "prefix": True}, U))
    req("prefix-with-tool-calls", M(U, {"role": "assistant", "content": "", "prefix": True, "tool_calls": [TC("c1")]}))
    req("prefix-json-object", M({"role": "user", "content": "json"}, {"role": "assistant", "content": "{", "prefix": True}, response_format={"type": "json_object"}))
    req("prefix-not-bool", M(U, {"role": "assistant", "content": "x", "prefix": "yes"}))
    req("prefix-with-tools-declared", M(U, {"role": "assistant", "content": "x", "prefix": True}, tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none"))
    req("prefix-after-tool-calls", M(U, {"role": "assistant", "tool_calls": [TC("c1")]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "assistant", "content": "x", "prefix": True}))
    IMG = lambda url: {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
    req("image-v41-bad-url", M(IMG("not a url"), model=V41))
    req("image-v41-ftp", M(IMG("ftp://x/y.png"), model=V41))
    req("image-v41-data-no-base64", M(IMG("data:image/png,abc"), model=V41))
    req("image-v41-bad-base64", M(IMG("data:image/png;base64,@@@"), model=V41))
    req("image-v41-svg", M(IMG("data:image/svg+xml;base64,PHN2Zz4="), model=V41))
    req("image-v41-url-too-long", M(IMG("https://x/" + "a" * 8183), model=V41))
    req("image-detail-unknown", M({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x", "detail": "ultra"}}]}))
    req("image-v41-in-assistant", M(U, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]}, U, model=V41))
    req("file-v41-with-file-id", M({"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}, model=V41))
    req("response-format-with-strict-tools", B(response_format={"type": "text"}, tools=[{"type": "function", "function": fn("s", None, {"type": "object", "properties": {"a": {"type": "string"}}}, strict=True)}]))
    req("json-schema-strict-required-subset", B(response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}}}))
    req("tool-strict-nested-empty-object", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"o": {"type": "object"}}}, strict=True)}]))
    req("tool-strict-required-empty-list", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"o": {"type": "string"}}, "required": []}, strict=True)}]))
    req("json-object-without-json-word", B(response_format={"type": "json_object"}))
    req("json-schema-missing-schema", B(response_format={"type": "json_schema", "json_schema": {"name": "n"}}))
    req("response-format-unknown", B(response_format={"type": "xml"}))
    req("max-tokens-0", B(max_tokens=0))
    req("max-tokens-over-bound", B(max_tokens=393217))
    req("max-tokens-negative", B(max_tokens=-1))
    req("max-tokens-u32-overflow", B(max_tokens=4294967296))
    req("max-tokens-float", B(max_tokens=5.0))
    req("max-tokens-string", B(max_tokens="5"))
    req("temperature-negative", B(temperature=-0.1))
    req("temperature-over", B(temperature=2.01))
    req("temperature-string", B(temperature="hot"))
    req("top-p-zero", B(top_p=0))
    req("top-p-over", B(top_p=1.01))
    req("frequency-penalty-over", B(frequency_penalty=2.5))
    req("presence-penalty-under", B(presence_penalty=-2.1))
    req("n-2", B(n=2))
    req("n-0", B(n=0))
    req("seed-2^63", B(seed=2 ** 63))
    req("seed-negative", B(seed=-1))
    req("top-logprobs-without-logprobs", B(top_logprobs=3))
    req("top-logprobs-21", B(logprobs=True, top_logprobs=21))
    req("stop-empty-string", B(stop=""))
    req("stop-list-empty-string", B(stop=["a", ""]))
    req("stop-17", B(stop=[str(i) for i in range(17)]))
    req("stop-number", B(stop=[1]))
    req("stream-options-without-stream", B(stream_options={"include_usage": True}))
    req("thinking-unknown-type", B(thinking={"type": "auto"}))
    req("thinking-missing-type", B(thinking={}))
    req("reasoning-effort-empty", B(reasoning_effort=""))
    req("reasoning-effort-uppercase", B(reasoning_effort="HIGH"))
    req("tool-choice-unknown", B(tool_choice="any", tools=[{"type": "function", "function": {"name": "f"}}]))
    req("tool-choice-missing-function", B(tool_choice={"type": "function", "function": {"name": "zz"}}, tools=[{"type": "function", "function": {"name": "f"}}], thinking={"type": "disabled"}))
    req("tool-choice-required-thinking", B(tool_choice="required", tools=[{"type": "function", "function": {"name": "f"}}]))
    req("tool-choice-function-thinking", B(tool_choice={"type": "function", "function": {"name": "f"}}, tools=[{"type": "function", "function": {"name": "f"}}]))
    req("tool-type-unknown", B(tools=[{"type": "custom", "function": {"name": "f"}}]))
    req("tool-name-empty", B(tools=[{"type": "function", "function": {"name": ""}}]))
    req("tool-name-pattern", B(tools=[{"type": "function", "function": {"name": "a b"}}]))
    req("tool-name-129", B(tools=[{"type": "function", "function": {"name": "a" * 129}}]))
    req("tool-names-duplicate", B(tools=[{"type": "function", "function": {"name": "f"}}] * 2))
    req("tool-params-not-object-type", B(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]))
    req("tool-params-no-type", B(tools=[{"type": "function", "function": {"name": "f", "parameters": {"properties": {}}}}]))
    req("tool-params-array", B(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]))
    req("tool-params-bad-schema", B(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}}]))
    req("tool-strict-mixed", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object"}, strict=True)}, {"type": "function", "function": {"name": "g"}}]))
    req("tool-strict-required-subset", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}, strict=True)}]))
    req("tool-strict-additional-true", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}, strict=True)}]))
    req("tool-strict-array-no-items", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"a": {"type": "array"}}}, strict=True)}]))
    req("tool-strict-unknown-format", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}, strict=True)}]))
    req("tool-strict-enum-only", B(tools=[{"type": "function", "function": fn("f", None, {"type": "object", "properties": {"a": {"enum": [1]}}}, strict=True)}]))
    req("tool-strict-top-not-object", B(tools=[{"type": "function", "function": fn("f", None, {"type": "string"}, strict=True)}]))
    req("tool-description-number", B(tools=[{"type": "function", "function": {"name": "f", "description": 5}}]))
    return e


# --------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------
MSG_TOOLS = [{"name": t["name"], **({"description": t["description"]} if "description" in t else {}),
              "input_schema": t.get("parameters", {"type": "object"})} for t in TOOL_POOL]


def msg_blocks(rng, budget, allow_images=True):
    big = maybe_big(rng, budget)
    if big is not None:
        return big
    if rng.random() < 0.4:
        return rand_text(rng)
    blocks = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if allow_images and r < 0.1:
            blocks.append({"type": "image", "source": rng.choice([
                {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                {"type": "url", "url": "https://example.com/a.jpg"}])})
        elif allow_images and r < 0.15:
            blocks.append({"type": "document", "source": rng.choice([
                {"type": "text", "media_type": "text/plain", "data": "doc text"},
                {"type": "base64", "media_type": "application/pdf", "data": "AA=="}])})
        else:
            b = {"type": "text", "text": rand_text(rng)}
            if rng.random() < 0.1:
                b["cache_control"] = {"type": "ephemeral"}
            blocks.append(b)
    return blocks


def messages_random(rng, budget):
    body = {"model": pick_model(rng), "messages": []}
    if rng.random() < 0.85:
        body["max_tokens"] = rng.choice([1, 100, 4096, 65536, 393216, 1000000])
    think = rng.choice([None, None, "enabled", "disabled", "disabled", "adaptive"])
    if think:
        body["thinking"] = {"type": think}
        if think == "enabled":
            body["thinking"]["budget_tokens"] = rng.choice([1024, 16000])
    if rng.random() < 0.3:
        body["output_config"] = {"effort": rng.choice(EFFORTS)}
    thinking_on = not (think == "disabled" or (body.get("output_config", {}).get("effort") == "none" and think is None))
    r = rng.random()
    if r < 0.25:
        body["system"] = rand_text(rng)
    elif r < 0.45:
        blocks = [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.3:
            blocks.insert(0, {"type": "text", "text": "x-anthropic-billing-header: cc_version=1.0"})
        body["system"] = blocks
    tools = [dict(t) for t in rng.sample(MSG_TOOLS, rng.randint(1, 4))] if rng.random() < 0.5 else []
    if tools:
        body["tools"] = tools
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = {"type": "none"}
        elif r < 0.3:
            body["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": rng.random() < 0.5}
        elif r < 0.4:
            body["tool_choice"] = {"type": "any"}
        elif r < 0.5 and not thinking_on:
            body["tool_choice"] = {"type": "tool", "name": rng.choice(tools)["name"]}
    names = [t["name"] for t in tools] or ["get_weather"]
    msgs = body["messages"]
    n_turns = rng.randint(1, 4)
    uid = 0
    pending_results = None
    for turn in range(n_turns):
        content = msg_blocks(rng, budget)
        if pending_results:
            if isinstance(content, str):
                content = [{"type": "text", "text": content}] if content and rng.random() < 0.6 else []
            content = pending_results + content
            pending_results = None
        if isinstance(content, list) and not content:
            content = [{"type": "text", "text": "hi"}]
        msgs.append({"role": "user", "content": content})
        if rng.random() < 0.08:
            msgs.append({"role": "system", "content": rand_text(rng, allow_empty=False)})
        last = turn == n_turns - 1
        if last and rng.random() < 0.6:
            break
        blocks = []
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 2)):
                blocks.append({"type": "thinking", "thinking": rand_text(rng), "signature": "sig"})
        if rng.random() < 0.7:
            blocks.append({"type": "text", "text": rand_text(rng)})
        calls = []
        if not last and rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                uid += 1
                calls.append({"type": "tool_use", "id": f"toolu_{uid:02d}", "name": rng.choice(names), "input": rand_args(rng)})
        blocks += calls
        if not blocks:
            blocks = [{"type": "text", "text": "ok"}]
        if rng.random() < 0.2 and all(b["type"] == "text" for b in blocks) and len(blocks) == 1:
            msgs.append({"role": "assistant", "content": blocks[0]["text"]})
        else:
            msgs.append({"role": "assistant", "content": blocks})
        if calls:
            res = []
            order = list(calls)
            if rng.random() < 0.3:
                rng.shuffle(order)
            for c in order:
                rb = {"type": "tool_result", "tool_use_id": c["id"]}
                rr = rng.random()
                if rr < 0.6:
                    rb["content"] = rand_text(rng)
                elif rr < 0.9:
                    rb["content"] = msg_blocks(rng, budget)
                if rng.random() < 0.15:
                    rb["is_error"] = True
                res.append(rb)
            pending_results = res
            if last:
                msgs.append({"role": "user", "content": res})
    if pending_results:
        msgs.append({"role": "user", "content": pending_results})
    if rng.random() < 0.2:
        body["stop_sequences"] = rng.choice([["\n\nHuman:"], ["END", "<｜User｜>"], []])
    sampling_fields(rng, body)
    body.pop("max_tokens", None) if rng.random() < 0.05 else None
    if rng.random() < 0.05:
        body["metadata"] = {"user_id": "u-1"}
    if rng.random() < 0.05:
        body["top_k"] = 5
    return body


def messages_edges():
    U = lambda c: {"role": "user", "content": c}
    A = lambda c: {"role": "assistant", "content": c}
    W = MSG_TOOLS[0]
    ND = {"thinking": {"type": "disabled"}}
    B = lambda msgs, **kw: dict({"model": V4, "max_tokens": 1024, "messages": msgs}, **kw)
    tu = lambda i, inp=None, n="get_weather": {"type": "tool_use", "id": i, "name": n, "input": {"city": "Paris"} if inp is None else inp}
    tr = lambda i, c="sunny", **kw: dict({"type": "tool_result", "tool_use_id": i, "content": c}, **kw)
    th = lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}
    e = []
    add = lambda name, body: e.append((name, ("request", body)))
    add("minimal", B([U("Hi")]))
    add("minimal-v41", B([U("Hi")], model=V41))
    add("no-max-tokens", {"model": V4, "messages": [U("Hi")]})
    add("max-tokens-lowered", B([U("Hi")], max_tokens=1000000))
    add("thinking-disabled", B([U("Hi")], **ND))
    add("thinking-enabled-budget", B([U("Hi")], thinking={"type": "enabled", "budget_tokens": 2048}))
    add("thinking-adaptive", B([U("Hi")], thinking={"type": "adaptive"}))
    for eff in EFFORTS:
        add(f"effort-{eff}", B([U("Hi")], output_config={"effort": eff}))
        add(f"effort-{eff}-v41", B([U("Hi")], output_config={"effort": eff}, model=V41))
    add("effort-with-thinking-disabled", B([U("Hi")], output_config={"effort": "max"}, **ND))
    add("output-config-empty", B([U("Hi")], output_config={}))
    add("system-string", B([U("Hi")], system="Be brief."))
    add("system-blocks", B([U("Hi")], system=[{"type": "text", "text": "S1"}, {"type": "text", "text": "S2", "cache_control": {"type": "ephemeral"}}]))
    add("system-blocks-with-empty", B([U("Hi")], system=[{"type": "text", "text": ""}, {"type": "text", "text": "S2"}], **ND))
    add("system-empty-string-v41", B([U("Hi")], system="", model=V41, **ND))
    add("system-empty-list-v41", B([U("Hi")], system=[], model=V41, **ND))
    add("system-billing-header-dropped", B([U("Hi")], system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0; cc_entrypoint=cli"}, {"type": "text", "text": "You are Claude Code."}], **ND))
    add("system-billing-header-uppercase", B([U("Hi")], system=[{"type": "text", "text": "X-Anthropic-Billing-Header: a"}, {"type": "text", "text": "S"}], **ND))
    add("system-billing-header-not-prefix", B([U("Hi")], system=[{"type": "text", "text": " x-anthropic-billing-header: a"}, {"type": "text", "text": "S"}], **ND))
    add("system-billing-header-string-kept", B([U("Hi")], system="x-anthropic-billing-header: a", **ND))
    add("system-billing-only-v41", B([U("Hi")], system=[{"type": "text", "text": "x-anthropic-billing-header: a"}], model=V41, **ND))
    add("system-role-first", B([{"role": "system", "content": "S"}, U("Hi")], **ND))
    add("system-role-mid", B([U("u1"), A("a1"), {"role": "system", "content": "S"}, U("u2")], **ND))
    add("system-role-last", B([U("u1"), {"role": "system", "content": "S"}], **ND))
    add("system-role-blocks", B([{"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]}, U("u1")], **ND))
    add("system-role-two", B([{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}, U("u1")], **ND))
    add("system-role-before-assistant", B([U("u1"), {"role": "system", "content": "S"}, A("a1"), U("u2")], **ND))
    add("system-role-empty-dropped", B([{"role": "system", "content": ""}, U("u1")], model=V41, **ND))
    add("system-role-image", B([{"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]}, U("u1")], **ND))
    add("system-top-and-role", B([{"role": "system", "content": "M"}, U("x")], system="TOP", **ND))
    add("user-blocks", B([U([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])], **ND))
    add("user-empty-string", B([U("")], **ND))
    add("user-empty-text-block", B([U([{"type": "text", "text": ""}])], **ND))
    add("user-image-base64", B([U([{"type": "text", "text": "see"}, {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}])], **ND))
    add("user-image-url", B([U([{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}])], **ND))
    add("user-image-file", B([U([{"type": "image", "source": {"type": "file", "file_id": "f"}}])], **ND))
    add("user-document-text", B([U([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "D"}}])], **ND))
    add("user-document-pdf", B([U([{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA=="}}])], **ND))
    add("user-document-url", B([U([{"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}])], **ND))
    MI = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    add("image-v41-base64", B([U([{"type": "text", "text": "see"}, MI])], model=V41, **ND))
    add("image-v41-url", B([U([{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}])], model=V41))
    add("image-v41-system-role", B([{"role": "system", "content": [MI]}, U("x")], model=V41, **ND))
    add("image-v41-tool-result", B([U("w?"), A([tu("t1")]), U([tr("t1", [{"type": "text", "text": "r"}, MI])])], tools=[W], model=V41, **ND))
    add("document-v41", B([U([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "D"}}])], model=V41, **ND))
    Y = {"name": "y", "description": "deferred tool", "defer_loading": True, "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
    add("v41-system-role-first", B([{"role": "system", "content": "S"}, U("x")], model=V41, **ND))
    add("v41-system-role-mid-think", B([U("u1"), A("a1"), {"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]}, U("u2")], model=V41))
    add("v41-system-role-empty-kept", B([{"role": "system", "content": ""}, U("x")], model=V41, **ND))
    add("v41-defer-loading", B([U("x")], tools=[W, Y], model=V41, **ND))
    add("v41-tool-addition", B([U("u0"), A("a0"), {"role": "system", "content": [{"type": "text", "text": "T"}, {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "y"}}]}, U("u1")], tools=[W, Y], model=V41, **ND))
    add("v41-tool-addition-only", B([U("u0"), A("a0"), {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "y"}}]}, U("u1")], tools=[W, Y], model=V41))
    add("v41-tool-reference", B([U("w"), A([tu("t1")]), U([tr("t1", [{"type": "tool_reference", "tool_name": "y"}])])], tools=[W, Y], model=V41, **ND))
    add("v41-tool-reference-then-call", B([U("w"), A([tu("t1")]), U([tr("t1", [{"type": "text", "text": "found"}, {"type": "tool_reference", "tool_name": "y"}])]), A([tu("t2", {"q": "z"}, "y")]), U([tr("t2", "done")])], tools=[W, Y], model=V41))
    Z = dict(Y, name="z", description="another deferred tool")
    add("v41-tool-references-several", B([U("w"), A([tu("t1"), tu("t2")]), U([tr("t1", [{"type": "tool_reference", "tool_name": "y"}, {"type": "text", "text": "and"}, {"type": "tool_reference", "tool_name": "z"}]), tr("t2", [{"type": "tool_reference", "tool_name": "y"}]), {"type": "text", "text": "go"}])], tools=[W, Y, Z], model=V41))
    add("v41-tool-reference-non-deferred", B([U("w"), A([tu("t1")]), U([tr("t1", [{"type": "tool_reference", "tool_name": "get_weather"}])])], tools=[W, Y], model=V41, **ND))
    add("v4-defer-loading-ignored", B([U("w"), A([tu("t1")]), U([tr("t1", [{"type": "tool_reference", "tool_name": "y"}])])], tools=[W, Y], **ND))
    add("consecutive-users", B([U("u1"), U("u2")], **ND))
    add("consecutive-assistants", B([U("u1"), A("a1"), A("a2"), U("u2")], **ND))
    add("assistant-first", B([A("a0"), U("u1")], **ND))
    add("assistant-empty-string", B([U("x"), A(""), U("y")], **ND))
    add("trailing-assistant-not-prefix", B([U("u1"), A("The answer is")], **ND))
    add("trailing-assistant-think", B([U("u1"), A([th("plan"), {"type": "text", "text": "pre"}])]))
    add("trailing-assistant-thinking-only", B([U("u1"), A([th("plan")])]))
    add("history-thinking-dropped", B([U("u1"), A([th("T"), {"type": "text", "text": "a1"}]), U("u2")]))
    add("history-thinking-kept-with-tools", B([U("u1"), A([th("T"), {"type": "text", "text": "a1"}]), U("u2")], tools=[W]))
    add("history-two-thinking-blocks", B([U("w?"), A([th("T1"), th("T2"), tu("t1")]), U([tr("t1")])], tools=[W]))
    add("history-thinking-after-text", B([U("w?"), A([{"type": "text", "text": "a"}, th("T2"), tu("t1")]), U([tr("t1")])], tools=[W]))
    add("tool-flow", B([U("w?"), A([{"type": "text", "text": "checking"}, tu("t1")]), U([tr("t1")])], tools=[W], **ND))
    add("tool-flow-think", B([U("w?"), A([th("need weather"), {"type": "text", "text": "checking"}, tu("t1")]), U([tr("t1")])], tools=[W]))
    add("tool-flow-think-no-thinking-block", B([U("w?"), A([tu("t1")]), U([tr("t1")])], tools=[W]))
    add("tool-flow-v41-think", B([U("w?"), A([th("T"), tu("t1")]), U([tr("t1")]), A("Sunny."), U("thanks")], tools=[W], model=V41))
    add("parallel-reversed-results", B([U("w?"), A([tu("t1"), tu("t2", {"city": "Rome"})]), U([tr("t2", "rainy"), tr("t1")])], tools=[W], **ND))
    add("parallel-id-order", B([U("w?"), A([tu("toolu_b", {"city": "B"}), tu("toolu_a", {"city": "A"}), tu("toolu_10"), tu("toolu_9")]), U([tr("toolu_b", "rb"), tr("toolu_a", "ra"), tr("toolu_10", "r10"), tr("toolu_9", "r9")])], tools=[W], **ND))
    add("tool-result-then-text", B([U("w?"), A([tu("t1")]), U([tr("t1"), {"type": "text", "text": "thanks"}])], tools=[W], **ND))
    add("tool-result-blocks", B([U("w?"), A([tu("t1")]), U([tr("t1", [{"type": "text", "text": "p1"}, {"type": "image", "source": {"type": "url", "url": "https://x"}}, {"type": "text", "text": "p2"}])])], tools=[W], **ND))
    add("tool-result-empty-list", B([U("w?"), A([tu("t1")]), U([tr("t1", [])])], tools=[W], **ND))
    add("tool-result-no-content", B([U("w?"), A([tu("t1")]), U([{"type": "tool_result", "tool_use_id": "t1"}])], tools=[W], **ND))
    add("tool-result-is-error", B([U("w?"), A([tu("t1")]), U([tr("t1", "boom", is_error=True)])], tools=[W], **ND))
    add("tool-result-document", B([U("w?"), A([tu("t1")]), U([tr("t1", [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "D"}}])])], tools=[W], **ND))
    add("tool-result-tool-reference", B([U("w?"), A([tu("t1")]), U([tr("t1", [{"type": "tool_reference", "tool_name": "get_weather"}])])], tools=[W], **ND))
    add("tool-input-types", B([U("w?"), A([tu("t1", {"s": "x\n<think>", "n": 1, "f": 1.5, "e": 1e-7, "b": False, "z": None, "a": [1, "x"], "o": {"k": "v", "é": "中"}})]), U([tr("t1")])], tools=[W], **ND))
    add("tool-input-empty", B([U("w?"), A([tu("t1", {})]), U([tr("t1")])], tools=[W], **ND))
    add("tool-input-string", B([U("w?"), A([tu("t1", "not an object")]), U([tr("t1")])], tools=[W], **ND))
    add("tool-input-array", B([U("w?"), A([tu("t1", [1, 2])]), U([tr("t1")])], tools=[W], **ND))
    add("tool-input-null", B([U("w?"), A([{"type": "tool_use", "id": "t1", "name": "get_weather", "input": None}]), U([tr("t1")])], tools=[W], **ND))
    add("tool-use-two-texts-before", B([U("w?"), A([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, tu("t1")]), U([tr("t1")])], tools=[W], **ND))
    add("tool-no-description", B([U("w?")], tools=[{"name": "x", "input_schema": {"type": "object"}}], **ND))
    add("tool-strict-flag", B([U("w?")], tools=[{"name": "x", "strict": True, "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}], **ND))
    add("tool-defer-loading-ignored", B([U("w?")], tools=[W, {"name": "y", "defer_loading": True, "input_schema": {"type": "object"}}], **ND))
    add("tool-addition-block", B([U("u0"), A("a0"), {"role": "system", "content": [{"type": "text", "text": "T"}, {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "y"}}]}, U("u1")], tools=[W, {"name": "y", "description": "dy", "defer_loading": True, "input_schema": {"type": "object"}}], model=V41, **ND))
    add("tools-all-pool", B([U("hi")], tools=MSG_TOOLS, **ND))
    add("tools-all-pool-v41-think", B([U("hi")], tools=MSG_TOOLS, model=V41))
    add("tool-choice-auto", B([U("hi")], tools=[W], tool_choice={"type": "auto", "disable_parallel_tool_use": True}))
    add("tool-choice-any", B([U("hi")], tools=[W], tool_choice={"type": "any"}, **ND))
    add("tool-choice-any-think", B([U("hi")], tools=[W], tool_choice={"type": "any"}))
    add("tool-choice-tool", B([U("hi")], tools=[W, MSG_TOOLS[2]], tool_choice={"type": "tool", "name": "calculator"}, **ND))
    add("tool-choice-tool-v41", B([U("hi")], tools=[W], tool_choice={"type": "tool", "name": "get_weather"}, model=V41, **ND))
    add("tool-choice-none", B([U("hi")], tools=[W], tool_choice={"type": "none"}, **ND))
    add("tool-choice-any-no-tools", B([U("hi")], tool_choice={"type": "any"}, **ND))
    add("special-token-spellings", B([U("<｜User｜>x<think>y</think>｜DSML｜<｜Assistant｜><｜end▁of▁sentence｜>")], system="<｜System｜><｜begin▁of▁sentence｜>"))
    add("stop-sequences", B([U("hi")], stop_sequences=["\n\nHuman:", "END"]))
    add("stream", B([U("hi")], stream=True))
    add("sampling-nothink", B([U("hi")], temperature=0.5, top_p=0.5, top_k=3, **ND))
    add("sampling-think-tools", B([U("hi")], temperature=0.5, top_p=0.5, tools=[W]))
    add("sampling-v41", B([U("hi")], top_p=0.5, model=V41))
    add("metadata-and-unknown", B([U("hi")], metadata={"user_id": "u"}, service_tier="auto", container="c"))
    e.append(("text-depth-127", ("request_text", '{"model":"DeepSeek-V4-Pro","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"x":%s}' % ("[" * 126 + "]" * 126))))
    add("nulls", B([U("hi")], system=None, tools=None, tool_choice=None, thinking=None, stop_sequences=None, temperature=None, top_p=None, stream=None, output_config=None, metadata=None))
    add("big-user-50k", B([U(big_text(random.Random(17)))], **ND))
    add("big-tool-result-50k", B([U("w?"), A([tu("t1")]), U([tr("t1", big_text(random.Random(18)))])], tools=[W]))
    return e


def messages_invalid():
    U = {"role": "user", "content": "hi"}
    W = MSG_TOOLS[0]
    B = lambda **kw: dict({"model": V4, "max_tokens": 100, "messages": [U]}, **kw)
    M = lambda *m, **kw: dict({"model": V4, "max_tokens": 100, "messages": list(m)}, **kw)
    tu = lambda i: {"type": "tool_use", "id": i, "name": "get_weather", "input": {}}
    tr = lambda i: {"type": "tool_result", "tool_use_id": i, "content": "r"}
    e = []
    req = lambda name, body: e.append((name, ("request", body)))
    txt = lambda name, t: e.append((name, ("request_text", t)))
    raw = lambda name, b: e.append((name, ("request_bytes_b64", b)))
    txt("malformed-eof", '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user"')
    txt("malformed-empty", "")
    txt("malformed-trailing-comma", '{"model":"DeepSeek-V4-Pro","messages":[],}')
    txt("malformed-infinity", '{"model":"DeepSeek-V4-Pro","temperature":Infinity,"messages":[]}')
    txt("top-level-array", "[1]")
    txt("top-level-number", "42")
    txt("depth-128", '{"model":"DeepSeek-V4-Pro","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"x":%s}' % ("[" * 127 + "]" * 127))
    req("image-v41-file-id", M({"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}, model=V41))
    req("v41-all-tools-deferred", B(model=V41, tools=[{"name": "y", "defer_loading": True, "input_schema": {"type": "object"}}]))
    req("tool-reference-unknown", M(U, {"role": "assistant", "content": [tu("t1")]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "tool_reference", "tool_name": "zz"}]}]}, tools=[W], model=V41))
    req("image-v41-in-assistant", M(U, {"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]}, U, model=V41))
    req("image-v41-bad-url", M({"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}]}, model=V41))
    raw("bytes-invalid-utf8", b'{"model":"DeepSeek-V4-Pro","max_tokens":5,"messages":[{"role":"user","content":"\x80"}]}')
    raw("bytes-truncated-utf8", b'{"model":"DeepSeek-V4-Pro","max_tokens":5,"messages":[{"role":"user","content":"\xe4\xb8"}]}')
    req("model-missing", {"max_tokens": 5, "messages": [U]})
    req("model-unknown", B(model="claude-sonnet-4"))
    req("messages-missing", {"model": V4, "max_tokens": 5})
    req("messages-empty", B(messages=[]))
    req("role-tool", M({"role": "tool", "content": "x"}))
    req("role-latest-reminder", M(U, {"role": "latest_reminder", "content": "x"}))
    req("role-developer", M({"role": "developer", "content": "x"}, U))
    req("content-null", M({"role": "user", "content": None}))
    req("content-empty-list", M({"role": "user", "content": []}))
    req("assistant-empty-list", M(U, {"role": "assistant", "content": []}, U))
    req("block-unknown-type", M({"role": "user", "content": [{"type": "video"}]}))
    req("block-redacted-thinking", M(U, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}, U))
    req("block-text-missing-text", M({"role": "user", "content": [{"type": "text"}]}))
    req("image-bad-media-type", M({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": "AA=="}}]}))
    req("thinking-in-user", M({"role": "user", "content": [{"type": "thinking", "thinking": "t", "signature": ""}]}))
    req("tool-use-in-user", M({"role": "user", "content": [tu("t1")]}))
    req("tool-result-in-assistant", M(U, {"role": "assistant", "content": [tr("t1")]}))
    req("tool-result-orphan", M({"role": "user", "content": [tr("t1")]}))
    req("tool-use-unanswered-last", M(U, {"role": "assistant", "content": [tu("t1")]}, tools=[W]))
    req("tool-use-answered-late", M(U, {"role": "assistant", "content": [tu("t1")]}, U, {"role": "user", "content": [tr("t1")]}, tools=[W]))
    req("tool-use-text-after", M(U, {"role": "assistant", "content": [tu("t1"), {"type": "text", "text": "after"}]}, {"role": "user", "content": [tr("t1")]}, tools=[W]))
    req("tool-result-after-text", M(U, {"role": "assistant", "content": [tu("t1")]}, {"role": "user", "content": [{"type": "text", "text": "x"}, tr("t1")]}, tools=[W]))
    req("tool-use-duplicate-ids", M(U, {"role": "assistant", "content": [tu("t1"), tu("t1")]}, {"role": "user", "content": [tr("t1")]}, tools=[W]))
    req("tool-result-duplicate", M(U, {"role": "assistant", "content": [tu("t1")]}, {"role": "user", "content": [tr("t1"), tr("t1")]}, tools=[W]))
    req("tool-use-missing-id", M(U, {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}))
    req("server-tool-use-block", M(U, {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}}]}))
    req("web-search-tool-result-block", M(U, {"role": "assistant", "content": [{"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}]}))
    req("tool-addition-in-user", M({"role": "user", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "get_weather"}}]}, tools=[W]))
    req("tool-addition-unknown-tool", M({"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "zz"}}]}, U, tools=[W]))
    req("server-tool-web-search", B(tools=[W, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]))
    req("server-tool-bash", B(tools=[{"type": "bash_20250124", "name": "bash"}]))
    req("tool-missing-input-schema", B(tools=[{"name": "x"}]))
    req("tool-schema-not-object", B(tools=[{"name": "x", "input_schema": {"type": "string"}}]))
    req("tool-names-duplicate", B(tools=[W, W]))
    req("tool-name-pattern", B(tools=[{"name": "bad name", "input_schema": {"type": "object"}}]))
    req("tool-choice-missing-type", B(tools=[W], tool_choice={}))
    req("tool-choice-unknown", B(tools=[W], tool_choice={"type": "required"}))
    req("tool-choice-tool-unknown-name", B(tools=[W], tool_choice={"type": "tool", "name": "zz"}, thinking={"type": "disabled"}))
    req("tool-choice-tool-thinking", B(tools=[W], tool_choice={"type": "tool", "name": "get_weather"}))
    req("max-tokens-0", B(max_tokens=0))
    req("max-tokens-negative", B(max_tokens=-5))
    req("max-tokens-string", B(max_tokens="10"))
    req("temperature-over", B(temperature=2.5))
    req("top-p-zero", B(top_p=0))
    req("thinking-unknown-type", B(thinking={"type": "on"}))
    req("thinking-missing-type", B(thinking={"budget_tokens": 10}))
    req("effort-unknown", B(output_config={"effort": "extreme"}))
    req("system-number", B(system=5))
    req("system-block-image", B(system=[{"type": "image", "source": {"type": "url", "url": "https://x"}}]))
    req("stop-sequences-string", B(stop_sequences="END"))
    req("stop-sequences-empty-string", B(stop_sequences=[""]))
    req("stream-string", B(stream="yes"))
    return e


# --------------------------------------------------------------------------
# OpenAI Responses
# --------------------------------------------------------------------------
RESP_TOOLS = [{"type": "function", "name": t["name"], **({"description": t["description"]} if "description" in t else {}),
               **({"parameters": t["parameters"]} if "parameters" in t else {})} for t in TOOL_POOL]
NAMESPACE = {"type": "namespace", "name": "fs", "description": "File system tools",
             "tools": [{"type": "function", "name": "read", "description": "Read a file",
                        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                       {"type": "function", "name": "write", "parameters": {"type": "object"}}]}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "ignored description"}


def resp_content(rng, budget, role):
    big = maybe_big(rng, budget)
    if big is not None:
        return big
    if rng.random() < 0.5:
        return rand_text(rng)
    parts = []
    kind = "output_text" if role == "assistant" else "input_text"
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if role != "assistant" and r < 0.1:
            parts.append({"type": "input_image", "image_url": "https://example.com/i.png", "detail": "auto"})
        elif role != "assistant" and r < 0.15:
            parts.append({"type": "input_file", "file_id": "file-1"})
        else:
            p = {"type": kind, "text": rand_text(rng)}
            if kind == "output_text" and rng.random() < 0.3:
                p["annotations"] = []
            parts.append(p)
    return parts


def responses_random(rng, budget):
    body = {"model": pick_model(rng)}
    if rng.random() < 0.3:
        body["instructions"] = rand_text(rng)
    eff = rng.choice([None, None, None, "none", "none", "none"] + EFFORTS)
    if eff or rng.random() < 0.1:
        body["reasoning"] = {}
        if eff:
            body["reasoning"]["effort"] = eff
        if rng.random() < 0.3:
            body["reasoning"]["summary"] = rng.choice(["auto", "concise", "detailed"])
    thinking_on = eff != "none"
    tools = []
    if rng.random() < 0.5:
        tools = [dict(t) for t in rng.sample(RESP_TOOLS, rng.randint(1, 3))]
        if rng.random() < 0.2:
            for t in tools:
                t["strict"] = False
        if rng.random() < 0.2:
            tools.append(NAMESPACE)
        if rng.random() < 0.2:
            tools.append(APPLY_PATCH)
        if rng.random() < 0.1:
            tools.append({"type": "web_search"})
        body["tools"] = tools
        r = rng.random()
        fnames = [t["name"] for t in tools if t["type"] == "function"]
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.3:
            body["tool_choice"] = "auto"
        elif r < 0.38 and not thinking_on:
            body["tool_choice"] = "required"
        elif r < 0.45 and not thinking_on and fnames:
            body["tool_choice"] = {"type": "function", "name": rng.choice(fnames)}
    fnames = []
    for t in tools:
        if t["type"] == "function":
            fnames.append(t["name"])
        elif t["type"] == "namespace":
            fnames += [f"fs__{x['name']}" for x in t["tools"]]
    fnames = fnames or ["get_weather"]
    has_patch = any(t.get("name") == "apply_patch" for t in tools)
    if rng.random() < 0.25 and "instructions" not in body or rng.random() < 0.1:
        body["input"] = rand_text(rng)
    else:
        items = []
        if rng.random() < 0.2:
            items.append({"role": rng.choice(["system", "developer"]), "content": rand_text(rng)})
        n_turns = rng.randint(1, 4)
        cid = 0
        for turn in range(n_turns):
            m = {"role": "user", "content": resp_content(rng, budget, "user")}
            if rng.random() < 0.3:
                m["type"] = "message"
            items.append(m)
            if rng.random() < 0.06:
                items.append({"role": "developer", "content": rand_text(rng)})
            last = turn == n_turns - 1
            if last and rng.random() < 0.6:
                break
            for _ in range(rng.choice([0, 0, 1, 1, 2])):
                if rng.random() < 0.5:
                    items.append({"type": "reasoning", "summary": [],
                                  "content": [{"type": "reasoning_text", "text": rand_text(rng)} for _ in range(rng.randint(1, 2))]})
                if rng.random() < 0.3:
                    items.append({"type": "message", "role": "assistant", "content": resp_content(rng, budget, "assistant")})
                calls = []
                for _ in range(rng.randint(1, 3)):
                    cid += 1
                    if has_patch and rng.random() < 0.2:
                        calls.append({"type": "custom_tool_call", "call_id": f"call_{cid}", "name": "apply_patch",
                                      "input": "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch"})
                    else:
                        calls.append({"type": "function_call", "call_id": f"call_{cid}", "name": rng.choice(fnames),
                                      "arguments": args_text(rng, rand_args(rng))})
                        if rng.random() < 0.2:
                            calls[-1]["id"] = f"fc_{cid}"
                            calls[-1]["status"] = "completed"
                items += calls
                order = list(calls)
                if rng.random() < 0.3:
                    rng.shuffle(order)
                for c in order:
                    out = rand_text(rng) if rng.random() < 0.7 else [{"type": "input_text", "text": rand_text(rng)} for _ in range(rng.randint(1, 2))]
                    items.append({"type": "custom_tool_call_output" if c["type"] == "custom_tool_call" else "function_call_output",
                                  "call_id": c["call_id"], "output": out})
            if last and rng.random() < 0.5:
                break
            if rng.random() < 0.4:
                items.append({"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": rand_text(rng)}]})
            items.append({"type": "message", "role": "assistant", "content": resp_content(rng, budget, "assistant")}
                         if rng.random() < 0.5 else {"role": "assistant", "content": rand_text(rng)})
        body["input"] = items
    if rng.random() < 0.12:
        body["text"] = {"format": {"type": "json_object"}}
        body["instructions"] = "Respond in json. " + body.get("instructions", "")
    elif rng.random() < 0.1:
        body["text"] = {"format": rng.choice([
            {"type": "text"},
            {"type": "json_schema", "name": "answer", "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
             **({"strict": True} if rng.random() < 0.5 else {})}])}
        if rng.random() < 0.5:
            body["text"]["verbosity"] = rng.choice(["low", "medium", "high"])
    sampling_fields(rng, body, max_key="max_output_tokens")
    if rng.random() < 0.1:
        body["top_logprobs"] = rng.choice([0, 3, 20])
    if rng.random() < 0.05:
        body["user"] = "user-9"
        body["store"] = False
        body["previous_response_id"] = None
    return body


def responses_edges():
    u = lambda t: {"role": "user", "content": t}
    W = {"type": "function", "name": "get_weather", "description": "Get weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    NT = {"reasoning": {"effort": "none"}}
    B = lambda **kw: dict({"model": V4}, **kw)
    fc = lambda cid, args='{"city":"Paris"}', name="get_weather", **kw: dict({"type": "function_call", "call_id": cid, "name": name, "arguments": args}, **kw)
    fo = lambda cid, out="sunny": {"type": "function_call_output", "call_id": cid, "output": out}
    rs = lambda *t: {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": x} for x in t]}
    e = []
    add = lambda name, body: e.append((name, ("request", body)))
    add("string-input", B(input="Hi"))
    add("string-input-v41", B(input="Hi", model=V41))
    add("string-input-empty", B(input="", **NT))
    add("instructions", B(input="Hi", instructions="Be brief."))
    add("instructions-only", B(instructions="Just instructions"))
    add("instructions-v41", B(input="Hi", instructions="Be brief.", model=V41))
    for eff in EFFORTS:
        add(f"effort-{eff}", B(input="Hi", reasoning={"effort": eff}))
        add(f"effort-{eff}-v41", B(input="Hi", reasoning={"effort": eff}, model=V41))
    add("reasoning-summary-only", B(input="Hi", reasoning={"summary": "auto"}))
    add("reasoning-effort-null", B(input="Hi", reasoning={"effort": None}))
    add("items-messages", B(input=[u("a"), {"role": "assistant", "content": "b"}, u("c")], **NT))
    add("items-typed-parts", B(input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "o1", "annotations": []}, {"type": "output_text", "text": "o2"}]}, u("c")], **NT))
    add("system-item", B(input=[{"role": "system", "content": "S"}, u("a")], **NT))
    add("system-items-with-empty", B(instructions="", input=[{"role": "system", "content": ""}, {"role": "system", "content": "S2"}, u(""), u("a")], **NT))
    add("developer-item-first", B(input=[{"role": "developer", "content": "D"}, u("a")], **NT))
    add("developer-item-mid", B(input=[u("a"), {"role": "assistant", "content": "b"}, {"role": "developer", "content": "D"}, u("c")], **NT))
    add("system-item-mid-v41", B(input=[u("a"), {"role": "assistant", "content": "b"}, {"role": "system", "content": "S"}, u("c")], model=V41, **NT))
    add("instructions-plus-system-item", B(instructions="INS", input=[{"role": "system", "content": "S"}, u("a")], **NT))
    add("instructions-plus-developer-last", B(instructions="INS", input=[u("a"), {"role": "developer", "content": "D"}], model=V41, **NT))
    add("input-image", B(input=[{"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "https://x/y.png"}]}], **NT))
    add("input-image-file-id", B(input=[{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}], **NT))
    add("input-file", B(input=[{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], **NT))
    add("input-file-data", B(input=[{"role": "user", "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,AA==", "filename": "a.pdf"}]}], **NT))
    add("image-v4-both-not-checked", B(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x", "file_id": "f"}]}], **NT))
    add("image-v4-neither-not-checked", B(input=[{"role": "user", "content": [{"type": "input_image"}]}], **NT))
    add("input-file-neither", B(input=[{"role": "user", "content": [{"type": "input_file"}]}], **NT))
    add("input-file-both-v41", B(model=V41, input=[{"role": "user", "content": [{"type": "input_file", "file_id": "f", "file_data": "d", "filename": "a"}]}], **NT))
    add("image-v41", B(model=V41, input=[{"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}]}], **NT))
    add("image-v41-system", B(model=V41, input=[{"role": "system", "content": [{"type": "input_image", "image_url": "https://x/s.png"}]}, u("x")], **NT))
    add("image-v41-function-output", B(model=V41, input=[u("w?"), fc("c1"), {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": "https://x/o.png"}]}], tools=[W], **NT))
    e.append(("text-depth-127", ("request_text", '{"model":"DeepSeek-V4-Pro","input":"hi","x":%s}' % ("[" * 126 + "]" * 126))))
    add("assistant-input-text", B(input=[u("a"), {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}, u("b")], **NT))
    add("user-output-text", B(input=[{"role": "user", "content": [{"type": "output_text", "text": "x"}]}], **NT))
    add("trailing-assistant", B(input=[u("q"), {"role": "assistant", "content": "partial"}]))
    add("consecutive-users", B(input=[u("a"), u("b")], **NT))
    add("unknown-item-dropped", B(input=[u("q"), {"type": "item_reference", "id": "x"}, {"type": "foo"}], **NT))
    add("web-search-call-dropped", B(input=[u("q"), {"type": "web_search_call", "id": "w", "status": "completed", "action": {"type": "search", "query": "x"}}, u("q2")], **NT))
    add("fc-flow", B(input=[u("w?"), fc("c1"), fo("c1")], tools=[W], **NT))
    add("fc-flow-think", B(input=[u("w?"), rs("need tool"), fc("c1"), fo("c1")], tools=[W]))
    add("fc-flow-think-no-reasoning", B(input=[u("w?"), fc("c1"), fo("c1")], tools=[W]))
    add("fc-flow-reasoning-summary-ignored", B(input=[u("w?"), {"type": "reasoning", "summary": [{"type": "summary_text", "text": "SUM"}], "encrypted_content": "xx"}, fc("c1"), fo("c1")], tools=[W]))
    add("fc-flow-v41", B(input=[u("w?"), rs("R"), fc("c1"), fo("c1"), {"role": "assistant", "content": "Sunny"}, u("thx")], tools=[W], model=V41))
    add("fc-parallel-reversed", B(input=[u("w?"), fc("c1"), fc("c2", '{"city":"Rome"}'), fo("c2", "rainy"), fo("c1")], tools=[W], **NT))
    add("fc-parallel-id-order", B(input=[u("w?"), fc("call_b", '{"city":"B"}'), fc("call_a", '{"city":"A"}'), fc("call_10"), fc("call_9"), fo("call_9", "r9"), fo("call_a", "ra"), fo("call_10", "r10"), fo("call_b", "rb")], tools=[W], **NT))
    add("fc-interleaved", B(input=[u("w?"), fc("c1"), fo("c1"), fc("c2", '{"city":"Rome"}'), fo("c2", "rainy")], tools=[W], **NT))
    add("fc-with-message-before", B(input=[u("w?"), {"role": "assistant", "content": "let me check"}, fc("c1"), fo("c1")], tools=[W], **NT))
    add("fc-output-parts", B(input=[u("w?"), fc("c1"), {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "p1"}, {"type": "input_image", "image_url": "https://x"}, {"type": "input_text", "text": "p2"}]}], tools=[W], **NT))
    add("fc-id-status", B(input=[u("w?"), fc("c1", id="fc_1", status="completed"), fo("c1")], tools=[W], **NT))
    add("fc-args-invalid", B(input=[u("w?"), fc("c1", "{bad"), fo("c1")], tools=[W], **NT))
    add("fc-final-then-user", B(input=[u("w?"), fc("c1"), fo("c1"), {"role": "assistant", "content": "sunny!"}, u("thx")], tools=[W], **NT))
    add("reasoning-item-no-tools", B(input=[u("q"), rs("R1"), {"role": "assistant", "content": "A"}, u("q2")]))
    add("reasoning-item-with-tools", B(input=[u("q"), rs("R1"), {"role": "assistant", "content": "A"}, u("q2")], tools=[W]))
    add("reasoning-item-trailing", B(input=[u("q"), rs("R1")], tools=[W]))
    add("reasoning-two-parts", B(input=[u("q"), rs("R1", "R2"), {"role": "assistant", "content": "A"}, u("q2")], tools=[W]))
    add("reasoning-two-items", B(input=[u("q"), rs("R1"), rs("R2"), {"role": "assistant", "content": "A"}, u("q2")], tools=[W]))
    add("reasoning-after-message", B(input=[u("q"), {"role": "assistant", "content": "A"}, rs("R1"), u("q2")], tools=[W]))
    add("tool-strict-default", B(input="hi", tools=[W], **NT))
    add("tool-strict-true", B(input="hi", tools=[dict(W, strict=True)], **NT))
    add("tool-strict-false", B(input="hi", tools=[dict(W, strict=False)], **NT))
    add("tool-no-params", B(input="hi", tools=[{"type": "function", "name": "f"}], **NT))
    add("tool-defer-loading", B(input="hi", tools=[W, {"type": "function", "name": "g", "parameters": {"type": "object"}, "defer_loading": True}], **NT))
    add("tools-all-pool", B(input="hi", tools=RESP_TOOLS, **NT))
    add("namespace-tools", B(input="hi", tools=[NAMESPACE, W], **NT))
    add("namespace-call", B(input=[u("read"), {"type": "function_call", "call_id": "c1", "name": "read", "namespace": "fs", "arguments": '{"path":"/a"}'}, fo("c1", "data")], tools=[NAMESPACE], **NT))
    add("namespace-call-joined-name", B(input=[u("read"), fc("c1", '{"path":"/a"}', "fs__read"), fo("c1", "data")], tools=[NAMESPACE], **NT))
    G = {"type": "function", "name": "g", "description": "dg", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    tsc = {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {"query": "weather tools"}}
    tso = lambda tools: {"type": "tool_search_output", "call_id": "s1", "execution": "client", "tools": tools}
    add("v41-developer-role-is-system", B(model=V41, input=[{"role": "developer", "content": "D"}, u("a"), {"role": "assistant", "content": "b"}, {"role": "developer", "content": "D2"}, u("c")], **NT))
    add("v41-namespace-tools", B(model=V41, input="hi", tools=[NAMESPACE, dict(NAMESPACE, name="nodesc", description=""), W], **NT))
    add("v41-namespace-call", B(model=V41, input=[u("read"), {"type": "function_call", "call_id": "c1", "name": "read", "namespace": "fs", "arguments": '{"path":"/a"}'}, fo("c1", "data")], tools=[NAMESPACE], **NT))
    add("v41-tool-search-flow", B(model=V41, input=[u("x"), tsc, tso([G])], tools=[W, {"type": "tool_search"}], **NT))
    add("v41-tool-search-then-call", B(model=V41, input=[u("x"), rs("search first"), tsc, tso([G]), fc("c2", '{"q":"a"}', "g"), fo("c2", "res")], tools=[W, {"type": "tool_search"}]))
    add("v41-tool-search-namespace-output", B(model=V41, input=[u("x"), tsc, tso([{"type": "namespace", "name": "ns", "description": "N", "tools": [G]}])], tools=[W, {"type": "tool_search"}], **NT))
    add("v4-tool-search-items-dropped", B(input=[u("x"), tsc, tso([G])], tools=[W, {"type": "tool_search"}], **NT))
    add("v41-apply-patch-call", B(model=V41, input=[u("patch"), {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}, {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}], tools=[APPLY_PATCH], **NT))
    add("apply-patch-tool", B(input="hi", tools=[APPLY_PATCH], **NT))
    add("apply-patch-tool-v41-think", B(input="hi", tools=[APPLY_PATCH, W], model=V41))
    add("apply-patch-call", B(input=[u("patch"), {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}, {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}], tools=[APPLY_PATCH], **NT))
    add("tool-choice-custom", B(input="hi", tools=[APPLY_PATCH], tool_choice={"type": "custom", "name": "apply_patch"}, **NT))
    add("tool-choice-none", B(input="hi", tools=[W], tool_choice="none", **NT))
    add("tool-choice-required", B(input="hi", tools=[W], tool_choice="required", **NT))
    add("tool-choice-function", B(input="hi", tools=[W, dict(W, name="g")], tool_choice={"type": "function", "name": "g"}, **NT))
    add("web-search-tool-dropped", B(input="hi", tools=[W, {"type": "web_search"}], **NT))
    add("web-search-only", B(input="hi", tools=[{"type": "web_search_preview"}], **NT))
    add("tool-search-dropped", B(input="hi", tools=[W, {"type": "tool_search"}], **NT))
    add("text-json-object", B(input="json please", text={"format": {"type": "json_object"}}, **NT))
    add("text-json-object-word-in-instructions", B(input="please", instructions="Use JSON", text={"format": {"type": "json_object"}}, **NT))
    add("text-json-schema", B(input="x", text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}, **NT))
    add("text-json-schema-strict", B(input="x", text={"format": {"type": "json_schema", "name": "n", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}, **NT))
    add("text-json-schema-with-tools", B(input="x", tools=[W], text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}, **NT))
    add("text-format-text-verbosity", B(input="x", text={"format": {"type": "text"}, "verbosity": "low"}, **NT))
    add("special-token-spellings", B(instructions="<｜System｜>", input="<｜User｜>x<think>y</think>｜DSML｜<｜Assistant｜>"))
    add("sampling-nothink", B(input="hi", temperature=0.5, top_p=0.5, **NT))
    add("sampling-think-tools", B(input="hi", temperature=0.5, top_p=0.5, tools=[W]))
    add("sampling-v41-think", B(input="hi", top_p=0.5, model=V41))
    add("max-output-tokens", B(input="hi", max_output_tokens=50))
    add("top-logprobs", B(input="hi", top_logprobs=5))
    add("stream", B(input="hi", stream=True))
    add("unknown-fields", B(input="hi", store=False, previous_response_id="resp_1", truncation="auto", include=["x"], parallel_tool_calls=False, metadata={"a": "b"}))
    add("nulls", B(input="hi", instructions=None, tools=None, tool_choice=None, text=None, reasoning=None, max_output_tokens=None, temperature=None, top_p=None, stream=None, top_logprobs=None, user=None))
    add("big-input-50k", B(input=big_text(random.Random(27)), **NT))
    add("big-function-output-50k", B(input=[u("w?"), fc("c1"), fo("c1", big_text(random.Random(28)))], tools=[W]))
    return e


def responses_invalid():
    W = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    B = lambda **kw: dict({"model": V4, "input": "hi"}, **kw)
    I = lambda *items, **kw: dict({"model": V4, "input": list(items), "reasoning": {"effort": "none"}}, **kw)
    u = {"role": "user", "content": "hi"}
    fc = lambda cid: {"type": "function_call", "call_id": cid, "name": "get_weather", "arguments": "{}"}
    fo = lambda cid: {"type": "function_call_output", "call_id": cid, "output": "r"}
    e = []
    req = lambda name, body: e.append((name, ("request", body)))
    txt = lambda name, t: e.append((name, ("request_text", t)))
    raw = lambda name, b: e.append((name, ("request_bytes_b64", b)))
    txt("malformed-eof", '{"model":"DeepSeek-V4-Pro","input":"hi"')
    txt("malformed-empty", "")
    txt("malformed-comment", '{"model":"DeepSeek-V4-Pro",/*x*/"input":"hi"}')
    # U+0000 inside strings the codec copies (found by fuzzing: heap over-read)
    txt("input-string-nul", '{"model":"DeepSeek-V4-Pro","input":"a\\u0000bcdefgh"}')
    txt("output-string-nul", '{"model":"DeepSeek-V4-Pro","reasoning":{"effort":"none"},"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x\\u0000yz"}]}')
    txt("bignum-input", '{"model":"DeepSeek-V4-Pro","input":18446744073709551616}')
    txt("bignum-instructions", '{"model":"DeepSeek-V4-Pro","input":"hi","instructions":9223372036854775808}')
    txt("malformed-unquoted-key", '{model:"DeepSeek-V4-Pro","input":"hi"}')
    txt("top-level-array", "[]")
    txt("top-level-true", "true")
    txt("depth-128", '{"model":"DeepSeek-V4-Pro","input":"hi","x":%s}' % ("[" * 127 + "]" * 127))
    raw("bytes-invalid-utf8", b'{"model":"DeepSeek-V4-Pro","input":"\xed\xa0\x80"}')
    raw("bytes-latin1", b'{"model":"DeepSeek-V4-Pro","input":"caf\xe9"}')
    req("model-missing", {"input": "hi"})
    req("model-unknown", B(model="gpt-5"))
    req("input-and-instructions-missing", {"model": V4})
    req("input-empty-list", B(input=[]))
    req("input-number", B(input=3))
    req("input-object", B(input={"role": "user", "content": "x"}))
    req("item-no-role", B(input=[{"content": "x"}]))
    req("item-role-tool", B(input=[{"role": "tool", "content": "x"}]))
    req("item-content-null", B(input=[{"role": "user", "content": None}]))
    req("item-content-number", B(input=[{"role": "user", "content": 5}]))
    req("part-refusal", B(input=[u, {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]))
    req("part-unknown", B(input=[{"role": "user", "content": [{"type": "input_audio"}]}]))
    req("image-v41-both", B(model=V41, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x", "file_id": "f"}]}]))
    req("image-v41-neither", B(model=V41, input=[{"role": "user", "content": [{"type": "input_image"}]}]))
    req("image-v41-file-id", B(model=V41, input=[{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]))
    req("image-v41-bad-url", B(model=V41, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "www.example.com/a.png"}]}]))
    req("image-v41-in-assistant", B(model=V41, input=[u, {"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x"}]}]))
    req("function-call-output-orphan", I(u, fo("c1"), tools=[W]))
    req("function-call-without-output", I(u, fc("c1"), tools=[W]))
    req("function-call-output-after-message", I(u, fc("c1"), {"role": "assistant", "content": "x"}, fo("c1"), tools=[W]))
    req("function-call-output-duplicate", I(u, fc("c1"), fo("c1"), fo("c1"), tools=[W]))
    req("function-call-missing-call-id", I(u, {"type": "function_call", "name": "f", "arguments": "{}"}, fo("c1")))
    req("function-call-arguments-object", I(u, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {}}, fo("c1")))
    req("max-output-tokens-0", B(max_output_tokens=0))
    req("max-output-tokens-over", B(max_output_tokens=393217))
    req("max-output-tokens-negative", B(max_output_tokens=-1))
    req("temperature-over", B(temperature=3))
    req("top-p-over", B(top_p=1.5))
    req("top-logprobs-21", B(top_logprobs=21))
    req("top-logprobs-256", B(top_logprobs=256))
    req("effort-unknown", B(reasoning={"effort": "huge"}))
    req("text-format-unknown", B(text={"format": {"type": "xml"}}))
    req("text-json-object-no-json-word", B(text={"format": {"type": "json_object"}}))
    req("text-json-schema-missing-schema", B(text={"format": {"type": "json_schema", "name": "n"}}))
    req("tool-choice-unknown-string", B(tools=[W], tool_choice="any"))
    req("tool-choice-allowed-tools", B(tools=[W], tool_choice={"type": "allowed_tools", "mode": "auto", "tools": []}))
    req("tool-choice-function-missing", B(tools=[W], tool_choice={"type": "function", "name": "zz"}, reasoning={"effort": "none"}))
    req("tool-choice-required-thinking", B(tools=[W], tool_choice="required"))
    req("tool-names-duplicate", B(tools=[W, W]))
    req("tool-name-pattern", B(tools=[{"type": "function", "name": "a.b"}]))
    req("tool-params-not-object", B(tools=[{"type": "function", "name": "f", "parameters": {"type": "array"}}]))
    req("tool-strict-nonconforming", B(tools=[{"type": "function", "name": "f", "strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "required": []}}]))
    req("custom-tool-not-apply-patch", B(tools=[{"type": "custom", "name": "other"}]))
    req("namespace-duplicate-names", B(tools=[{"type": "namespace", "name": "ns", "description": "d", "tools": [W, W]}]))
    req("namespace-custom-inside", B(tools=[{"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "custom", "name": "apply_patch"}]}]))
    req("tool-missing-type", B(tools=[{"name": "f"}]))
    req("instructions-number", B(instructions=5))
    req("user-not-string", B(user={"id": 1}))
    req("stream-string", B(stream="true"))
    return e


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------
PROTOCOLS = {
    "chat": (chat_random, chat_edges, chat_invalid, 20260101),
    "messages": (messages_random, messages_edges, messages_invalid, 20260202),
    "responses": (responses_random, responses_edges, responses_invalid, 20260303),
}


def build(proto, encoder_v4):
    rand_fn, edges_fn, invalid_fn, seed = PROTOCOLS[proto]
    rng = random.Random(seed)
    budget = [4]  # 50 KB contents allowed in random cases
    cases, valid, rand_errors = [], 0, 0
    i = 0
    while valid < MIN_RANDOM_VALID:
        body = rand_fn(rng, budget)
        case = run_case(proto, ("request", body), encoder_v4)
        ok = "facts" in case
        i += 1
        if not ok:
            rand_errors += 1
            if rand_errors > 20:  # keep a few generator-made failures, skip the rest
                continue
        valid += ok
        cases.append(dict({"name": f"rand-{i:03d}" + ("" if ok else "-error")}, **case))
    for name, payload in edges_fn():
        cases.append(dict({"name": "edge-" + name}, **run_case(proto, payload, encoder_v4)))
    for name, payload in invalid_fn():
        cases.append(dict({"name": "err-" + name}, **run_case(proto, payload, encoder_v4)))
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    n_err = sum("facts" not in c for c in cases)
    n_ok = len(cases) - n_err
    assert n_err >= MIN_INVALID, (proto, n_err)
    return cases, n_ok, n_err


def render_file(proto, cases, tok_sha):
    head = {"protocol": proto,
            "oracle": {"deepseek_recipe": dr.__version__, "tokenizer_sha256": tok_sha,
                       "context_limit": CONTEXT_LIMIT,
                       "serialization": 'json.dumps(request, ensure_ascii=False, separators=(",", ":"))'}}
    out = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1] + ',"cases":[\n'
    out += ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)
    return out + "\n]}\n"


def default_tokenizer():
    # fetch_assets.py reuses its cache ($DI_CACHE or ~/.cache/deepinfer).
    out = subprocess.run([sys.executable, str(ROOT / "scripts/fetch_assets.py"), "deepseek-v4-tokenizer"],
                         check=True, capture_output=True, text=True).stdout.split()
    return out[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/codec"))
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--check", action="store_true", help="regenerate and compare with the files in --out")
    ap.add_argument("protocols", nargs="*", help="subset of: " + ", ".join(PROTOCOLS))
    args = ap.parse_args()
    for p in args.protocols:
        if p not in PROTOCOLS:
            ap.error(f"unknown protocol {p!r}")
    if dr.__version__ != "0.2.0":
        sys.exit(f"deepseek-recipe 0.2.0 required, found {dr.__version__}")
    tok_path = args.tokenizer or default_tokenizer()
    tok_sha = hashlib.sha256(pathlib.Path(tok_path).read_bytes()).hexdigest()
    encoder_v4 = DeepseekV4Encoding().with_tokenizer(Tokenizer.from_file(tok_path))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for proto in args.protocols or PROTOCOLS:
        cases, n_ok, n_err = build(proto, encoder_v4)
        text = render_file(proto, cases, tok_sha)
        path = out / f"{proto}.json"
        if args.check:
            same = path.exists() and path.read_text(encoding="utf-8") == text
            status |= not same
            print(f"{proto}: {'identical' if same else 'DIFFERENT'}", file=sys.stderr)
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{proto}: {len(cases)} cases ({n_ok} valid, {n_err} invalid), "
              f"{len(text.encode('utf-8')) / 1e6:.2f} MB", file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
