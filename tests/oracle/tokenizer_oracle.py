"""Hugging Face `tokenizers` as the oracle for deepinfer's tokenizer.

tokenizer.json files load as they are. A GGUF file's tokenizer is turned into the
tokenizer.json that its model's Hugging Face repository carries, as
transformers' GGUF converters build it: the byte-level vocabulary and merges (but
no normalizer: the GGUF records none and llama.cpp applies none, although
transformers adds NFC for Qwen2 — docs/tokenizer.md),
control tokens as special added tokens, user-defined tokens as non-special
added tokens, and the pre-tokenizer of the model family named by
tokenizer.ggml.pre (its Split patterns, then ByteLevel without its regex; or
Digits + ByteLevel with the GPT-2 regex for the smollm/starcoder family).
The GGUF metadata is read by the small reader below, not by deepinfer's.
"""
import json
import struct

from tokenizers import Tokenizer

DEEPSEEK_V3 = [
    r"\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
QWEN2 = [
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+",
]
LLAMA3 = [
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+",
]
PRE = {
    "deepseek-v3": (DEEPSEEK_V3, False),
    "qwen2": (QWEN2, False), "deepseek-r1-qwen": (QWEN2, False),
    "llama3": (LLAMA3, False), "llama-bpe": (LLAMA3, False),
    "smollm": (None, True), "starcoder": (None, True),
    "gpt2": ([], "gpt2"),
}

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


def read_gguf_metadata(path):
    """The metadata key/values of a GGUF v2/v3 file (tensor data is not read)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(_SCALAR[t])

    assert data[:4] == b"GGUF", path
    pos = 4
    take("<I")
    take("<Q")
    n_kv = take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("<I"))
    return kv


def tokenizer_json_from_gguf(path):
    kv = read_gguf_metadata(path)
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    patterns, byte_level_regex = PRE[kv.get("tokenizer.ggml.pre", "gpt2")]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ty == 3})
        if ty != 5:
            # Added tokens sit in the model vocabulary too, as in the models' own
            # tokenizer.json files: HF keeps an added token's ID only when the
            # model knows it, and renumbers it past the vocabulary otherwise.
            vocab[t] = i
    if patterns is None:
        pre = [{"type": "Digits", "individual_digits": True},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": True}]
    else:
        pre = [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
               for p in patterns]
        pre.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": bool(byte_level_regex)})
    post = None
    if kv.get("tokenizer.ggml.add_bos_token") and "tokenizer.ggml.bos_token_id" in kv:
        bos = tokens[kv["tokenizer.ggml.bos_token_id"]]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [kv["tokenizer.ggml.bos_token_id"]],
                                         "tokens": [bos]}}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": kv["tokenizer.ggml.merges"]},
    }


def load(path):
    """The HF tokenizer for a tokenizer.json or GGUF path."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return Tokenizer.from_str(json.dumps(tokenizer_json_from_gguf(path)))
    return Tokenizer.from_file(str(path))


def without_added_tokens(tok):
    """The same tokenizer with its added vocabulary removed: plain text only."""
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))
