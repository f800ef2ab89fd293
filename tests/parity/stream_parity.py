#!/usr/bin/env python3
"""Output-side parity with deepseek-recipe 0.2.0's StreamProcessor, through the
public C API (ctypes).

    python3 tests/parity/stream_parity.py LIBDEEPINFER.so V4_TOKENIZER.json FIXTURE.json [-v]

Each case of the fixture (tests/oracle/make_stream_fixtures.py: a request, the
oracle's steps — ready, text and token pushes, finish — and what each returned) is
replayed on a di_stream: every call must produce the identical chunks (SSE event
name and JSON, after the fixture's normalisation of random call ids and clock
times), fail where the oracle raised, and end with the identical accumulated
response. Steps the C API has no counterpart for are mapped as docs/stream.md
says (finish_chunk + finish = di_stream_finish; close = di_stream_free); token
pushes with log probabilities go through di_stream_push_tokens_logprobs.
Standard library only. Prints one summary line; exits 1 on any mismatch.
"""
import ctypes
import json
import re
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import stream_lib as sl  # noqa: E402

# Cases where deepinfer differs on purpose (docs/stream.md, "Parity"): reported, not failed.
DELIBERATE = {
    "tok-invalid-id": "an ID outside the vocabulary is DI_ERR_INVALID_ARGUMENT; the reference "
                      "decodes it to nothing",
    "tok-no-tokenizer": "a failed call leaves the stream usable; the reference closes its processor",
    "tok-logprobs-mismatch": "a failed call (1 log probability for 4 IDs: DI_ERR_INVALID_ARGUMENT "
                             "with the reference's message) leaves the stream usable; the "
                             "reference closes its processor",
}
STAGES = {None: 0, "ReasoningStart": 1, "ReasoningContinuation": 2, "ContentContinuation": 3}
ID_RE = re.compile(r"call_([0-9]{2,})_(ET_)?[0-9A-Za-z]{20}[0-9]{4}")
TIME_RE = re.compile(r'"(created|created_at|completed_at)":([0-9]+)')


def normalise(s):
    if s is None:
        return None
    s = ID_RE.sub(lambda m: "call_%s_%sRRRRRRRRRRRRRRRRRRRR0000" % (m.group(1), m.group(2) or ""), s)
    return TIME_RE.sub(lambda m: '"%s":0' % m.group(1), s)


def fixture_id(case):
    """The id the oracle's Chat accumulator was constructed with."""
    return case.get("response_id", "fixed-id")


