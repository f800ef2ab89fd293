#!/usr/bin/env python3
"""Generate the output-stream parity fixtures from deepseek-recipe 0.2.0 (the oracle).

    .venv-oracle/bin/python tests/oracle/make_stream_fixtures.py \
        --tokenizer .cache/assets/deepseek-v4/tokenizer.json [--out DIR] [--check]

Run from the repository root.  Writes DIR/chat.json, DIR/messages.json and
DIR/responses.json (default DIR is tests/fixtures/stream).  The behaviour is
specified in docs/stream-spec.md; these files are its ground truth.

Determinism
-----------
All varied material comes from fixed lists and `random.Random(SEED)`.  The oracle
itself produces three kinds of non-deterministic output; each is normalised by
`normalise()` below, identically in events and in the accumulated response, so
two runs give byte-identical files (`--check` regenerates in memory, compares with
the files on disk and also re-runs every case a second time to prove that the
normalised output is stable):

  1. Tool-call ids.  Shape: "call_" + index as %02d (3+ digits from 100 on) + "_"
     + ("ET_" when the reasoning text emitted before the call is empty) +
     20 random chars of [0-9A-Za-z] + 4 random decimal digits.
     Normalised: the 20+4 random chars become "RRRRRRRRRRRRRRRRRRRR0000";
     prefix, index and the "ET_" marker are kept (they are deterministic).
     Regex: call_([0-9]{2,})_(ET_)?[0-9A-Za-z]{20}[0-9]{4}  ->  call_\\1_\\2RRRRRRRRRRRRRRRRRRRR0000
  2. Wall-clock timestamps.  Chat chunks' "created" and Responses' "created_at" /
     "completed_at" (in events and in the accumulated Responses object, which takes
     them from the events) are the current Unix time in seconds.  Any value of these
     three keys >= 1000000000 is replaced by 0 (textually: `"created":0`).  The
     accumulated Chat response's "created" is the constructor argument (CREATED
     below) and is < 1e9, so it is kept.
  3. Nothing else: all other ids are derived from the generator id
     (Responses "rs_<id>_0", "msg_<id>_1", "fc_<id>_2", encrypted_content "<id>-0";
     Messages signature = message id).

File format
-----------
Each file is one JSON object:

  {"protocol": "chat" | "messages" | "responses",
   "oracle": {"package": "deepseek-recipe", "version": "0.2.0",
              "tokenizer": "deepseek-v4 tokenizer.json", "tokenizer_sha256": ...},
   "normalisation": {...as above, machine-readable...},
   "sse_done_data": "[DONE]" | null,           # <Response>.sse_done_data()
   "cases": [case, ...]}                          # one case per line

A case:

  name        unique in the file
  request     the request object; the oracle got
              json.dumps(request, ensure_ascii=False, separators=(",", ":")).
              <Protocol>Request(body).convert(ConversionOptions()) gives the
              ConversationRequest; its parsing_options are used unless
              `parsing_options` is present.
  parsing_options   (optional) explicit ParsingOptions used INSTEAD of the converted
              ones (to reach states a request cannot, e.g. JSON mode in Messages):
              {"parse_tool_calls", "starts_in_tool_calls", "parse_json_output",
               "thinking_initial_stage": "ReasoningStart" | "ReasoningContinuation" |
               "ContentContinuation" | null, "stop_sequences": [...]}
  converted_parsing_options   the parsing options conversion produced (always)
  generator   {"id": ..., "model": ...}: the chunk_generator(request, id, model)
              arguments.  Responses: .with_namespace_tool_map(req.namespace_tool_map())
              .with_echo(req.echo()) are applied.  Messages: default signature.
  tokenizer   true: StreamProcessor(gen, opts, V4 tokenizer); false: no tokenizer.
  steps       the calls made, in order, each with what it returned:
              {"op": "ready", "prompt_usage": {"prompt_tokens", "prompt_cache_hit_tokens"} | null,
                      "system_fingerprint": str | null}
              {"op": "text", "content": str, "token_count": int}
              {"op": "tokens", "token_ids": [int], "logprobs": [[lp, [[id, lp], ...]], ...] | null}
              {"op": "finish_chunk", "reason": "stop" | "length" | "content_filter"}
                  (push(InferenceChunk.finish(...)))
              {"op": "finish"}   (StreamProcessor.finish())
              {"op": "close"}    (StreamProcessor.close())
              Every step has "events": [[sse_event_name, to_json()], ...] (normalised;
              sse_event_name is null for Chat) or "error": "RuntimeError: <message>"
              (then "events" is []).  "finished" is the `finished` property after
              the step.
  response    the accumulated response: <Protocol>Response(RESPONSE_ID, model, CREATED,
              prompt_tokens, prompt_cache_hit_tokens) fed every event of every step
              in order (prompt figures from the first ready step's prompt_usage, 0/0
              when none), .to_json(), normalised.  Omitted (null) when accumulation
              raised; then "response_error" holds the message.
"""
import argparse
import hashlib
import json
import pathlib
import random
import re
import sys

import deepseek_recipe as d

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = 20261130
CREATED = 1700
RESPONSE_ID = "fixed-id"
M4 = "DeepSeek-V4-Pro"
M41 = "DeepSeek-V4.1-Flash"
GEN_IDS = {"chat": "chatcmpl-fixed", "messages": "msg_fixed", "responses": "resp_fixed"}

ID_RE = re.compile(r"call_([0-9]{2,})_(ET_)?[0-9A-Za-z]{20}[0-9]{4}")
TIME_RE = re.compile(r'"(created|created_at|completed_at)":([0-9]{10,})')


def normalise(s):
    s = ID_RE.sub(lambda m: "call_%s_%sRRRRRRRRRRRRRRRRRRRR0000" % (m.group(1), m.group(2) or ""), s)
    s = TIME_RE.sub(lambda m: '"%s":0' % m.group(1), s)
    return s


FIN = {"stop": d.InferenceFinishReason.Stop, "length": d.InferenceFinishReason.Length,
       "content_filter": d.InferenceFinishReason.ContentFilter}
STAGE = {"ReasoningStart": d.ThinkingInitialStage.ReasoningStart,
         "ReasoningContinuation": d.ThinkingInitialStage.ReasoningContinuation,
         "ContentContinuation": d.ThinkingInitialStage.ContentContinuation, None: None}
PROTO = {
    "chat": (d.ChatCompletionRequest, d.ChatCompletionResponse),
    "messages": (d.MessagesRequest, d.MessagesResponse),
    "responses": (d.ResponsesRequest, d.ResponsesResponse),
}

# ----------------------------------------------------------------------------------
# request bodies
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}}


