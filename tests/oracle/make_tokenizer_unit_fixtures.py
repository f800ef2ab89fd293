#!/usr/bin/env python3
"""Small tokenizers with every pipeline component deepinfer supports, and HF
tokenizers' IDs for a set of strings — the oracle for test_tokenizer_configs.

    .venv-oracle/bin/python tests/oracle/make_tokenizer_unit_fixtures.py [--out FILE]

Each tokenizer is trained by HF's BpeTrainer on a fixed text (deterministic),
then given one pre-tokenizer / normalizer / added-token / post-processor setup.
Writes tests/fixtures/tokenizer/configs.json: [{name, tokenizer_json, cases:
[{text, ids, ids_add_special, ids_plain}]}]. ids_plain is HF's encoding with the
added vocabulary removed (deepinfer's flags 0).
"""
import json
import pathlib
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_oracle  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = ("The quick brown fox jumps over the lazy dog. Don't panic; it's only 42 apples, "
         "3.14159 pies and 1,000,000 dollars.\nCafé naïve résumé — 中文 日本語 한국어 😀 "
         "def f(x):\n    return x * 2  # double\n") * 20

CASES = [
    "", "The quick brown fox", "  leading and trailing  ", "a,b.c d,e", "1234567 89",
    "Café naïve e\u0301 (decomposed)", "don't STOP it's", "tabs\tand\nnewlines\r\n",
    "<special>x</special> [MASK] word[MASK]word  [MASK]  end", "😀👍🏽 中文",
    "ab ab abab xab", "x" * 50, "it's only 42 apples, 3.14159 pies and 1,000,000 dollars.",
    "The quick brown fox jumps over the lazy dog. Don't panic;", "swordfish words word, word_x",
    "x \u00b2 \u00bd \u216b \uff13 \U00010d40 Ġx", "a b  c\n\td",
]


def base():
    """Merges learnt across word, space and punctuation boundaries (training on
    whole lines), so every way of splitting the text changes the tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN.splitlines(), trainers.BpeTrainer(
        vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok


def bl(use_regex=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def configs():
    def seq(*steps):
        return pre_tokenizers.Sequence(list(steps))

    yield "bytelevel_regex", {}
    yield "split_removed", {"pre": seq(pre_tokenizers.Split(" ", "removed"), bl())}
    yield "split_merged_previous", {"pre": seq(pre_tokenizers.Split(Regex(r"\s+"), "merged_with_previous"), bl())}
    yield "split_merged_next", {"pre": seq(pre_tokenizers.Split(Regex(r"[,.]"), "merged_with_next"), bl())}
    yield "split_contiguous", {"pre": seq(pre_tokenizers.Split(Regex(r"\d"), "contiguous"), bl())}
    yield "split_invert", {"pre": seq(pre_tokenizers.Split(Regex(r"\p{L}+"), "removed", invert=True), bl())}
    yield "split_literal", {"pre": seq(pre_tokenizers.Split("ab", "isolated"), bl())}
    yield "digits", {"pre": seq(pre_tokenizers.Digits(individual_digits=True), bl(True))}
    yield "digits_grouped", {"pre": seq(pre_tokenizers.Digits(individual_digits=False), bl(True))}
    yield "nfc", {"norm": normalizers.NFC()}
    yield "nfkd", {"norm": normalizers.NFKD()}
    yield "added_tokens", {"added": [
        AddedToken("<special>", special=True, normalized=False),
        AddedToken("</special>", special=True, normalized=False),
        AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False),
        AddedToken("word", special=False, single_word=True, normalized=False),
        AddedToken("ab", special=False, normalized=True),
        AddedToken("Ġx", special=False, normalized=False),
    ]}
    yield "template_bos_eos", {"added": [AddedToken("<s>", special=True), AddedToken("</s>", special=True)],
                               "post": "bos_eos"}
    yield "ignore_merges", {"ignore_merges": True}
    # The DeepSeek V3 patterns with a behaviour other than Isolated must not take the
    # hand-written fast path, which implements Isolated only.
    ds = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
          "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"]
    yield "deepseek_patterns_removed", {"pre": seq(
        pre_tokenizers.Split(Regex(ds[0]), "isolated"), pre_tokenizers.Split(Regex(ds[1]), "isolated"),
        pre_tokenizers.Split(Regex(ds[2]), "removed"), bl())}


def build(name, cfg):
    tok = base()
    if "pre" in cfg:
        tok.pre_tokenizer = cfg["pre"]
    if "norm" in cfg:
        tok.normalizer = cfg["norm"]
    if "added" in cfg:
        tok.add_tokens(cfg["added"])
    if cfg.get("post") == "bos_eos":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> $B </s>",
            special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    spec = json.loads(tok.to_str())
    if cfg.get("ignore_merges"):
        spec["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(spec))
    plain = tokenizer_oracle.without_added_tokens(tok)
    cases = [{"text": t,
              "ids": tok.encode(t, add_special_tokens=False).ids,
              "ids_add_special": tok.encode(t, add_special_tokens=True).ids,
              "ids_plain": plain.encode(t, add_special_tokens=False).ids,
              "decoded": tok.decode(tok.encode(t, add_special_tokens=True).ids,
                                    skip_special_tokens=False)}
             for t in CASES]
    return {"name": name, "tokenizer_json": tok.to_str(), "cases": cases}


def main():
    out = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--out" \
        else ROOT / "tests/fixtures/tokenizer/configs.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    data = [build(n, c) for n, c in configs()]
    out.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(data)} tokenizers)", file=sys.stderr)


if __name__ == "__main__":
    main()
