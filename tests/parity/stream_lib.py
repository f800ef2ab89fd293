"""ctypes access to deepinfer's output side (di_stream_*), for the parity tests.

run_case(lib, codec, protocol, body, pushes, finish, usage, ...) renders the
request, creates a stream with a fixed response id, model, created time and seed,
replays the pushes and returns the chunks (SSE event name, JSON) and the complete
response JSON. Standard library only.
"""
import ctypes

c_p = ctypes.c_void_p
PROTOCOLS = {"chat": 1, "messages": 2, "responses": 3}
FINISH = {"stop": 1, "length": 2, "content_filter": 3, "unknown": 4}


class StreamOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("response_id", ctypes.c_char_p),
                ("model", ctypes.c_char_p), ("created", ctypes.c_int64),
                ("seed", ctypes.c_uint64), ("signature", ctypes.c_char_p),
                ("override_parsing", ctypes.c_int32), ("parse_tool_calls", ctypes.c_int32),
                ("starts_in_tool_calls", ctypes.c_int32), ("parse_json_output", ctypes.c_int32),
                ("thinking_stage", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("stop_sequences", ctypes.c_void_p), ("n_stop_sequences", ctypes.c_size_t)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.di_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_codec_create.argtypes = [c_p, ctypes.c_int, ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_codec_render.argtypes = [c_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_prompt_free.argtypes = [c_p]
    lib.di_error_message.argtypes = [c_p]
    lib.di_error_message.restype = ctypes.c_char_p
    lib.di_error_free.argtypes = [c_p]
    lib.di_stream_create.argtypes = [c_p, c_p, ctypes.POINTER(StreamOptions),
                                     ctypes.POINTER(c_p), ctypes.POINTER(c_p)]
    lib.di_stream_ready.argtypes = [c_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p,
                                    ctypes.POINTER(c_p)]
    lib.di_stream_push_text.argtypes = [c_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                        ctypes.POINTER(c_p)]
    lib.di_stream_push_tokens.argtypes = [c_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                          ctypes.POINTER(c_p)]
    lib.di_stream_push_tokens_logprobs.argtypes = [
        c_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.POINTER(ctypes.c_float),
        ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float),
        ctypes.c_size_t, ctypes.POINTER(c_p)]
    lib.di_stream_finish.argtypes = [c_p, ctypes.c_int, ctypes.POINTER(c_p)]
    lib.di_stream_chunk_count.argtypes = [c_p]
    lib.di_stream_chunk_count.restype = ctypes.c_size_t
    lib.di_stream_chunk_json.argtypes = [c_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.di_stream_chunk_json.restype = ctypes.POINTER(ctypes.c_char)
    lib.di_stream_chunk_event.argtypes = [c_p, ctypes.c_size_t]
    lib.di_stream_chunk_event.restype = ctypes.c_char_p
    lib.di_stream_response_json.argtypes = [c_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.di_stream_response_json.restype = ctypes.POINTER(ctypes.c_char)
    lib.di_stream_free.argtypes = [c_p]
    lib.di_stream_options_init_size.argtypes = [ctypes.POINTER(StreamOptions), ctypes.c_size_t]
    lib.di_stream_finished.argtypes = [c_p]
    return lib


def check(lib, st, err, what):
    if st != 0:
        msg = lib.di_error_message(err).decode("utf-8", "replace")
        lib.di_error_free(err)
        raise RuntimeError(f"{what}: status {st}: {msg}")


def make_codec(lib, tokenizer_path, encoding=1):
    tok, codec, err = c_p(), c_p(), c_p()
    check(lib, lib.di_tokenizer_load(tokenizer_path.encode(), ctypes.byref(tok), ctypes.byref(err)),
          err, "tokenizer")
    check(lib, lib.di_codec_create(tok, encoding, ctypes.byref(codec), ctypes.byref(err)), err,
          "codec")
    return tok, codec


def _chunks(lib, s):
    out = []
    for i in range(lib.di_stream_chunk_count(s)):
        n = ctypes.c_size_t()
        ptr = lib.di_stream_chunk_json(s, i, ctypes.byref(n))
        ev = lib.di_stream_chunk_event(s, i)
        data = ctypes.string_at(ptr, n.value).decode("utf-8") if ptr else None
        out.append([ev.decode() if ev else None, data])
    return out


def run_case(lib, tok, codec, protocol, body, pushes, finish="stop", prompt_tokens=None,
             cache_hit=0, fingerprint=None, response_id="resp-id", model=None, created=1,
             seed=1, signature=None):
    """pushes: list of {"text": str, "tokens": n} or {"ids": [...]}. Returns
    (per-call chunk lists, response JSON)."""
    prompt, err, s = c_p(), c_p(), c_p()
    raw = body if isinstance(body, bytes) else body.encode()
    check(lib, lib.di_codec_render(codec, PROTOCOLS[protocol], raw, len(raw), ctypes.byref(prompt),
                                   ctypes.byref(err)), err, "render")
    opts = StreamOptions()
    lib.di_stream_options_init_size(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.response_id = response_id.encode()
    opts.model = model.encode() if model else None
    opts.created, opts.seed = created, seed
    opts.signature = signature.encode() if signature else None
    st = lib.di_stream_create(prompt, tok, ctypes.byref(opts), ctypes.byref(s), ctypes.byref(err))
    lib.di_prompt_free(prompt)
    check(lib, st, err, "stream")
    calls = []
    try:
        if prompt_tokens is not None:
            check(lib, lib.di_stream_ready(s, prompt_tokens, cache_hit,
                                           fingerprint.encode() if fingerprint else None,
                                           ctypes.byref(err)), err, "ready")
            calls.append(_chunks(lib, s))
        for p in pushes:
            if lib.di_stream_finished(s):
                break
            if "ids" in p:
                arr = (ctypes.c_int32 * len(p["ids"]))(*p["ids"])
                st = lib.di_stream_push_tokens(s, arr, len(p["ids"]), ctypes.byref(err))
            else:
                t = p["text"].encode()
                st = lib.di_stream_push_text(s, t, len(t), p.get("tokens", 0), ctypes.byref(err))
            check(lib, st, err, "push")
            calls.append(_chunks(lib, s))
        if finish is not None and not lib.di_stream_finished(s):
            check(lib, lib.di_stream_finish(s, FINISH[finish], ctypes.byref(err)), err, "finish")
            calls.append(_chunks(lib, s))
        n = ctypes.c_size_t()
        ptr = lib.di_stream_response_json(s, ctypes.byref(n))
        response = ctypes.string_at(ptr, n.value).decode() if ptr else None
        return calls, response
    finally:
        lib.di_stream_free(s)