def body(proto, *, model=M4, thinking=True, tools=False, required=False, json_mode=False,
         stop=None, prefix=None, extra=None):
    """prefix: None | ("content", "reasoning") for a Chat prefix continuation."""
    if proto == "chat":
        b = {"model": model, "messages": [{"role": "user", "content": "Answer in json please."}], "stream": True}
        if not thinking:
            b["thinking"] = {"type": "disabled"}
        if tools:
            b["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}},
                          {"type": "function", "function": {"name": "calc"}}]
            if required:
                b["tool_choice"] = "required"
        if json_mode:
            b["response_format"] = {"type": "json_object"}
        if stop is not None:
            b["stop"] = stop
        if prefix is not None:
            msg = {"role": "assistant", "content": prefix[0], "prefix": True}
            if prefix[1] is not None:
                msg["reasoning_content"] = prefix[1]
            b["messages"].append(msg)
    elif proto == "messages":
        b = {"model": model, "max_tokens": 4096, "messages": [{"role": "user", "content": "Answer in json please."}],
             "stream": True}
        if not thinking:
            b["thinking"] = {"type": "disabled"}
        if tools:
            b["tools"] = [{"name": "get_weather", "input_schema": WEATHER_PARAMS},
                          {"name": "calc", "input_schema": {"type": "object"}}]
            if required:
                b["tool_choice"] = {"type": "tool", "name": "get_weather"}
        if stop is not None:
            b["stop_sequences"] = stop if isinstance(stop, list) else [stop]
    else:
        b = {"model": model, "input": "Answer in json please.", "stream": True}
        if not thinking:
            b["reasoning"] = {"effort": "none"}
        if tools:
            b["tools"] = [{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS},
                          {"type": "function", "name": "calc", "parameters": {"type": "object"}}]
            if required:
                b["tool_choice"] = "required"
        if json_mode:
            b["text"] = {"format": {"type": "json_object"}}
    if extra:
        b.update(extra)
    return b


def po_dict(p):
    st = p.thinking_initial_stage
    return {"parse_tool_calls": p.parse_tool_calls, "starts_in_tool_calls": p.starts_in_tool_calls,
            "parse_json_output": p.parse_json_output,
            "thinking_initial_stage": None if st is None else str(st).split(".")[-1],
            "stop_sequences": list(p.stop_sequences)}


def run_case(tok, proto, case):
    Req, Resp = PROTO[proto]
    text = json.dumps(case["request"], ensure_ascii=False, separators=(",", ":"))
    req = Req(text)
    opts = d.ConversionOptions()
    if proto == "responses":
        ntm = req.namespace_tool_map(opts)
        echo = req.echo()
    cr = req.convert(opts)
    conv = po_dict(cr.parsing_options)
    if case.get("parsing_options") is not None:
        o = case["parsing_options"]
        po = d.ParsingOptions(parse_tool_calls=o["parse_tool_calls"], starts_in_tool_calls=o["starts_in_tool_calls"],
                              parse_json_output=o["parse_json_output"],
                              thinking_initial_stage=STAGE[o["thinking_initial_stage"]],
                              stop_sequences=o["stop_sequences"])
    else:
        po = cr.parsing_options
    gid = case["generator"]["id"]
    gmodel = case["generator"]["model"]
    g = Req.chunk_generator(cr, gid, gmodel)
    if proto == "responses":
        g = g.with_namespace_tool_map(ntm).with_echo(echo)
    sp = d.StreamProcessor(g, po, tok if case["tokenizer"] else None)
    all_chunks = []
    steps = []
    prompt = None
    for st in case["ops"]:
        op = st["op"]
        rec = dict(st)
        try:
            if op == "ready":
                pu = st.get("prompt_usage")
                if pu is not None and prompt is None:
                    prompt = pu
                out = sp.push(d.InferenceChunk.ready(
                    prompt_usage=None if pu is None else d.PromptUsage(**pu),
                    system_fingerprint=st.get("system_fingerprint")))
            elif op == "text":
                out = sp.push(d.InferenceChunk.text(st["content"], st["token_count"]))
            elif op == "tokens":
                lp = st.get("logprobs")
                out = sp.push(d.InferenceChunk.tokens(st["token_ids"], None if lp is None else
                                                      [(a, [tuple(x) for x in b]) for a, b in lp]))
            elif op == "finish_chunk":
                out = sp.push(d.InferenceChunk.finish(FIN[st["reason"]]))
            elif op == "finish":
                out = sp.finish()
            elif op == "close":
                sp.close()
                out = []
            else:
                raise ValueError(op)
            rec["events"] = [[Resp.sse_event_name(c), normalise(c.to_json())] for c in out]
            all_chunks += out
        except RuntimeError as e:
            rec["events"] = []
            rec["error"] = "RuntimeError: %s" % e
        try:
            rec["finished"] = sp.finished
        except Exception as e:  # pragma: no cover
            rec["finished"] = "error: %s" % e
        steps.append(rec)
    pt = prompt or {"prompt_tokens": 0, "prompt_cache_hit_tokens": 0}
    r = Resp(RESPONSE_ID, gmodel, CREATED, pt.get("prompt_tokens", 0), pt.get("prompt_cache_hit_tokens", 0))
    out = {"name": case["name"], "request": case["request"]}
    if case.get("parsing_options") is not None:
        out["parsing_options"] = case["parsing_options"]
    out["converted_parsing_options"] = conv
    out["generator"] = case["generator"]
    out["tokenizer"] = case["tokenizer"]
    out["steps"] = steps
    try:
        for c in all_chunks:
            r.accumulate(c)
        out["response"] = normalise(r.to_json())
    except Exception as e:
        out["response"] = None
        out["response_error"] = "%s: %s" % (type(e).__name__, e)
    return out


# ----------------------------------------------------------------------------------
# case construction helpers
def T(s, n=1):
    return {"op": "text", "content": s, "token_count": n}


def ready(pt=10, hit=3, fp=None, none=False):
    return {"op": "ready", "prompt_usage": None if none else {"prompt_tokens": pt, "prompt_cache_hit_tokens": hit},
            "system_fingerprint": fp}


def fin(reason="stop"):
    return {"op": "finish_chunk", "reason": reason}


END = [{"op": "finish"}]


def texts(chunks, counts=None):
    return [T(c, 1 if counts is None else counts[i]) for i, c in enumerate(chunks)]


def split2(s, i):
    return [s[:i], s[i:]]


def PO(parse_tool_calls=False, starts_in_tool_calls=False, parse_json_output=False, stage="ReasoningStart", stop=()):
    return {"parse_tool_calls": parse_tool_calls, "starts_in_tool_calls": starts_in_tool_calls,
            "parse_json_output": parse_json_output, "thinking_initial_stage": stage, "stop_sequences": list(stop)}


def dsml(params, name="get_weather", v41=False, pre="\n\n", close=True):
    C, I, P = ("tool_calls", "invoke", "parameter") if not v41 else (" calls", " invoke", " parameter")
    s = pre + "<｜DSML｜%s>\n<｜DSML｜%s name=\"%s\">\n" % (C, I, name)
    for k, st, v in params:
        s += "<｜DSML｜%s name=\"%s\" string=\"%s\">%s</｜DSML｜%s>\n" % (P, k, st, v, P)
    if close:
        s += "</｜DSML｜%s>\n</｜DSML｜%s>" % (I, C)
    return s


