"""The Unicode general-category ranges deepinfer compiles in
(lib/tokenizer/unicode_classes.c) are exactly the classes HF tokenizers' regex
engine gives \\p{L}, \\p{M}, \\p{N}, \\p{P} and \\p{S}: every code point is run through
an HF Split pre-tokenizer with that class, and the matches compared.
Run by ctest with the oracle venv's python."""
import pathlib
import re
import sys

from tokenizers import Regex, pre_tokenizers

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "lib/tokenizer/unicode_classes.c"


def ours():
    text = SOURCE.read_text()
    out = {}
    for name, body in re.findall(r"tok_unicode_([LMNPS])\[\] = \{(.*?)\};", text, re.S):
        vals = [int(v, 16) for v in re.findall(r"0x([0-9A-F]+)", body)]
        n, pairs = vals[0], vals[1:]
        assert len(pairs) == 2 * n, name
        out[name] = {c for i in range(n) for c in range(pairs[2 * i], pairs[2 * i + 1] + 1)}
    return out


def hf():
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))
    out = {}
    for name in "LMNPS":
        kept = set()
        for _, (a, b) in pre_tokenizers.Split(Regex(r"\p{%s}" % name), "removed").pre_tokenize_str(text):
            kept.update(range(a, b))
        out[name] = {cps[i] for i in range(len(cps)) if i not in kept}
    return out


def main():
    a, b = ours(), hf()
    bad = False
    for name in "LMNPS":
        if a[name] != b[name]:
            extra, missing = sorted(a[name] - b[name]), sorted(b[name] - a[name])
            print(f"FAIL: \\p{{{name}}}: {len(extra)} code points only in deepinfer "
                  f"{[hex(c) for c in extra[:8]]}, {len(missing)} only in HF {[hex(c) for c in missing[:8]]}")
            bad = True
    print("unicode classes: " + ("MISMATCH" if bad else
          ", ".join(f"{n}={len(a[n])}" for n in "LMNPS") + " identical to HF tokenizers"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
