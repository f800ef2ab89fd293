#!/usr/bin/env python3
"""SmolLM2 token requests constrained by JSON schemas from grammar_parity.py's
seeded generator: every output that finished (the end token) must validate
with the `jsonschema` package; one cut by max_tokens must be a prefix the
grammar allowed (not checked here beyond its status).

With --cli, the same schemas also as protocol requests through `deepinfer run`:
Chat response_format json_schema and Responses text.format json_schema (the
answer's text validated the same way), Chat json_object (a JSON object), and
Chat response_format regex (the answer matched with Python's re); and strict
tools: each schema as the one property of a strict function tool's parameters,
called through Chat (tool_choice required, a named tool, or auto with a request
to call) and Messages (strict input_schema, tool_choice any): every complete
call's arguments validated with `jsonschema` against the tool's parameters.

usage: grammar_e2e.py <grammar_e2e> <SmolLM2 .gguf> [--schemas N] [--seed S]
                      [--cli deepinfer]
"""
import argparse
import json
import os
import random
import re
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
    ap.add_argument("--cli", help="deepinfer: also the protocol requests")
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
    ok = bad == 0 and valid > 0
    if a.cli:
        ok = protocol_requests(a, schemas, d) and ok
        ok = tool_requests(a, schemas, d) and ok
    return 0 if ok else 1