def invoke(name, params, v41=False):
    I, P = ("invoke", "parameter") if not v41 else (" invoke", " parameter")
    s = "<｜DSML｜%s name=\"%s\">\n" % (I, name)
    for k, st, v in params:
        s += "<｜DSML｜%s name=\"%s\" string=\"%s\">%s</｜DSML｜%s>\n" % (P, k, st, v, P)
    return s + "</｜DSML｜%s>\n" % I


STD_BLOCK = dsml([("city", "true", "Paris"), ("n", "false", "3")])
LOOKALIKES = {"ascii": "|", "double-vbar": "\u2016", "doubled-fw": "｜｜", "none": "", "box": "\u2502",
              "divides": "\u2223", "space-fw": " ｜", "fw-space": "｜ "}


def build_cases(proto, tok):
    rnd = random.Random(SEED + {"chat": 0, "messages": 1, "responses": 2}[proto])
    full = proto == "chat"       # chat gets the exhaustive split sweeps, others a stride
    stride = 1 if full else 3
    cases = []

    def add(name, ops, *, b=None, po=None, tokenizer=True, gmodel=None, rd=True, end=True, finr="stop"):
        b = b or body(proto, tools=True)
        o = ([ready()] if rd else []) + ops + ([fin(finr)] if finr else []) + (END if end else [])
        cases.append({"name": name, "request": b, "parsing_options": po,
                      "generator": {"id": GEN_IDS[proto], "model": gmodel or b["model"]},
                      "tokenizer": tokenizer, "ops": o})

    # ---- 1. thinking mode / options mapping
    for th in (True, False):
        for tl in (False, True):
            add("map-think%d-tools%d" % (th, tl), texts(["\n\nLet me think", " about it.\n", "</think>", "\n\nAnswer."]),
                b=body(proto, thinking=th, tools=tl))
    add("map-required", texts(["<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"]),
        b=body(proto, thinking=False, tools=True, required=True))
    add("map-required-text-first", texts(["hello\n\n", "<｜DSML｜invoke name=\"calc\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>tail"]),
        b=body(proto, thinking=False, tools=True, required=True))
    add("map-v41-model", texts(["r", "</think>a" + dsml([("city", "true", "X")], v41=True)]),
        b=body(proto, model=M41, tools=True))
    if proto == "chat":
        add("map-prefix-content", texts(["\n\ncontinued", "</think>", "\nmore"]), b=body(proto, prefix=("Once", None)))
        add("map-prefix-reasoning", texts(["\n\nthinking more", "</think>", "\n\nanswer"]), b=body(proto, prefix=("", "hm")))
        add("map-prefix-empty", texts(["\n\nthinking", "</think>", "\n\nanswer"]), b=body(proto, prefix=("", None)))
        add("map-prefix-thinking-off", texts(["\n\nrest", "</think>x"]), b=body(proto, thinking=False, prefix=("Once", None)))
        add("map-json", texts(["r</think>", "Sure: {\"a\": 1}", " bye"]), b=body(proto, json_mode=True))
        add("map-stop-string", texts(["r</think>", "one END two"]), b=body(proto, stop="END"))
        add("map-stream-options", texts(["r</think>", "x"]), b=body(proto, extra={"stream_options": {"include_usage": True}}))
        add("map-logprobs-text", texts(["r</think>", "x"]), b=body(proto, extra={"logprobs": True, "top_logprobs": 2}))
    if proto == "responses":
        add("map-json", texts(["r</think>", "Sure: {\"a\": 1}", " bye"]), b=body(proto, json_mode=True))
    if proto == "messages":
        add("map-stop", texts(["r</think>", "one END two"]), b=body(proto, stop=["END"]))
        add("map-tool-choice-any", texts(["</think>x" + STD_BLOCK]),
            b=body(proto, thinking=False, tools=True, extra={"tool_choice": {"type": "any"}}))
    for stage in ("ReasoningStart", "ReasoningContinuation", "ContentContinuation", None):
        for i, chunks in enumerate([["\n\n a", "\nb</think>", "\n\n c<think>d</think>e"], ["\n", "\n", "a"],
                                    ["\r\n x</think>\r\ny"], ["</think>", "\n\nx"]]):
            add("stage-%s-%d" % (stage, i), texts(chunks), po=PO(stage=stage))
    add("think-open-tag-in-reasoning", texts(["<think>", "a</think>b"]))
    add("think-empty-reasoning", texts(["</think>", "\n\nx"]))
    add("think-only-newlines", texts(["\n", "\n", "</think>", "\n", "\n", "x"]))
    add("think-no-end-length", texts(["abc", "def"]), finr="length")
    add("think-partial-end-at-finish", texts(["abc</th"]))
    add("think-second-end-in-content", texts(["a</think>b</think>c"]))
    add("think-newline-hold-reasoning", texts(["a\n", "\n", "b", "</think>c\n", "\n"]))
    add("think-newline-hold-content-notools", texts(["a</think>", "b\n", "\n", "c"]), b=body(proto, tools=False))
    s = "abc</think>def"
    for i in range(0, len(s) + 1, 1):
        add("think-split-%02d" % i, texts(split2(s, i)))
    for i in range(1, len("</think>")):
        add("think-split3-%02d" % i, texts(["ab", "</think>"[:i], "</think>"[i:] + "cd"]))
    for i in range(1, len("</think>")):
        add("think-falsepartial-%02d" % i, texts(["ab" + "</think>"[:i], "X" + "</think>"[i:]]))

    # ---- 2. DSML
    add("dsml-std", texts(["Let me think", "</think>", "OK.\n\n" + STD_BLOCK]))
    add("dsml-std-charwise", texts(list("r</think>OK" + STD_BLOCK + "\ntail")))
    add("dsml-v41-forms", texts(["r</think>hi" + dsml([("city", "true", "Paris")], v41=True)]))
    add("dsml-mixed-forms", texts(["r</think>hi\n\n<｜DSML｜tool_calls>\n" + invoke("get_weather", [("city", "true", "A")], v41=True)
                                   + invoke("calc", [("x", "false", "1")]) + "</｜DSML｜ calls>"]))
    values = [("true", "Paris"), ("true", 'a"b\\c\nd\te/'), ("true", "  spaced  "), ("true", "\n  x\n"),
              ("true", "日本🎉"), ("true", "\x01\x7f\b\f\r\x1f\u2028"), ("true", "</"), ("true", "a<b</c"),
              ("true", "<｜DSML｜x"), ("true", ""), ("false", "3"), ("false", " 3 "), ("false", "\n3\n"),
              ("false", "3.50"), ("false", "1e5"), ("false", "-0"), ("false", "true"), ("false", "null"),
              ("false", '{"a": [1,2]}'), ("false", '{"a":1,  "b" : 2}'), ("false", "[1, 2 ,3]"), ("false", "abc"),
              ("false", '"q"'), ("false", "{bad"), ("false", ""), ("false", "12abc"), ("false", "NaN"),
              ("false", "100000000000000000000000"), ("false", '"\\u00e9"'), ("maybe", "x"), ("TRUE", "x"),
              ("", "x"), ("false", "a<b")]
    for i, (st, v) in enumerate(values):
        add("dsml-value-%02d" % i, texts(["r</think>", dsml([("city", st, v), ("n", "false", "1")]) + "TAIL"]))
    # values split across chunks
    for i, v in enumerate(["Pa\"ris\\", "日本🎉x", "a<b</c", "[1, 2]"]):
        st = "false" if v.startswith("[") else "true"
        blk = dsml([("city", st, v)])
        j = blk.index(">" + v) + 1
        for k in range(0, len(v) + 1, 1 if full else 2):
            add("dsml-value-split-%d-%02d" % (i, k), texts(["r</think>", blk[:j + k], blk[j + k:]]))
    # key names
    for i, key in enumerate(['c"d', "k\\x", "ключ", "", "a b"]):
        add("dsml-key-%d" % i, texts(["r</think>", dsml([(key, "true", "v")])]))
    markers = ["<｜DSML｜tool_calls>", "<｜DSML｜invoke name=\"", "\" string=\"true\">", "</｜DSML｜parameter>",
               "</｜DSML｜invoke>", "</｜DSML｜tool_calls>", "\n\n<｜DSML｜"]
    blk = "r</think>Hello" + STD_BLOCK + "\nafter"
    for mi, mk in enumerate(markers):
        base = blk.index(mk)
        for k in range(0, len(mk) + 1, stride):
            add("dsml-split-m%d-%02d" % (mi, k), texts(split2(blk, base + k)))
    for name, pipe in LOOKALIKES.items():
        t = STD_BLOCK.replace("｜", pipe)
        add("dsml-lookalike-%s" % name, texts(["r</think>a", t, "tail"]))
    add("dsml-half-ascii-opener", texts(["r</think>a\n\n<｜DSML|tool_calls>\n" + invoke("get_weather", [("city", "true", "X")]) + "</｜DSML｜tool_calls>tail"]))
    add("dsml-lowercase", texts(["r</think>a\n\n<｜dsml｜tool_calls>\n" + invoke("get_weather", [("city", "true", "X")])]))
    for i, op in enumerate(["<｜DSML｜tool_call>", "<｜DSML｜calls>", "<｜DSML｜ tool_calls>", "<｜DSML｜foo>", "<｜DSML｜", ""]):
        add("dsml-opener-%d" % i, texts(["r</think>a\n\n" + op + invoke("get_weather", [("city", "true", "X")]) + "</｜DSML｜tool_calls>tail"]))
    add("dsml-opener-only", texts(["r</think>a\n\n<｜DSML｜tool_calls>"]))
    add("dsml-opener-junk", texts(["r</think>a\n\n<｜DSML｜tool_calls>hello</｜DSML｜tool_calls>after"]))
    add("dsml-in-prose", texts(["r</think>Use `<｜DSML｜tool_calls>` to call tools.\n\nMore text."]))
    add("dsml-in-codeblock", texts(["r</think>Example:\n```\n" + STD_BLOCK + "\n```\nDone."]))
    add("dsml-in-reasoning", texts(["thinking <｜DSML｜tool_calls>\n" + invoke("get_weather", [("city", "true", "X")]) + "</｜DSML｜tool_calls></think>answer"]))
    add("dsml-in-reasoning-start", texts(["<｜DSML｜tool_calls>\n" + invoke("calc", []) + "</｜DSML｜tool_calls>"]))
    I1 = invoke("get_weather", [("city", "true", "X")])
    add("dsml-two-invokes", texts(["r</think>pre\n\n<｜DSML｜tool_calls>\n" + I1 + invoke("calc", [("e", "false", "1+1")]) + "</｜DSML｜tool_calls>"]))
    add("dsml-two-blocks", texts(["r</think>pre\n\n<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜tool_calls>\n\nmid\n\n<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜tool_calls>after"]))
    add("dsml-many-invokes", texts(["r</think><｜DSML｜tool_calls>\n" + invoke("calc", []) * 12 + "</｜DSML｜tool_calls>"]))
    add("dsml-empty-reasoning-ids", texts(["</think><｜DSML｜tool_calls>\n" + I1 * 2 + "</｜DSML｜tool_calls>"]))
    add("dsml-text-after", texts(["r</think>x" + STD_BLOCK, "\n\nAnd more text", " here."]))
    add("dsml-trailing-ws", texts(["r</think>pre  \n \n<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜tool_calls>"]))
    add("dsml-trailing-nl4", texts(["r</think>pre\n\n\n\n<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜tool_calls>"]))
    add("dsml-trailing-crlf", texts(["r</think>pre\r\n<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜tool_calls>"]))
    add("dsml-newlines-chunked", texts(["r</think>pre", "\n", "\n", "<｜DSML｜tool_calls>\n" + I1]))
    add("dsml-newlines-then-text", texts(["r</think>pre", "\n", "\n", "text"]))
    add("dsml-no-whitespace", texts(["r</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\"><｜DSML｜parameter name=\"city\" string=\"true\">X</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>"]))
    malformed = {
        "junk-between": "<｜DSML｜tool_calls> junk <｜DSML｜invoke name=\"get_weather\"> junk2 <｜DSML｜parameter name=\"city\" string=\"true\">X</｜DSML｜parameter> junk3 </｜DSML｜invoke> junk4 </｜DSML｜tool_calls>",
        "param-double-space": "<｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\"><｜DSML｜parameter name=\"city\"  string=\"true\">X</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
        "param-space-before-gt": "<｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\"><｜DSML｜parameter name=\"city\" string=\"true\" >X</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
        "invoke-double-space": "<｜DSML｜tool_calls><｜DSML｜invoke  name=\"get_weather\"></｜DSML｜invoke></｜DSML｜tool_calls>",
        "invoke-space-before-gt": "<｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\" ></｜DSML｜invoke></｜DSML｜tool_calls>",
        "invoke-single-quotes": "<｜DSML｜tool_calls><｜DSML｜invoke name='get_weather'></｜DSML｜invoke></｜DSML｜tool_calls>",
        "invoke-no-name": "<｜DSML｜tool_calls>\n<｜DSML｜invoke>\n</｜DSML｜invoke>",
        "invoke-empty-name": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>",
        "invoke-unknown-tool": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"no_such_tool\">\n</｜DSML｜invoke>",
        "invoke-quote-in-name": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\"b\">\n</｜DSML｜invoke>",
        "invoke-extra-attr": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\" x=\"1\">\n</｜DSML｜invoke>",
        "invoke-nested": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜invoke name=\"get_weather\">\n</｜DSML｜invoke>",
        "invoke-renamed-tag": "<｜DSML｜tool_calls>\n<｜DSML｜xinvoke name=\"calc\">\n</｜DSML｜xinvoke>",
        "param-no-invoke": "<｜DSML｜tool_calls><｜DSML｜parameter name=\"city\" string=\"true\">X</｜DSML｜parameter></｜DSML｜tool_calls>",
        "param-unclosed-then-param": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\">v\n<｜DSML｜parameter name=\"q\" string=\"true\">w</｜DSML｜parameter></｜DSML｜invoke>",
        "param-closed-by-invoke": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\">v</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        "param-attr-swapped": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter string=\"true\" name=\"p\">v</｜DSML｜parameter></｜DSML｜invoke>",
        "param-no-string-attr": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\">v</｜DSML｜parameter></｜DSML｜invoke>",
        "param-extra-attr": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\" extra=\"1\">v</｜DSML｜parameter></｜DSML｜invoke>",
        "param-renamed-tag": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜param name=\"p\" string=\"true\">v</｜DSML｜param></｜DSML｜invoke>",
        "param-close-other-tag": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\">a</｜DSML｜x>b</｜DSML｜parameter></｜DSML｜invoke>",
        "param-close-v41-in-v4": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\">a</｜DSML｜ parameter>z</｜DSML｜invoke>",
        "close-foo-then-invoke": "<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜foo>" + I1,
        "close-invoke-then-invoke": "<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜invoke>" + I1,
        "reopen-then-invoke": "<｜DSML｜tool_calls>\n" + I1 + "<｜DSML｜tool_calls>" + I1,
        "v41-param-close": "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"calc\">\n<｜DSML｜ parameter name=\"p\" string=\"true\">a</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        "v4-param-v41-close": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + I1,
        "param-tab-sep": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\"\tstring=\"true\">v</｜DSML｜parameter></｜DSML｜invoke>",
        "param-newline-sep": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\"\nstring=\"true\">v</｜DSML｜parameter></｜DSML｜invoke>",
        "value-think-end": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"calc\">\n<｜DSML｜parameter name=\"p\" string=\"true\">a</think>b</｜DSML｜parameter></｜DSML｜invoke>",
        "close-v41-then-invoke": "<｜DSML｜tool_calls>\n" + I1 + "</｜DSML｜ calls>" + I1,
    }
    for k, v in malformed.items():
        add("dsml-malformed-%s" % k, texts(["r</think>x\n\n", v, "after"]))
    unclosed = {
        "mid-value": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Par",
        "mid-name": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_wea",
        "mid-key": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"ci",
        "after-invoke": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n</｜DSML｜invoke>\n",
        "after-param": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"n\" string=\"false\">42</｜DSML｜parameter>\n",
        "mid-close-tag": "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"n\" string=\"false\">42</｜DSML｜para",
        "partial-opener": "<｜DSML｜tool_ca",
        "partial-opener-2": "<｜DS",
    }
    for k, v in unclosed.items():
        for fr in ("stop", "length", None):
            add("dsml-unclosed-%s-%s" % (k, fr), texts(["r</think>x", v]), finr=fr)
    for fr in ("stop", "length", "content_filter", None):
        add("dsml-finish-%s" % fr, texts(["r</think>x" + STD_BLOCK]), finr=fr)
        add("nodsml-finish-%s" % fr, texts(["r</think>x"]), finr=fr)
    add("dsml-parse-off-tool-choice-none", texts(["r</think>x" + STD_BLOCK]),
        b=body(proto, tools=True, extra={"tool_choice": "none" if proto != "messages" else {"type": "none"}}))
    add("dsml-no-tools-declared", texts(["r</think>x" + STD_BLOCK]), b=body(proto, tools=False))
    add("dsml-parse-off-explicit", texts(["r</think>x" + STD_BLOCK]), po=PO(parse_tool_calls=False))
    add("dsml-parse-on-no-tools", texts(["r</think>x" + STD_BLOCK]), b=body(proto, tools=False), po=PO(parse_tool_calls=True))
    add("dsml-starts-in-tool-calls-explicit", texts([I1 + "</｜DSML｜tool_calls>"]), po=PO(parse_tool_calls=True, starts_in_tool_calls=True))
    add("dsml-starts-in-tool-calls-thinking", texts(["r</think>" + I1]), po=PO(parse_tool_calls=True, starts_in_tool_calls=True, stage="ReasoningStart"))
    add("dsml-starts-in-tool-calls-no-parse", texts([I1]), po=PO(parse_tool_calls=False, starts_in_tool_calls=True, stage=None))

    # ---- 3. stop sequences
    def stopcase(name, chunks, stops, stage="ReasoningStart", ptc=True, finr="stop", extra_ops=()):
        if proto == "chat" and len(stops) <= 16:
            b = body(proto, tools=ptc, thinking=stage is not None, stop=list(stops))
            add(name, texts(chunks) + list(extra_ops), b=b, finr=finr)
        elif proto == "messages":
            b = body(proto, tools=ptc, thinking=stage is not None, stop=list(stops))
            add(name, texts(chunks) + list(extra_ops), b=b, finr=finr)
        else:
            add(name, texts(chunks) + list(extra_ops), b=body(proto, tools=ptc, thinking=stage is not None),
                po=PO(parse_tool_calls=ptc, stage=stage, stop=stops), finr=finr)
    stopcase("stop-basic", ["r</think>hello END world"], ["END"])
    s = "r</think>hello END world"
    for k in range(s.index("END") - 1, s.index("END") + 4):
        stopcase("stop-split-%02d" % k, split2(s, k), ["END"])
    s = "r</think>hi <<STOP>> x"
    for k in range(s.index("<<"), s.index(">>") + 3, stride):
        stopcase("stop-split-long-%02d" % k, split2(s, k), ["<<STOP>>"])
    stopcase("stop-false-partial", ["r</think>hello EN", "X world"], ["END"])
    stopcase("stop-charwise", ["r</think>hello E", "N", "D", "x"], ["END"], extra_ops=[T("after-stop")])
    stopcase("stop-partial-at-finish", ["r</think>hello EN"], ["END"])
    stopcase("stop-partial-at-length", ["r</think>hello EN"], ["END"], finr="length")
    stopcase("stop-partial-no-finish-chunk", ["r</think>hello EN"], ["END"], finr=None)
    stopcase("stop-in-reasoning", ["rea END son</think>hello"], ["END"])
    stopcase("stop-in-reasoning-split", ["rea EN", "D son</think>hello"], ["END"])
    stopcase("stop-overlap-1", ["r</think>abcd"], ["abc", "bc"])
    stopcase("stop-overlap-2", ["r</think>abcd"], ["bc", "abc"])
    stopcase("stop-overlap-3", ["r</think>abcd"], ["abcd", "bc"])
    stopcase("stop-overlap-4", ["r</think>xyz"], ["xyz", "y"])
    stopcase("stop-overlap-5", ["r</think>xab", "cd"], ["abce", "bcd"])
    stopcase("stop-overlap-6", ["r</think>hi ", "EN"], ["END", "ENX"])
    stopcase("stop-overlap-7", ["r</think>hi ", "E"], ["END", "E"])
    stopcase("stop-newline-leading", ["r</think>\n\nhi"], ["\n"])
    stopcase("stop-trailing-newlines", ["r</think>hi\n", "\nEND"], ["END"])
    stopcase("stop-in-tool-args", ["r</think>x" + dsml([("city", "true", "vENDw")])], ["END"])
    stopcase("stop-in-dsml-opener", ["r</think>hi" + STD_BLOCK], ["DSML"])
    stopcase("stop-calls-tag", ["r</think>hi" + STD_BLOCK], ["calls>"])
    stopcase("stop-newline-before-dsml", ["r</think>hi" + STD_BLOCK], ["\n\n<"])
    stopcase("stop-across-think-end", ["ab</think>cd"], ["b</think>c"])
    stopcase("stop-across-deleted-think-1", ["r</think>ab</think>cd"], ["bc"])
    stopcase("stop-across-deleted-think-2", ["r</think>ab</think>cd"], ["b</think>c"])
    stopcase("stop-across-deleted-think-3", ["r</think>ab</th", "ink>cd"], ["bc"])
    stopcase("stop-think-off", ["hi END"], ["END"], stage=None)
    stopcase("stop-think-off-chunked", ["hi", "END", "more"], ["END"], stage=None)
    stopcase("stop-unicode", ["r</think>日本🎉語", "です"], ["🎉"])
    stopcase("stop-many", ["r</think>the quick brown fox"], ["zz", "yy", "brown", "quick", "q"])
    stopcase("stop-whole-chunk", ["r</think>", "STOP"], ["STOP"])
    stopcase("stop-before-answer", ["r</think>", "STOP", "x"], ["STOP"], finr=None)

    # ---- 4. JSON output mode
    jb = body(proto, json_mode=True) if proto != "messages" else body(proto)
    jpo = None if proto != "messages" else PO(parse_json_output=True)
    jnoth = body(proto, json_mode=True, thinking=False) if proto != "messages" else body(proto, thinking=False)
    jpo_noth = None if proto != "messages" else PO(parse_json_output=True, stage=None)
    json_texts = [
        ['{"a": 1}'], ['Here: {"a": 1} done'], ['Here:\n```json\n{"a": 1}\n```\nDone.'], ['```\n{"a": 1}\n```'],
        ['Here: [1,2] done'], ['no json here'], ['Here: {"a": {"b": "}"}} then {"c":2} end'],
        ['Here', ': {"a"', ': 1}', ' done'], ['{"a": 1'], ['x { y'], ['"str" after'], ['12 after'],
        ['pre{bad json} post'], ['\n\n  {"a":1}  \n'], ['```json\n{"a": 1}\n```'], ['```json\n{"a": 1}\n```\n'],
        ['```json\n{"a": 1}\n```', 'tail', 'more'], ['a```json\n{"a": 1}```b'], ['```JSON\n{"a": 1}\n```b'],
        ['```js\n{"a": 1}\n```b'], ['```\n[1]\n```b'], ['```json {"a": 1} ``` b'], ['```json\n{"a": "```"}\n```b'],
        ['``', '`json\n{"a"', ': 1}\n`', '``', 'b'], ['text ```json\nnot json\n``` tail'],
        ['{"a":1}\n```json\n{"b":2}\n```'], ['x\n```json\n{"a": 1}\n```\n```json\n{"b": 1}\n```\n'],
        ['```json\n', '{"a": 1}\n', '```'], ['', '{}'], ['   '], ['[', ']', ' x'], ['{"s": "a\\"}b"} z'],
        ['```json\r\n{"a": 1}\r\n```'], ['``` json\n{"a": 1}\n```'], ['Sure!\n\n```json\n{\n  "k": [1, 2]\n}\n```\n\nHope this helps.'],
        ['Here: ``', '`json\n{"a": 1}'], ['Here: `', '``json\n{"a": 1}'], ['Here: ```json', '\n{"a": 1}'],
        ['Here:```jso', 'x'], ['Here:```jso', 'n\n[1]'], ['{"a": 1}\n', 'x'], ['{"a": 1}\n`', 'x'],
        ['{"a": 1} ```', 'x'], ['```json\n{"a": 1}\n```', '\n```json\n{"b": 2}\n```'], ['```json\n{"a": 1}\n```\n', ''],
        ['Here', '', ''], ['Here', '', '```json\n{}'], ['\n', '', '{}'], ['{}', '', ''], ['{}\n```', '', '', ''],
        ['{}\n```', 'x', '', ''], ['{}\n```', '', 'x'], ['a\n', '\n', '{', '\n', '\n```', '\n'],
    ]
    for i, jt in enumerate(json_texts):
        add("json-noth-%02d" % i, texts(jt), b=jnoth, po=jpo_noth)
        if i % 3 == 0:
            add("json-th-%02d" % i, texts(["reason {x}</think>"] + jt), b=jb, po=jpo)
    add("json-with-stop", texts(["r</think>", 'x {"a": "STOP"} y']), b=jb,
        po=PO(parse_json_output=True, stop=["STOP"]))
    add("json-with-tools", texts(["r</think>", 'x {"a": 1}' + STD_BLOCK]), b=jb,
        po=PO(parse_json_output=True, parse_tool_calls=True))

    # ---- 5. finish / lifecycle / errors
    add("life-finish-without-finish-chunk", texts(["r</think>a"]), finr=None)
    add("life-no-finish-at-all", texts(["r</think>a"]), finr=None, end=False)
    add("life-finish-twice", texts(["r</think>a"]) + [fin("stop")], finr="length")
    add("life-finish-call-twice", texts(["r</think>a"]) + [fin("stop"), {"op": "finish"}])
    add("life-push-after-finish-chunk", texts(["r</think>a"]) + [fin("stop"), T("more")])
    add("life-close-then-finish", texts(["r</think>a"]) + [{"op": "close"}], finr=None)
    add("life-close-then-push", texts(["r</think>a"]) + [{"op": "close"}, T("b")], finr=None, end=False)
    add("life-only-finish", [], finr="stop")
    add("life-only-finish-length", [], finr="length")
    add("life-no-ready", texts(["r</think>a"]), rd=False)
    add("life-ready-no-usage", [ready(none=True)] + texts(["r</think>a"]), rd=False)
    add("life-ready-fingerprint", [ready(fp="fp_abc123")] + texts(["r</think>a"]), rd=False)
    add("life-ready-twice", [ready(fp="fp_1"), ready(20, 5, fp="fp_2")] + texts(["r</think>a"]), rd=False)
    add("life-ready-after-text", texts(["r</think>a"]) + [ready(20, 5, fp="fp_late")], rd=False)
    add("life-ready-cache-all", [ready(10, 10)] + texts(["r</think>a"]), rd=False)
    add("life-ready-cache-gt", [ready(5, 9)] + texts(["r</think>a"]), rd=False)
    add("life-empty-text", texts(["", "r", "", "</think>", "", "a", ""]))
    add("life-zero-token-counts", texts(["r</think>", "a"], [0, 0]))
    add("life-big-token-counts", texts(["r</think>", "a"], [100000, 7]))

    # ---- 6. usage / tokens chunks
    def tk(s):
        return tok.encode(s)
    ids = tk("Hi 🎉 日本</think>ok")
    emo_ = tk("🎉")
    add("tok-whole", [{"op": "tokens", "token_ids": ids, "logprobs": None}])
    add("tok-each", [{"op": "tokens", "token_ids": [i], "logprobs": None} for i in ids])
    add("tok-emoji-alone", [{"op": "tokens", "token_ids": tk("🎉")[:1], "logprobs": None}])
    add("tok-emoji-then-text", [{"op": "tokens", "token_ids": tk("🎉")[:1], "logprobs": None},
                                {"op": "tokens", "token_ids": tk("🎉")[1:] + tk("x"), "logprobs": None}])
    add("tok-eos", [{"op": "tokens", "token_ids": [1], "logprobs": None}])
    add("tok-think-end-id", [{"op": "tokens", "token_ids": tk("abc") + [128822] + tk("def"), "logprobs": None}])
    add("tok-dsml-ids", [{"op": "tokens", "token_ids": tk("r</think>x" + STD_BLOCK), "logprobs": None}])
    add("tok-dsml-ids-each", [{"op": "tokens", "token_ids": [i], "logprobs": None} for i in tk("</think>x" + STD_BLOCK)])
    add("tok-lone-continuation", [{"op": "tokens", "token_ids": [239], "logprobs": None},
                                  {"op": "tokens", "token_ids": tk("x"), "logprobs": None}])
    add("tok-partial-then-think-end", [{"op": "tokens", "token_ids": emo_[:1], "logprobs": None},
                                       {"op": "tokens", "token_ids": tk("</think>x"), "logprobs": None}])
    add("tok-double-partial", [{"op": "tokens", "token_ids": emo_[:1] * 2, "logprobs": None},
                               {"op": "tokens", "token_ids": emo_[1:], "logprobs": None}])
    add("tok-partial-then-text-chunk", [{"op": "tokens", "token_ids": emo_[:1], "logprobs": None}] + texts(["</think>y"]))
    add("tok-partial-at-length", [{"op": "tokens", "token_ids": tk("r</think>a") + emo_[:1], "logprobs": None}], finr="length")
    a_, x_ = tk("abc"), tk(" xyz")
    add("tok-group-held", [{"op": "tokens", "token_ids": a_ + x_ + emo_[:1], "logprobs": None},
                           {"op": "tokens", "token_ids": emo_[1:], "logprobs": None}])
    add("tok-group-held-dropped", [{"op": "tokens", "token_ids": a_ + x_ + emo_[:1], "logprobs": None}])
    add("tok-group-special-flush", [{"op": "tokens", "token_ids": a_ + [128822] + x_ + emo_[:1], "logprobs": None}])
    add("tok-group-eos-flush", [{"op": "tokens", "token_ids": a_ + [1] + x_ + emo_[:1], "logprobs": None},
                                {"op": "tokens", "token_ids": emo_[1:], "logprobs": None}])
    add("tok-group-bad-then-more", [{"op": "tokens", "token_ids": a_ + x_ + emo_[:1], "logprobs": None},
                                    {"op": "tokens", "token_ids": x_, "logprobs": None}])
    add("tok-invalid-id", [{"op": "tokens", "token_ids": [999999], "logprobs": None}] + texts(["x</think>y"]))
    add("tok-empty", [{"op": "tokens", "token_ids": [], "logprobs": None}])
    add("tok-no-tokenizer", [{"op": "tokens", "token_ids": tk("x"), "logprobs": None}], tokenizer=False)
    add("text-no-tokenizer", texts(["Let me think", "</think>ok"]), tokenizer=False)
    add("text-no-tokenizer-nothink", texts(["ok"]), tokenizer=False, b=body(proto, thinking=False))
    lpids = tk("r</think>Hi there")
    lp = [[-0.5, [[i, -0.5], [5, -1.25]]] for i in lpids]
    lb = body(proto, tools=True, extra={"logprobs": True, "top_logprobs": 2}) if proto == "chat" else None
    add("tok-logprobs", [{"op": "tokens", "token_ids": lpids, "logprobs": lp}], b=lb)
    add("tok-logprobs-mismatch", [{"op": "tokens", "token_ids": lpids, "logprobs": lp[:1]}], b=lb)
    add("tok-logprobs-each", [{"op": "tokens", "token_ids": [i], "logprobs": [l]} for i, l in zip(lpids, lp)], b=lb)
    emo = tk("🎉")
    dids = tk("r</think>x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n</｜DSML｜invoke>")
    add("tok-logprobs-dsml", [{"op": "tokens", "token_ids": dids, "logprobs": [[-0.5, []] for _ in dids]}], b=lb)
    add("tok-logprobs-emoji", [{"op": "tokens", "token_ids": tk("r</think>") + emo, "logprobs": [[-0.1, []] for _ in tk("r</think>") + emo]}], b=lb)
    # which delta a push's log probabilities go with: text held across pushes (newlines
    # that may open DSML), held to the end, stripped, cut by a stop sequence; entries
    # whose bytes are not UTF-8 on their own; float32 digits; reasoning only
    def LP(ids, v, top=()):
        return {"op": "tokens", "token_ids": ids, "logprobs": [[v, [list(t) for t in top]] for _ in ids]}
    r_ = tk("r") + [128822]
    add("tok-logprobs-held", [LP(r_, -0.2), LP(tk("x"), -0.5), LP(tk("\n\n"), -0.7), LP(tk("y"), -0.9)], b=lb)
    add("tok-logprobs-held-group", [LP(r_, -0.2), LP(tk("x\n\n"), -0.3), LP(tk("y"), -0.4)], b=lb)
    add("tok-logprobs-held-to-end", [LP(r_, -0.2), LP(tk("x"), -0.5), LP(tk("\n\n"), -0.7)], b=lb)
    add("tok-logprobs-stripped", [LP(r_, -0.2), LP(tk("\n\n"), -0.7), LP(tk("y"), -0.9)], b=lb)
    add("tok-logprobs-stop", [LP(r_, -0.2), LP(tk("x y z"), -0.5)],
        b=body(proto, tools=True, stop="y", extra={"logprobs": True, "top_logprobs": 2}) if proto == "chat" else None,
        po=None if proto == "chat" else PO(parse_tool_calls=True, stop=["y"]))
    add("tok-logprobs-escape", [LP(r_, -0.2), LP([90, 663, 90], -0.1234567891234, [(332, -1e-9), (128822, -123456.789)])], b=lb)
    add("tok-logprobs-reasoning-only", [LP(tk("r"), -0.5)], b=lb)
    for i, s in enumerate(["Let me think", "Hello world, this is a long reasoning text.", "\n\nabc", "日本語のテキスト", "a\n\nb"]):
        add("usage-reasoning-%d" % i, texts([s, "</think>", "x"], [2, 3, 5]))
    add("usage-reasoning-chunked", texts(["Hel", "lo wor", "ld", "</think>x"], [1, 2, 3, 4]))
    add("usage-reasoning-length", texts(["ab", "cd"], [3, 4]), finr="length")
    add("usage-reasoning-dsml", texts(["thinking <｜DSML｜tool_calls>\n" + I1], [9]))

    # ---- 7. seeded random compositions
    frags_r = ["Let me think.", " The user", " wants", "\n", "\n\n", " 🎉", " 日本", " a<b", " </th", "ink", " x"]
    frags_c = ["Hello", " world", "\n", "\n\n", ".", " <", "think>", " 🎉", " END", " E", "ND", " {\"k\": 1}",
               " ```json\n", "\n```", " |DSML|", " <｜DS", "ML｜x"]
    for n in range(60 if full else 40):
        stage = rnd.choice(["ReasoningStart", "ReasoningStart", None, "ContentContinuation"])
        ptc = rnd.random() < 0.7
        jm = rnd.random() < 0.15
        stops = rnd.choice([[], [], ["END"], ["END", "\n\n\n"], ["world"]])
        text = ""
        if stage == "ReasoningStart":
            text += "".join(rnd.choice(frags_r) for _ in range(rnd.randint(0, 6))) + "</think>"
        text += "".join(rnd.choice(frags_c) for _ in range(rnd.randint(0, 8)))
        if ptc and rnd.random() < 0.6:
            params = []
            for _ in range(rnd.randint(0, 3)):
                params.append((rnd.choice(["city", "n", "q", "日"]), rnd.choice(["true", "false"]),
                               rnd.choice(["Paris", "3", '{"a": [1, "x"]}', 'q"u\\o\nte', "🎉", " sp ", "a<b", ""])))
            text += dsml(params, name=rnd.choice(["get_weather", "calc", "other"]), v41=rnd.random() < 0.3,
                         pre=rnd.choice(["\n\n", "", "\n", " "]), close=rnd.random() < 0.85)
            if rnd.random() < 0.3:
                text += rnd.choice(["\n\ntrailing", "\n\n<｜DSML｜tool_calls>\n" + invoke("calc", []) + "</｜DSML｜tool_calls>"])
        cuts = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, rnd.randint(0, 12)))) if len(text) > 1 else []
        chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        counts = [rnd.randint(0, 5) for _ in chunks]
        add("rand-%03d" % n, texts(chunks, counts), b=body(proto, tools=ptc, thinking=stage is not None),
            po=PO(parse_tool_calls=ptc, parse_json_output=jm, stage=stage, stop=stops),
            finr=rnd.choice(["stop", "stop", "length", "content_filter", None]))

    # ---- 9. the smallest inputs of bugs found by the breaker (regression cases)
    def tok_op(ids):
        return {"op": "tokens", "token_ids": ids, "logprobs": None}
    blk = '<｜DSML｜tool_calls><｜DSML｜%s name="x"></｜DSML｜%s></｜DSML｜tool_calls>'
    for w in ("foo", "xinvoke", "invokex"):
        add("regress-named-tag-%s" % w, texts([blk % (w, w)]), po=PO(parse_tool_calls=True, stage=None))
    add("regress-named-tag-then-invoke",
        texts(['<｜DSML｜tool_calls><｜DSML｜foo name="x">\n<｜DSML｜invoke name="y">\n</｜DSML｜invoke></｜DSML｜tool_calls>']),
        po=PO(parse_tool_calls=True, stage=None))
    add("regress-stop-ends-with-opener", texts(["a<｜DSML｜"]), po=PO(parse_tool_calls=True, stage=None, stop=["L｜"]))
    add("regress-stop-not-into-think", texts(["r</think>a</think>b"]), po=PO(stop=["/th"]))
    add("regress-tok-stop-in-added", [tok_op([128822, 128825])], po=PO(stop=["DSML"]))
    add("regress-tok-stop-into-added", [tok_op([128822] + tk("><") + [128825])],
        po=PO(stage="ReasoningContinuation", stop=["<｜D"]))
    add("regress-tok-stop-think-twice", [tok_op([128822, 128822])], po=PO(stage="ReasoningContinuation", stop=["/th"]))
    add("regress-tok-empty-first", [tok_op([])] + texts(["r</think>a"]))
    add("regress-nul-tool-name",
        texts(['<｜DSML｜tool_calls><｜DSML｜invoke name="f\x00g"></｜DSML｜invoke></｜DSML｜tool_calls>']),
        po=PO(parse_tool_calls=True, stage=None))
    return cases