def replay(lib, tok, codec, protocol, case):
    """Returns None when the case matches, else a description of the first difference."""
    c_p = ctypes.c_void_p
    body = json.dumps(case["request"], ensure_ascii=False, separators=(",", ":")).encode()
    prompt, err, s = c_p(), c_p(), c_p()
    st = lib.di_codec_render(codec, sl.PROTOCOLS[protocol], body, len(body), ctypes.byref(prompt),
                             ctypes.byref(err))
    if st != 0:
        msg = lib.di_error_message(err).decode("utf-8", "replace")
        lib.di_error_free(err)
        return f"render failed: {msg}"
    gen = case["generator"]
    opts = sl.StreamOptions()
    lib.di_stream_options_init_size(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.response_id = gen["id"].encode()
    opts.model = gen["model"].encode()
    opts.created = 1
    opts.seed = 1
    po = case.get("parsing_options")
    keep = []
    if po:
        opts.override_parsing = 1
        opts.parse_tool_calls = int(po["parse_tool_calls"])
        opts.starts_in_tool_calls = int(po["starts_in_tool_calls"])
        opts.parse_json_output = int(po["parse_json_output"])
        opts.thinking_stage = STAGES[po["thinking_initial_stage"]]
        stops = [x.encode() for x in po["stop_sequences"]]
        keep.append(stops)
        arr = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        keep.append(arr)
        opts.stop_sequences = ctypes.cast(arr, ctypes.c_void_p)
        opts.n_stop_sequences = len(stops)
    st = lib.di_stream_create(prompt, tok if case["tokenizer"] else None, ctypes.byref(opts),
                              ctypes.byref(s), ctypes.byref(err))
    lib.di_prompt_free(prompt)
    if st != 0:
        msg = lib.di_error_message(err).decode("utf-8", "replace")
        lib.di_error_free(err)
        return f"stream creation failed: {msg}"
    responses = []
    done_seen = 0
    try:
        for i, step in enumerate(case["steps"]):
            op = step["op"]
            e = c_p()
            finished_before = bool(s) and lib.di_stream_finished(s)
            if op == "ready":
                pu = step.get("prompt_usage") or {}
                fp = step.get("system_fingerprint")
                st = lib.di_stream_ready(s, pu.get("prompt_tokens", 0),
                                         pu.get("prompt_cache_hit_tokens", 0),
                                         fp.encode() if fp is not None else None, ctypes.byref(e))
            elif op == "text":
                t = step["content"].encode()
                st = lib.di_stream_push_text(s, t, len(t), step["token_count"], ctypes.byref(e))
            elif op == "tokens" and step.get("logprobs") is not None:
                # [[logprob, [[id, logprob], ...]], ...]: one row of alternatives per
                # token, all of one length (the fixtures' are)
                ids, lps = step["token_ids"], step["logprobs"]
                n_top = len(lps[0][1]) if lps else 0
                if any(len(x[1]) != n_top for x in lps):
                    return f"step {i}: alternatives of different lengths (the C API takes one)"
                arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
                lp = (ctypes.c_float * max(1, len(lps)))(*[x[0] for x in lps])
                tids = [t[0] for x in lps for t in x[1]]
                tlps = [t[1] for x in lps for t in x[1]]
                ti = (ctypes.c_int32 * max(1, len(tids)))(*tids)
                tl = (ctypes.c_float * max(1, len(tlps)))(*tlps)
                st = lib.di_stream_push_tokens_logprobs(s, arr, len(ids), lp, len(lps), ti, tl,
                                                        n_top, ctypes.byref(e))
            elif op == "tokens":
                ids = step["token_ids"]
                arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
                st = lib.di_stream_push_tokens(s, arr, len(ids), ctypes.byref(e))
            elif op == "finish_chunk":
                st = lib.di_stream_finish(s, sl.FINISH[step["reason"]], ctypes.byref(e))
            elif op == "finish":
                st = lib.di_stream_finish(s, sl.FINISH["unknown"], ctypes.byref(e))
            elif op == "close":
                lib.di_stream_free(s)
                s = c_p()
                st = 0
            if st != 0:
                lib.di_error_free(e)
            got = [] if st != 0 else sl._chunks(lib, s) if s else []
            dones = [c for c in got if c[1] is None]
            got = [[ev, normalise(j)] for ev, j in got if j is not None]
            done_seen += len(dones)
            if "error" in step:
                # di_stream_finish is idempotent where the reference's finish chunk raises
                if op == "finish_chunk" and "has finished" in step["error"] and finished_before:
                    continue
                if st == 0 and op != "close":
                    return f"step {i} ({op}): the oracle raised {step['error']!r}, deepinfer did not"
                continue
            if st != 0:
                return f"step {i} ({op}): deepinfer failed with status {st}"
            if got != step["events"]:
                want = step["events"]
                k = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]),
                         min(len(want), len(got)))
                return (f"step {i} ({op} {step.get('content', step.get('token_ids', ''))!r}), "
                        f"event {k} of {len(want)} (got {len(got)}):\n"
                        f"  want {want[k] if k < len(want) else None}\n"
                        f"  got  {got[k] if k < len(got) else None}")
            if s:
                n = ctypes.c_size_t()
                ptr = lib.di_stream_response_json(s, ctypes.byref(n))
                if ptr:
                    responses.append(ctypes.string_at(ptr, n.value).decode())
        if protocol == "chat" and responses and done_seen != 1:
            return f"data: [DONE] came {done_seen} times"
        want = case.get("response")
        if want is not None and responses:
            got = normalise(responses[-1])
            if protocol == "chat":  # the accumulator's id and created are its constructor's
                want = TIME_RE.sub(lambda m: '"%s":0' % m.group(1), want)
                want = want.replace('{"id":' + json.dumps(fixture_id(case)), '{"id":' + json.dumps(gen["id"]), 1)
            if got != want:
                return f"response:\n  want {want}\n  got  {got}"
        return None
    finally:
        if s:
            lib.di_stream_free(s)


def main():
    lib = sl.load(sys.argv[1])
    tok, codec = sl.make_codec(lib, sys.argv[2])
    fixture = json.load(open(sys.argv[3], encoding="utf-8"))
    verbose = "-v" in sys.argv[4:]
    protocol = fixture["protocol"]
    ok = deliberate = 0
    failed = []
    for case in fixture["cases"]:
        why = replay(lib, tok, codec, protocol, case)
        if why is None:
            ok += 1
        elif case["name"] in DELIBERATE:
            deliberate += 1
            if verbose:
                print(f"deliberate difference {case['name']}: {DELIBERATE[case['name']]}")
        else:
            failed.append((case["name"], why))
    for name, why in failed[: (len(failed) if verbose else 10)]:
        print(f"FAIL {name}: {why}")
    with_lp = sum(1 for c in fixture["cases"] if any(st.get("logprobs") for st in c["steps"]))
    print(f"stream parity {protocol}: {ok}/{ok + len(failed)} cases identical "
          f"({with_lp} with log probabilities; {deliberate} deliberate differences)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