def run_body(a, d, protocol, body, name):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        json.dump(body, f)
    r = subprocess.run([a.cli, "run", "--model", a.model, "--protocol", protocol, p],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAILED {protocol} request ({r.stderr.strip()[-300:]}):", json.dumps(body)[:300])
        return None
    out = json.loads(r.stdout)
    if protocol == "chat":
        c = out["choices"][0]
        return c["finish_reason"], c["message"]["content"]
    text = "".join(part["text"] for item in out["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")
    return ("stop" if out["status"] == "completed" else "length"), text


def protocol_requests(a, schemas, d):
    """The schemas as Chat and Responses bodies, plus json_object and regex."""
    ask = "Reply with a JSON value for this schema: "
    cases = []
    for i, s in enumerate(schemas):
        msg = ask + json.dumps(s)[:400]
        if i % 2 == 0:
            body = {"model": "smollm2", "messages": [{"role": "user", "content": msg}],
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": f"s{i}", "schema": s}},
                    "max_tokens": 200, "temperature": 0.7, "seed": i}
            cases.append(("chat", body, lambda t, s=s: jsonschema.validate(json.loads(t), s)))
        else:
            body = {"model": "smollm2", "input": msg, "max_output_tokens": 200,
                    "temperature": 0.7,
                    "text": {"format": {"type": "json_schema", "name": f"s{i}", "schema": s}}}
            cases.append(("responses", body,
                          lambda t, s=s: jsonschema.validate(json.loads(t), s)))

    def is_object(t):
        if not isinstance(json.loads(t), dict):
            raise ValueError("not a JSON object")

    cases.append(("chat", {"model": "smollm2", "max_tokens": 200, "seed": 1,
                           "messages": [{"role": "user", "content": "Two colors, as json."}],
                           "response_format": {"type": "json_object"}}, is_object))
    pattern = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"

    def matches(t):
        if not re.fullmatch(pattern, t):
            raise ValueError(f"does not match {pattern}")

    cases.append(("chat", {"model": "smollm2", "max_tokens": 30, "seed": 2,
                           "messages": [{"role": "user", "content": "A date?"}],
                           "response_format": {"type": "regex", "regex": pattern}}, matches))
    valid = cut = bad = 0
    for k, (protocol, body, check) in enumerate(cases):
        got = run_body(a, d, protocol, body, f"body{k}.json")
        if got is None:
            bad += 1
            continue
        finish, text = got
        if finish == "length":
            cut += 1
            continue
        try:
            check(text)
            valid += 1
        except Exception as ex:  # noqa: BLE001
            print(f"INVALID {protocol}:", repr(text[:300]), "\n  body:", json.dumps(body)[:300],
                  "\n ", ex)
            bad += 1
    print(f"grammar e2e, protocol requests: {valid} answers valid, {cut} cut by max_tokens, "
          f"{bad} bad, of {len(cases)}")
    return bad == 0 and valid >= len(cases) // 2


def tool_requests(a, schemas, d):
    """Strict tools: the generator's schemas as tool parameters, the calls'
    arguments validated with jsonschema."""
    valid = cut = bad = no_call = 0
    schemas = schemas[:6]  # (the suite's time: about 4 s a request on 2 cores)
    for i, s in enumerate(schemas):
        s = dict(s)
        defs = s.pop("$defs", None)  # $ref resolves in the root: the parameters'
        params = {"type": "object", "properties": {"value": s}, "required": ["value"],
                  "additionalProperties": False}
        if defs is not None:
            params["$defs"] = defs
        ask = "Call save with a value for this schema: " + json.dumps(s)[:300]
        other = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 12}},
                 "required": ["q"], "additionalProperties": False}
        if i % 4 == 3:  # Messages: strict input_schema, a call of any tool
            protocol = "messages"
            body = {"model": "smollm2", "max_tokens": 100, "temperature": 0.7,
                    "messages": [{"role": "user", "content": ask}],
                    "tools": [{"name": "save", "strict": True, "input_schema": params},
                              {"name": "look", "strict": True, "input_schema": other}],
                    "tool_choice": {"type": "any"}}
        else:
            choice = ["required", {"type": "function", "function": {"name": "save"}},
                      "auto"][i % 4]
            protocol = "chat"
            body = {"model": "smollm2", "max_tokens": 100, "temperature": 0.7, "seed": i,
                    "messages": [{"role": "user", "content": ask}],
                    "tools": [{"type": "function", "function": {
                        "name": "save", "strict": True, "parameters": params}},
                        {"type": "function", "function": {"name": "look", "strict": True,
                                                          "parameters": other}}],
                    "tool_choice": choice}
        p = os.path.join(d, f"tool{i}.json")
        with open(p, "w") as f:
            json.dump(body, f)
        r = subprocess.run([a.cli, "run", "--model", a.model, "--protocol", protocol, p],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAILED tool request ({r.stderr.strip()[-300:]}):", json.dumps(body)[:300])
            bad += 1
            continue
        out = json.loads(r.stdout)
        if protocol == "chat":
            c = out["choices"][0]
            finished = c["finish_reason"] != "length"
            calls = [(t["function"]["name"], t["function"]["arguments"])
                     for t in c["message"].get("tool_calls") or []]
        else:
            finished = out["stop_reason"] != "max_tokens"
            calls = [(b["name"], json.dumps(b["input"])) for b in out["content"]
                     if b["type"] == "tool_use"]
        if not finished:  # the last call may be cut
            cut += 1
            calls = calls[:-1]
        if not calls:
            no_call += finished
            if finished and i % 4 != 2:
                print("NO CALL for a forced call:", r.stdout[:300])
                bad += 1
            continue
        for name, args in calls:
            try:
                if name not in ("save", "look"):
                    raise ValueError(f"undeclared tool {name}")
                jsonschema.validate(json.loads(args), params if name == "save" else other)
                valid += 1
            except Exception as ex:  # noqa: BLE001
                print(f"INVALID {protocol} call {name}:", repr(args[:300]), "\n  schema:",
                      json.dumps(params)[:300], "\n ", ex)
                bad += 1
    print(f"grammar e2e, strict tools: {valid} calls valid, {cut} requests cut by max_tokens, "
          f"{no_call} answered without a call (auto), {bad} bad, of {len(schemas)} requests")
    return bad == 0 and valid >= len(schemas) // 2


if __name__ == "__main__":
    sys.exit(main())