def generate(tok, proto):
    Resp = PROTO[proto][1]
    out = [run_case(tok, proto, c) for c in build_cases(proto, tok)]
    names = [c["name"] for c in out]
    assert len(names) == len(set(names)), "duplicate case names"
    return out, Resp.sse_done_data()


def dump(proto, cases, done, tok_sha):
    head = {"protocol": proto,
            "oracle": {"package": "deepseek-recipe", "version": d.__version__,
                       "tokenizer": "deepseek-v4 tokenizer.json", "tokenizer_sha256": tok_sha},
            "normalisation": {
                "tool_call_id": {"regex": ID_RE.pattern, "replacement": "call_\\1_\\2RRRRRRRRRRRRRRRRRRRR0000"},
                "timestamps": {"regex": TIME_RE.pattern, "replacement": "\"\\1\":0"},
                "response_constructor": {"id": RESPONSE_ID, "created": CREATED}},
            "sse_done_data": done}
    lines = ["{"]
    for k, v in head.items():
        lines.append(json.dumps(k) + ": " + json.dumps(v, ensure_ascii=False) + ",")
    lines.append('"cases": [')
    lines.append(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(ROOT / ".cache/assets/deepseek-v4/tokenizer.json"))
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/stream"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    assert d.__version__ == "0.2.0", d.__version__
    tok = d.Tokenizer.from_file(a.tokenizer)
    tok_sha = hashlib.sha256(pathlib.Path(a.tokenizer).read_bytes()).hexdigest()
    outdir = pathlib.Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    ok = True
    for proto in ("chat", "messages", "responses"):
        cases, done = generate(tok, proto)
        text = dump(proto, cases, done, tok_sha)
        path = outdir / ("%s.json" % proto)
        if a.check:
            again = dump(proto, generate(tok, proto)[0], done, tok_sha)
            same_run = again == text
            same_disk = path.exists() and path.read_text(encoding="utf-8") == text
            print("%s: %d cases, rerun %s, disk %s" % (proto, len(cases), "same" if same_run else "DIFFERENT",
                                                      "same" if same_disk else "DIFFERENT"))
            ok &= same_run and same_disk
        else:
            path.write_text(text, encoding="utf-8")
            print("%s: %d cases, %d bytes -> %s" % (proto, len(cases), len(text.encode()), path))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
