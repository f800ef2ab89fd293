#!/usr/bin/env python3
"""Codec parity with deepseek-recipe 0.2.0, through the public C API (ctypes).

    python3 tests/parity/codec_parity.py LIBDEEPINFER.so V4_TOKENIZER.json FIXTURE.json [-v]

For every case of the fixture (tests/oracle/make_codec_fixtures.py): a request the
oracle accepts must render to the identical V4 and V4.1 prompt text and the
identical V4 token IDs; a request the oracle rejects must be rejected
(DI_ERR_INVALID_REQUEST; the wording is ours). Standard library only. Prints a
summary line per protocol and exits 1 on any mismatch.
"""
import base64
import ctypes
import json
import sys

lib = ctypes.CDLL(sys.argv[1])
c_p = ctypes.c_void_p
lib.di_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
lib.di_codec_create.argtypes = [c_p, ctypes.c_int, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
lib.di_codec_render.argtypes = [c_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
lib.di_prompt_text.argtypes = [c_p, ctypes.POINTER(ctypes.c_size_t)]
lib.di_prompt_text.restype = ctypes.POINTER(ctypes.c_char)
lib.di_prompt_tokens.argtypes = [c_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                 ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(c_p)]
lib.di_prompt_free.argtypes = [c_p]
for name in ("di_prompt_thinking", "di_prompt_stream"):
    getattr(lib, name).argtypes = [c_p]
for name in ("di_prompt_temperature", "di_prompt_top_p"):
    getattr(lib, name).argtypes = [c_p]
    getattr(lib, name).restype = ctypes.c_float
lib.di_prompt_stop_count.argtypes = [c_p]
lib.di_prompt_stop_count.restype = ctypes.c_size_t
lib.di_prompt_stop.argtypes = [c_p, ctypes.c_size_t]
lib.di_prompt_stop.restype = ctypes.c_char_p
lib.di_prompt_max_tokens.argtypes = [c_p, ctypes.c_uint32, ctypes.c_uint32,
                                     ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(c_p)]
lib.di_error_message.argtypes = [c_p]
lib.di_error_message.restype = ctypes.c_char_p
lib.di_error_free.argtypes = [c_p]

PROTOCOLS = {"chat": 1, "messages": 2, "responses": 3}
DI_ERR_INVALID_REQUEST = 2


def render(codec, protocol, body):
    prompt, err = c_p(), c_p()
    st = lib.di_codec_render(codec, protocol, body, len(body), ctypes.byref(prompt), ctypes.byref(err))
    if st != 0:
        msg = lib.di_error_message(err).decode("utf-8", "replace")
        lib.di_error_free(err)
        return st, msg, None
    n = ctypes.c_size_t()
    ptr = lib.di_prompt_text(prompt, ctypes.byref(n))
    text = ctypes.string_at(ptr, n.value).decode("utf-8")
    ids_p, n_ids = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    ids = None
    if lib.di_prompt_tokens(prompt, ctypes.byref(ids_p), ctypes.byref(n_ids), None) == 0:
        ids = [ids_p[i] for i in range(n_ids.value)]
    facts = {"thinking_mode": bool(lib.di_prompt_thinking(prompt)),
             "stream": bool(lib.di_prompt_stream(prompt)),
             "temperature": lib.di_prompt_temperature(prompt),
             "top_p": lib.di_prompt_top_p(prompt),
             "stop_sequences": [lib.di_prompt_stop(prompt, i).decode()
                                for i in range(lib.di_prompt_stop_count(prompt))],
             "probes": {}}
    for tokens in (0, 1000, 1040000, 1048575, 1048576, 1048577):
        out = ctypes.c_uint32()
        st = lib.di_prompt_max_tokens(prompt, tokens, 1048576, ctypes.byref(out), None)
        facts["probes"][tokens] = out.value if st == 0 else "error"
    lib.di_prompt_free(prompt)
    return 0, text, (ids, facts)


def facts_differ(got, want):
    """The generation settings against the oracle's conversion facts."""
    if not want:
        return None
    for key in ("thinking_mode", "stream", "stop_sequences"):
        if got[key] != want[key]:
            return f"{key} is {got[key]!r}, the oracle's {want[key]!r}"
    for key in ("temperature", "top_p"):  # both float32, widened to double
        if want[key] is not None and abs(got[key] - want[key]) > 1e-7:
            return f"{key} is {got[key]!r}, the oracle's {want[key]!r}"
    for tokens, value in want.get("resolve_probes", []):
        mine = got["probes"].get(tokens)
        theirs = "error" if isinstance(value, dict) else value
        if mine != theirs:
            return f"max_tokens for a {tokens}-token prompt is {mine}, the oracle's {theirs}"
    return None


def first_diff(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return i, a[max(0, i - 40):i + 40], b[max(0, i - 40):i + 40]


def main():
    verbose = "-v" in sys.argv
    tok = c_p()
    if lib.di_tokenizer_load(sys.argv[2].encode(), ctypes.byref(tok), None) != 0:
        sys.exit("codec_parity: cannot load the tokenizer")
    codecs = {}
    for name, enc in (("v4", 1), ("v41", 2)):
        codecs[name] = c_p()
        assert lib.di_codec_create(tok if name == "v4" else None, enc, ctypes.byref(codecs[name]), None) == 0
    fixture = json.load(open(sys.argv[3], encoding="utf-8"))
    protocol = PROTOCOLS[fixture["protocol"]]
    counts = {"valid": 0, "valid_ok": 0, "invalid": 0, "invalid_ok": 0}
    failures = []
    for case in fixture["cases"]:
        if "request_bytes_b64" in case:
            body = base64.b64decode(case["request_bytes_b64"])
        elif "request_text" in case:
            body = case["request_text"].encode("utf-8", "surrogatepass")
        else:
            body = json.dumps(case["request"], ensure_ascii=False, separators=(",", ":")).encode()
        for enc in ("v4", "v41"):
            want = case[enc]
            st, text, ids = render(codecs[enc], protocol, body)
            if "error" in want:
                counts["invalid"] += 1
                if st == DI_ERR_INVALID_REQUEST:
                    counts["invalid_ok"] += 1
                else:
                    failures.append(f"{case['name']} [{enc}]: accepted, the oracle rejects: "
                                    f"{want['error']['message'][:120]}")
                continue
            counts["valid"] += 1
            if st != 0:
                failures.append(f"{case['name']} [{enc}]: rejected ({text}), the oracle accepts")
            elif text != want["prompt"]:
                i, got, exp = first_diff(text, want["prompt"])
                failures.append(f"{case['name']} [{enc}]: prompt differs at {i}:\n   got  {got!r}\n   want {exp!r}")
            elif enc == "v4" and ids[0] != want.get("ids"):
                failures.append(f"{case['name']} [{enc}]: token IDs differ")
            elif (bad := facts_differ(ids[1], case.get("facts"))):
                failures.append(f"{case['name']} [{enc}]: {bad}")
            else:
                counts["valid_ok"] += 1
    for f in failures[: (len(failures) if verbose else 15)]:
        print("FAIL:", f)
    print(f"{fixture['protocol']}: {counts['valid_ok']}/{counts['valid']} accepted renders identical, "
          f"{counts['invalid_ok']}/{counts['invalid']} rejections matched")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
