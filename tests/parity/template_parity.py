#!/usr/bin/env python3
"""The dsv3, r1 and chatml encodings against jinja2's rendering of the models' own
chat templates (tests/fixtures/codec/templates.json), through the public C API.

    python3 tests/parity/template_parity.py LIBDEEPINFER.so R1_GGUF V3_TOKENIZER.json \
        SMOLLM2_GGUF FIXTURE

chatml runs with the default system prompt the fixture records (what SmolLM2's
template writes); cases the fixture marks as deviations are counted, not compared.

A case jinja2 renders must render to the identical prompt (and, where the fixture
has them, the identical token IDs); a case it cannot render must be rejected.
"""
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
lib.di_error_message.argtypes = [c_p]
lib.di_error_message.restype = ctypes.c_char_p
lib.di_codec_set_default_system.argtypes = [c_p, ctypes.c_char_p, ctypes.POINTER(c_p)]


def main():
    fixture = json.load(open(sys.argv[5], encoding="utf-8"))
    codecs = {}
    for name, enc, tok_path in (("r1", 4, sys.argv[2]), ("dsv3", 3, sys.argv[3]),
                                ("chatml", 5, sys.argv[4])):
        tok, codec = c_p(), c_p()
        assert lib.di_tokenizer_load(tok_path.encode(), ctypes.byref(tok), None) == 0
        assert lib.di_codec_create(tok, enc, ctypes.byref(codec), None) == 0
        codecs[name] = codec
    assert lib.di_codec_set_default_system(
        codecs["chatml"], fixture["chatml_default_system"].encode(), None) == 0
    cases = fixture["cases"]
    failures, ok, total, deviations = [], 0, 0, 0
    for case in cases:
        body = json.dumps(case["request"], ensure_ascii=False, separators=(",", ":")).encode()
        for name, codec in codecs.items():
            want = case[name]
            if want.get("deviation") and name == "chatml":
                deviations += 1
                continue
            total += 1
            prompt, err = c_p(), c_p()
            st = lib.di_codec_render(codec, 1, body, len(body), ctypes.byref(prompt), ctypes.byref(err))
            if "error" in want:
                if st == 0:
                    failures.append(f"{case['name']} [{name}]: rendered; jinja2 fails: {want['error']}")
                    lib.di_prompt_free(prompt)
                else:
                    ok += 1
                continue
            if st != 0:
                failures.append(f"{case['name']} [{name}]: rejected "
                                f"({lib.di_error_message(err).decode()}); jinja2 renders it")
                continue
            n = ctypes.c_size_t()
            text = ctypes.string_at(lib.di_prompt_text(prompt, ctypes.byref(n)), n.value).decode()
            ids_p, n_ids = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
            ids = None
            if lib.di_prompt_tokens(prompt, ctypes.byref(ids_p), ctypes.byref(n_ids), None) == 0:
                ids = ids_p[:n_ids.value]
            lib.di_prompt_free(prompt)
            if text != want["prompt"]:
                i = next((k for k in range(min(len(text), len(want["prompt"])))
                          if text[k] != want["prompt"][k]), min(len(text), len(want["prompt"])))
                failures.append(f"{case['name']} [{name}]: prompt differs at {i}: "
                                f"{text[max(0, i - 30):i + 30]!r} vs {want['prompt'][max(0, i - 30):i + 30]!r}")
            elif "ids" in want and ids != want["ids"]:
                failures.append(f"{case['name']} [{name}]: token IDs differ")
            else:
                ok += 1
    for f in failures[:15]:
        print("FAIL:", f)
    print(f"templates: {ok}/{total} cases identical to jinja2 (renders and rejections); "
          f"{deviations} chatml cases outside SmolLM2's template not compared")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
