#!/usr/bin/env python3
"""Build the tokenizer parity corpus from real text shipped by Debian packages.

The tokenizer parity tests read the COMMITTED file
``tests/data/tokenizer_corpus.txt.zst`` (plus its section index
``tests/data/tokenizer_corpus.index.json``).  Nothing in CI runs this script;
it exists so that the corpus can be audited and regenerated.

How to run (Debian 12 "bookworm", as root, from the repository root)::

    apt-get update
    apt-get install -y --no-install-recommends man-db groff-base bsdextrautils \\
        zstd unicode-data \\
        manpages manpages-dev manpages-ja manpages-zh manpages-ru manpages-uk \\
        manpages-de manpages-fr manpages-es manpages-it manpages-pl \\
        manpages-pt-br manpages-nl manpages-ro manpages-mk manpages-el \\
        manpages-vi manpages-tr manpages-sr manpages-cs manpages-hu manpages-id \\
        libjs-jquery-ui libjs-highlight.js libjs-lodash \\
        golang-gopkg-yaml.v3-dev librust-regex-dev dt-schema
    python3 tests/oracle/build_corpus.py            # writes tests/data/...
    python3 tests/oracle/build_corpus.py --check    # rebuild, compare with committed

(There is no ``manpages-ko`` in bookworm; the few Korean pages come from
other packages such as man-db.)  Options: ``--out-dir DIR`` writes somewhere
else, ``--keep-plain FILE`` also writes the uncompressed corpus.

Outputs (all deterministic -- a second run on the same machine is
byte-identical):

* ``tokenizer_corpus.txt.zst``  -- the corpus, ``zstd -19 -T1`` (level 19,
  single thread; frame carries the content size and a checksum).
* ``tokenizer_corpus.index.json`` -- ``[{"name", "offset", "length",
  "source", "sha256"}]``; offset/length are BYTE positions in the
  uncompressed UTF-8 text, sections are contiguous and cover it completely.
* ``README.md`` -- provenance: sections, sizes, packages and versions.

Determinism rules: only files owned by an installed dpkg package are used
(third-party/local packages in ``DENY_PACKAGES`` are skipped); file lists are
sorted and then shuffled with ``random.Random(f"{SEED}:{section}")``; every
section has a fixed byte budget and files are cut at a line boundary; man
pages are rendered with a fixed environment (``LC_ALL=C.UTF-8 MANWIDTH=80
man -l FILE | col -bx``); the edge-case sections come from a seeded generator
that uses the Unicode 15.0 ``UnicodeData.txt`` of the ``unicode-data``
package (never Python's ``unicodedata``, whose version depends on the
interpreter).  Source bytes that are not valid UTF-8 (or not valid in the
declared gettext charset) are decoded with ``errors="replace"``, i.e. become
U+FFFD.  The result is therefore a function of this script, man-db/groff/col
and the SET of installed packages with their versions: any extra package that
ships matching files (another -dev package, another locale) changes the
candidate lists and therefore the seeded draw, so ``--check`` only passes on a
machine with the same package set (README.md lists the contributing packages
and versions).  That is why the tests use the committed file and never this
script.

Standard library only (Python >= 3.9; written for 3.11).
"""

from __future__ import annotations

import argparse
import bz2
import concurrent.futures
import gzip
import hashlib
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SEED = 20240917
ZSTD_LEVEL = 19
MIN_TOTAL = 20_000_000
MAX_TOTAL = 26_000_000

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "data"

# Installed but not from the Debian archive on the reference machine
# (apt shows them as [installed,local]); never used as a source.
DENY_PACKAGES = re.compile(
    r"^(google-cloud-cli.*|google-cloud-sdk.*|kubectl|nodejs|npm|osslsigncode"
    r"|cuda.*|libcuda.*|libnvidia.*|nvidia.*|libnccl.*|libcudnn.*)$"
)

MAN_ENV = {
    "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
    "LC_ALL": "C.UTF-8",
    "LANG": "C.UTF-8",
    "MANWIDTH": "80",
    "MANOPT": "",
    "MANPAGER": "cat",
    "PAGER": "cat",
    "TZ": "UTC",
    "SOURCE_DATE_EPOCH": "0",
}

UNICODE_DIR = Path("/usr/share/unicode")


# --------------------------------------------------------------------------
# dpkg database
# --------------------------------------------------------------------------

class Dpkg:
    def __init__(self) -> None:
        self.version: dict[str, str] = {}
        status = Path("/var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
        for para in status.split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if line[:1] in (" ", "\t") or ":" not in line:
                    continue
                k, _, v = line.partition(":")
                fields[k] = v.strip()
            if fields.get("Status", "").endswith(" installed") and "Package" in fields:
                self.version[fields["Package"]] = fields.get("Version", "?")
        self.owner: dict[str, str] = {}
        info = Path("/var/lib/dpkg/info")
        for lst in sorted(info.glob("*.list")):
            pkg = lst.name[: -len(".list")].split(":")[0]
            if pkg not in self.version or DENY_PACKAGES.match(pkg):
                continue
            for line in lst.read_text(encoding="utf-8", errors="replace").splitlines():
                if line and line not in self.owner:
                    self.owner[line] = pkg
        self.used: set[str] = set()

    def pkg_of(self, path: str) -> str | None:
        p = self.owner.get(path)
        if p is None and path.startswith("/usr/"):
            # usrmerge: packages may list /bin/x while we walk /usr/bin/x
            p = self.owner.get(path[4:])
        return p

    def files(self, pred) -> list[str]:
        """Sorted, de-duplicated regular files owned by allowed packages."""
        seen: set[str] = set()
        out = []
        for path in sorted(self.owner):
            if not pred(path):
                continue
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            out.append(path)
        return out


# --------------------------------------------------------------------------
# text helpers
# --------------------------------------------------------------------------

def read_bytes(path: str) -> bytes:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    if path.endswith(".bz2"):
        with bz2.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", errors="replace")


def take(text: str, cap: int) -> str:
    """At most `cap` UTF-8 bytes of `text`, cut at a line end when possible."""
    b = text.encode("utf-8")
    if len(b) <= cap:
        return text
    cut = b.rfind(b"\n", 0, cap)
    if cut < cap // 2:
        cut = cap - 1
    # decode(errors="ignore") drops a multi-byte sequence split by the cut
    return b[: cut + 1].decode("utf-8", errors="ignore")


def nbytes(s: str) -> int:
    return len(s.encode("utf-8"))


def shuffled(items: list, tag: str) -> list:
    items = list(items)
    random.Random(f"{SEED}:{tag}").shuffle(items)
    return items


def fill(name: str, paths: list[str], budget: int, cap: int, loader, dpkg: Dpkg,
         min_bytes: int = 64, batch: int = 1):
    """Concatenate loader(path) for shuffled paths until `budget` bytes.

    `loader` may be slow (subprocess); with batch > 1 it is mapped over a
    thread pool but results are consumed in list order, so the output does
    not depend on timing.
    """
    parts: list[str] = []
    used_pkgs: set[str] = set()
    nfiles = 0
    total = 0
    order = shuffled(paths, name)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=batch) if batch > 1 else None
    try:
        i = 0
        while i < len(order) and total < budget:
            chunk = order[i: i + batch]
            i += len(chunk)
            texts = list(pool.map(loader, chunk)) if pool else [loader(p) for p in chunk]
            for path, text in zip(chunk, texts):
                if total >= budget:
                    break
                if not text or nbytes(text) < min_bytes:
                    continue
                text = take(text, min(cap, budget - total))
                if not text.endswith("\n"):
                    text = take(text, nbytes(text) - 1) + "\n"
                parts.append(text)
                total += nbytes(text)
                nfiles += 1
                pkg = dpkg.pkg_of(path)
                if pkg:
                    used_pkgs.add(pkg)
    finally:
        if pool:
            pool.shutdown()
    dpkg.used |= used_pkgs
    return "".join(parts), nfiles, used_pkgs


def describe(pkgs: set[str], dpkg: Dpkg, limit: int = 6) -> str:
    names = sorted(pkgs)
    s = ", ".join(f"{p} {dpkg.version[p]}" for p in names[:limit])
    if len(names) > limit:
        s += f", +{len(names) - limit} more packages"
    return s


# --------------------------------------------------------------------------
# loaders
# --------------------------------------------------------------------------

def render_man(path: str) -> str:
    try:
        raw = read_bytes(path)
    except OSError:
        return ""
    head = raw[:200].lstrip()
    if head.startswith(b".so ") and len(raw) < 200:
        return ""  # alias stub
    try:
        man = subprocess.run(["man", "-l", path], env=MAN_ENV, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
        col = subprocess.run(["col", "-bx"], env=MAN_ENV, input=man.stdout,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    except subprocess.TimeoutExpired:
        return ""
    text = col.stdout.decode("utf-8", errors="replace")
    lines = [ln.rstrip() for ln in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def mo_msgstrs(path: str) -> list[str]:
    """msgstr texts of a GNU .mo catalog.

    Parsed directly (same result as the msgstr fields of `msgunfmt`, without
    PO escaping). The header entry and msgstrs identical to their msgid
    (untranslated copies) are skipped; plural forms become separate items.
    """
    data = read_bytes(path)
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x950412DE:
        end = "<"
    elif magic == 0xDE120495:
        end = ">"
    else:
        return []
    _rev, n, oo, to = struct.unpack(end + "4I", data[4:20])
    charset = "utf-8"
    out = []
    for i in range(n):
        length, off = struct.unpack(end + "2I", data[to + 8 * i: to + 8 * i + 8])
        raw = data[off: off + length]
        olen, ooff = struct.unpack(end + "2I", data[oo + 8 * i: oo + 8 * i + 8])
        msgid = data[ooff: ooff + olen].split(b"\x04")[-1]  # drop msgctxt
        if raw == msgid or raw.split(b"\0")[0] == msgid.split(b"\0")[0]:
            continue  # untranslated copy of the English msgid
        if olen == 0 and b"Content-Type:" in raw:
            m = re.search(rb"charset=([A-Za-z0-9_.:-]+)", raw)
            if m:
                charset = m.group(1).decode("ascii").lower()
            continue
        try:
            s = raw.decode(charset, errors="replace")
        except LookupError:
            s = raw.decode("utf-8", errors="replace")
        for form in s.split("\0"):
            if form.strip():
                out.append(form)
    return out


# --------------------------------------------------------------------------
# section builders
# --------------------------------------------------------------------------

class Corpus:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.index: list[dict] = []
        self.offset = 0

    def add(self, name: str, text: str, source: str) -> None:
        if not text:
            print(f"  !! section {name} is empty, skipped", file=sys.stderr)
            return
        if not text.endswith("\n"):
            text += "\n"
        b = text.encode("utf-8", errors="strict")
        self.index.append({"name": name, "offset": self.offset, "length": len(b),
                           "source": source, "sha256": hashlib.sha256(b).hexdigest()})
        self.parts.append(b)
        self.offset += len(b)
        print(f"  {name:32s} {len(b):>10,d}", file=sys.stderr)

    def data(self) -> bytes:
        return b"".join(self.parts)


ENGLISH_MAN_SECTIONS = ("man1", "man5", "man7", "man8")


def build_english(c: Corpus, d: Dpkg) -> None:
    man = d.files(lambda p: re.match(r"^/usr/share/man/(man[1578])/[^/]+$", p) is not None)
    text, n, pk = fill("en-man", man, 1_300_000, 40_000, render_man, d, min_bytes=400, batch=16)
    c.add("en-man", text, f"{n} English man pages (sections 1,5,7,8) rendered with "
          f"'MANWIDTH=80 man -l | col -bx' from /usr/share/man: {describe(pk, d)}")

    doc = r"^/usr/share/doc/[^/]+/"
    deb = d.files(lambda p: re.match(doc + r"changelog\.Debian(\.[a-z0-9]+)?\.gz$", p) is not None)
    text, n, pk = fill("en-changelog-debian", deb, 700_000, 6_000, read_text, d)
    c.add("en-changelog-debian", text,
          f"first 6 KB of {n} /usr/share/doc/*/changelog.Debian.gz: {describe(pk, d)}")

    up = d.files(lambda p: re.match(doc + r"(changelog|NEWS|CHANGES|HISTORY|RELEASE[-_]?NOTES)"
                                          r"([._-][^/]*)?$", p, re.I) is not None
                 and "changelog.Debian" not in p and not p.endswith((".html", ".pdf")))
    text, n, pk = fill("en-changelog-upstream", up, 550_000, 16_000, read_text, d)
    c.add("en-changelog-upstream", text,
          f"{n} upstream changelog/NEWS files from /usr/share/doc: {describe(pk, d)}")

    rd = d.files(lambda p: re.match(doc + r"(.+/)?(README|FAQ|TODO|USAGE|AUTHORS|THANKS|BUGS|"
                                          r"INSTALL|CONTRIBUTING|[^/]+\.(md|rst|txt))([._-][^/]*)?$",
                                    p) is not None
                 and not re.search(r"\.(html?|pdf|png|svg|js|css|py|c|h)(\.gz)?$", p)
                 and "/copyright" not in p)
    text, n, pk = fill("en-readme", rd, 900_000, 24_000, read_text, d)
    c.add("en-readme", text, f"{n} README/FAQ/*.md/*.txt files from /usr/share/doc: "
          f"{describe(pk, d)}")


def build_code(c: Corpus, d: Dpkg) -> None:
    def small(p: str, limit: int = 4_000_000) -> bool:
        try:
            return os.path.getsize(p) <= limit
        except OSError:
            return False

    specs = [
        ("code-python", 1_150_000, 24_000,
         lambda p: re.match(r"^/usr/lib/python3(\.\d+)?/.*\.py$", p) is not None,
         "Python sources (python3.11 stdlib, python3-* packages)"),
        ("code-c-headers", 900_000, 16_000,
         lambda p: p.startswith("/usr/include/") and p.endswith(".h"),
         "C headers from /usr/include"),
        ("code-cpp", 300_000, 16_000,
         lambda p: (p.startswith("/usr/include/") and p.endswith((".hpp", ".hh", ".hxx", ".tcc")))
         or re.match(r"^/usr/include/c\+\+/\d+/[a-z_]+$", p) is not None,
         "C++ headers (libstdc++ and others) from /usr/include"),
        ("code-shell", 450_000, 16_000, None,
         "POSIX sh / bash scripts (#! line) shipped in /usr/bin, /usr/sbin, /usr/lib, /usr/share, /etc"),
        ("code-perl", 250_000, 16_000,
         lambda p: p.endswith((".pm", ".pl")) and p.startswith(("/usr/share/perl", "/usr/lib/x86_64-linux-gnu/perl")),
         "Perl modules"),
        ("code-javascript", 600_000, 40_000,
         lambda p: p.endswith(".js") and not p.endswith(".min.js") and "/min/" not in p,
         "JavaScript (not minified)"),
        ("code-json", 300_000, 60_000, lambda p: p.endswith(".json"),
         "JSON data files"),
        ("code-yaml", 200_000, 24_000, lambda p: p.endswith((".yaml", ".yml")),
         "YAML files"),
        ("code-go", 150_000, 24_000, lambda p: p.endswith(".go"), "Go sources"),
        ("code-rust", 250_000, 24_000, lambda p: p.endswith(".rs"),
         "Rust sources"),
        ("code-cmake", 150_000, 16_000,
         lambda p: p.endswith(".cmake") or p.endswith("/CMakeLists.txt"), "CMake modules"),
    ]
    shell_dirs = ("/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/lib/",
                  "/usr/share/", "/etc/")

    def is_shell(p: str) -> bool:
        if not p.startswith(shell_dirs) or "/usr/share/doc/" in p or "/usr/share/man/" in p:
            return False
        base = os.path.basename(p)
        if "." in base and not base.endswith((".sh", ".bash")):
            return False
        try:
            with open(p, "rb") as f:
                head = f.read(64)
        except OSError:
            return False
        return re.match(rb"#! ?(/usr)?/bin/(env +)?(ba|da)?sh\b", head) is not None

    for name, budget, cap, pred, what in specs:
        if pred is None:
            pred = is_shell
        paths = d.files(lambda p, pred=pred: pred(p) and small(p))
        text, n, pk = fill(name, paths, budget, cap, read_text, d)
        c.add(name, text, f"{what}: {n} files from {describe(pk, d)}")


# Translated man pages: byte budget per /usr/share/man/<lang> directory.
MAN_L10N = [
    ("ja", 1_100_000), ("zh_CN", 900_000), ("zh_TW", 700_000), ("ko", 400_000),
    ("ru", 700_000), ("uk", 650_000), ("mk", 200_000), ("sr", 350_000), ("el", 100_000),
    ("vi", 400_000), ("de", 420_000), ("fr", 420_000), ("es", 330_000), ("it", 250_000),
    ("pl", 330_000), ("pt_BR", 230_000), ("pt", 120_000), ("nl", 200_000), ("ro", 160_000),
    ("tr", 250_000), ("cs", 200_000), ("hu", 150_000), ("sv", 150_000), ("id", 120_000),
    ("da", 80_000), ("fi", 30_000), ("hr", 30_000), ("sl", 30_000),
]


def build_man_l10n(c: Corpus, d: Dpkg) -> None:
    for lang, budget in MAN_L10N:
        pages = d.files(lambda p, lang=lang: re.match(
            rf"^/usr/share/man/{re.escape(lang)}/man[1-9][^/]*/[^/]+$", p) is not None)
        text, n, pk = fill(f"man-{lang}", pages, budget, 40_000, render_man, d,
                           min_bytes=300, batch=16)
        c.add(f"man-{lang}", text, f"{n} /usr/share/man/{lang} pages rendered with "
              f"'MANWIDTH=80 man -l | col -bx': {describe(pk, d)}")


# gettext catalogs: byte budget per /usr/share/locale/<lang>
MO_LANGS = [
    # right-to-left scripts
    ("ar", 94_000), ("he", 94_000), ("fa", 76_000), ("ur", 34_000), ("ug", 68_000),
    ("ckb", 26_000), ("ps", 51_000), ("yi", 51_000), ("dv", 17_000), ("sd", 10_000),
    # Indic and south/south-east Asian
    ("hi", 94_000), ("bn", 76_000), ("ta", 85_000), ("te", 76_000), ("ml", 76_000),
    ("kn", 76_000), ("gu", 76_000), ("pa", 76_000), ("mr", 76_000), ("ne", 68_000),
    ("or", 60_000), ("as", 51_000), ("mai", 34_000), ("si", 68_000), ("th", 94_000),
    ("km", 68_000), ("lo", 13_000), ("my", 68_000), ("dz", 51_000),
    # CJK
    ("ja", 102_000), ("ko", 94_000), ("zh_CN", 102_000), ("zh_TW", 94_000), ("zh_HK", 34_000),
    # Caucasus, Ethiopic, others
    ("ka", 94_000), ("hy", 85_000), ("am", 34_000), ("ti", 21_000), ("gez", 17_000),
    ("chr", 10_000), ("iu", 8_000), ("el", 94_000), ("vi", 85_000),
    # Cyrillic
    ("ru", 94_000), ("uk", 85_000), ("be", 68_000), ("bg", 68_000), ("sr", 68_000),
    ("mk", 51_000), ("kk", 51_000), ("mn", 51_000), ("ky", 34_000), ("tg", 26_000),
    ("tt", 26_000),
    # Latin with diacritics
    ("tr", 42_000), ("pl", 42_000), ("cs", 42_000), ("ro", 34_000), ("hu", 34_000),
    ("lt", 34_000), ("lv", 34_000), ("de", 34_000), ("fr", 34_000), ("es", 34_000),
    ("pt_BR", 34_000), ("ca", 26_000), ("eu", 26_000), ("eo", 26_000), ("is", 26_000),
    ("az", 26_000), ("uz", 26_000), ("yo", 17_000), ("ha", 8_000),
]


def build_gettext(c: Corpus, d: Dpkg) -> None:
    for lang, budget in MO_LANGS:
        mos = d.files(lambda p, lang=lang: re.match(
            rf"^/usr/share/locale/{re.escape(lang)}/LC_MESSAGES/[^/]+\.mo$", p) is not None)
        seen: set[str] = set()

        def load(p: str, seen=seen) -> str:
            out = []
            for s in mo_msgstrs(p):
                if s in seen:
                    continue
                seen.add(s)
                out.append(s if s.endswith("\n") else s + "\n")
            return "".join(out)

        text, n, pk = fill(f"gettext-{lang}", mos, budget, 12_000, load, d, min_bytes=1)
        c.add(f"gettext-{lang}", text, f"msgstr texts (deduplicated, one per line) of {n} .mo "
              f"catalogs in /usr/share/locale/{lang}: {describe(pk, d)}")


# --------------------------------------------------------------------------
# Unicode data
# --------------------------------------------------------------------------

class UData:
    """Assigned code points from UnicodeData.txt (unicode-data package)."""

    def __init__(self) -> None:
        self.cat: dict[int, str] = {}
        self.name: dict[int, str] = {}
        first = None
        for line in (UNICODE_DIR / "UnicodeData.txt").read_text(encoding="ascii").splitlines():
            f = line.split(";")
            cp = int(f[0], 16)
            if f[1].endswith(", First>"):
                first = cp
                continue
            if f[1].endswith(", Last>"):
                for x in range(first, cp + 1):
                    self.cat[x] = f[2]
                continue
            self.cat[cp] = f[2]
            self.name[cp] = f[1]

    def assigned(self, lo: int, hi: int, cats: tuple[str, ...] | None = None) -> list[int]:
        return [x for x in range(lo, hi + 1) if x in self.cat
                and self.cat[x] != "Cs" and (cats is None or self.cat[x][0] in cats
                                              or self.cat[x] in cats)]


def hexseq(s: str) -> str:
    return "".join(chr(int(h, 16)) for h in s.split())


def build_unicode(c: Corpus, d: Dpkg, u: UData) -> None:
    pkg = "unicode-data"
    d.used.add(pkg)
    ver = d.version.get(pkg, "?")
    et = read_text(str(UNICODE_DIR / "emoji" / "emoji-test.txt"))
    c.add("unicode-emoji-test", et, f"emoji-test.txt verbatim ({pkg} {ver}): all RGI emoji "
          "incl. ZWJ sequences, skin tones, flags, keycaps")

    lines = []
    for line in read_text(str(UNICODE_DIR / "emoji" / "emoji-variation-sequences.txt")).splitlines():
        if not line or line.startswith("#"):
            continue
        seq, _, rest = line.partition(";")
        lines.append(f"{hexseq(seq)}\t{seq.strip()}\t{rest.split('#')[0].strip(' ;')}")
    lines.append("")
    for line in read_text(str(UNICODE_DIR / "NamedSequences.txt")).splitlines():
        if not line or line.startswith("#"):
            continue
        nm, _, seq = line.partition(";")
        lines.append(f"{hexseq(seq)}\t{nm}")
    c.add("unicode-sequences", "\n".join(lines),
          f"emoji-variation-sequences.txt and NamedSequences.txt with code points rendered ({pkg} {ver})")

    rng = random.Random(f"{SEED}:combining")
    marks = [x for x in sorted(u.cat) if u.cat[x] in ("Mn", "Mc", "Me")]
    bases = "aeiouAEIOUnxyzαβγабвאבגابتकखगกขคกะ가나ㄱ字ทอ0123456789◌ "
    out = []
    for m in marks:
        mc = chr(m)
        ex = " ".join(rng.choice(bases) + mc for _ in range(6))
        out.append(f"U+{m:04X} {u.name.get(m, '?')}: ◌{mc} {ex}")
    for _ in range(1200):  # stacked marks ("zalgo") on letters of several scripts
        w = []
        for _ in range(rng.randint(1, 8)):
            w.append(rng.choice(bases.strip()) + "".join(chr(rng.choice(marks))
                                                         for _ in range(rng.randint(1, 12))))
        out.append("".join(w))
    c.add("unicode-combining", "\n".join(out), f"every combining mark (gc=Mn/Mc/Me) of "
          f"UnicodeData.txt ({pkg} {ver}) on assorted bases, plus seeded stacked-mark words")

    nt = read_text(str(UNICODE_DIR / "NormalizationTest.txt.bz2"))
    rows = []
    for line in nt.splitlines():
        if not line or line[0] in "#@":
            continue
        cols = line.split(";")[:5]
        rows.append("\t".join(hexseq(x) for x in cols))
    rows = [rows[i] for i in sorted(random.Random(f"{SEED}:normtest").sample(range(len(rows)), 4000))]
    c.add("unicode-normalization", "\n".join(rows),
          f"4000 seeded rows of NormalizationTest.txt ({pkg} {ver}) as literal text: "
          "source, NFC, NFD, NFKC, NFKD separated by TAB")

    uh = read_text(str(UNICODE_DIR / "Unihan_Readings.txt.bz2"))
    rows = []
    for line in uh.splitlines():
        if not line or line.startswith("#"):
            continue
        cp, field, val = line.split("\t", 2)
        if field not in ("kDefinition", "kMandarin", "kJapaneseKun", "kKorean", "kVietnamese",
                         "kCantonese", "kHangul"):
            continue
        val = re.sub(r"U\+([0-9A-F]{4,6})", lambda m: chr(int(m.group(1), 16)), val)
        rows.append(f"{chr(int(cp[2:], 16))}\t{field}\t{val}")
    rows = [rows[i] for i in sorted(random.Random(f"{SEED}:unihan").sample(range(len(rows)), 4500))]
    c.add("unicode-unihan", "\n".join(rows),
          f"4500 seeded Unihan_Readings.txt rows ({pkg} {ver}) with the ideograph (BMP, Ext A-H) "
          "written literally")


# --------------------------------------------------------------------------
# generated edge cases
# --------------------------------------------------------------------------

EN_WORDS = ("the of and to in is that it for on with as was by this be are from at or an "
            "tokenizer model byte pair encoding merge rank vocabulary sentence piece token "
            "inference kernel tensor matrix vector cache buffer stream parse encode decode "
            "hello world quick brown fox jumps over lazy dog caf\u00e9 na\u00efve r\u00e9sum\u00e9 "
            "don't can't won't shouldn't y'all o'clock rock'n'roll").split()
WORLD = ["مرحبا بالعالم", "هذا نص عربي للاختبار", "שלום עולם", "זהו טקסט בעברית",
         "Привет, мир", "Съешь же ещё этих мягких французских булок", "Γειά σου Κόσμε",
         "नमस्ते दुनिया", "यह एक परीक्षण है", "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
         "你好，世界", "我们今天学习分词器。", "こんにちは世界", "カタカナとひらがなと漢字",
         "안녕하세요 세계", "토크나이저 테스트입니다", "გამარჯობა მსოფლიო", "Բարեւ աշխարհ",
         "ሰላም ልዑል", "வணக்கம் உலகம்", "ಹಲೋ ವರ್ಲ್ಡ್", "ഹലോ വേൾഡ്", "ສະບາຍດີ", "မင်္ဂလာပါ",
         "Xin chào thế giới", "Tiếng Việt có dấu", "Zażółć gęślą jaźń", "Příliš žluťoučký kůň",
         "Fußgängerübergänge", "ᚠᛇᚻ᛫ᛒᛦᚦ", "ꓚꓰ ꓑꓲ", "ᐃᓄᒃᑎᑐᑦ", "ތާނަ", "ܫܠܡܐ"]
SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
           "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
           "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
           "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
           "<｜tool▁outputs▁end｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
           "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁797｜>", "<|endoftext|>",
           "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<pad>", "[INST]", "[/INST]",
           "<|begin_of_text|>", "<|eot_id|>"]
SPECIAL_BROKEN = ["<｜begin▁of▁sentence|>", "<|begin▁of▁sentence｜>", "<｜begin▁of▁sentence",
                  "begin▁of▁sentence｜>", "<｜begin_of_sentence｜>", "<｜｜>", "｜｜", "｜",
                  "｜｜｜", "▁", "▁▁▁▁", "<think", "think>", "< think>", "<think >", "<THINK>",
                  "<Think>", "<think></think>", "<think><think>", "</think></think>", "<<think>>",
                  "</ think>", "<｜User｜｜Assistant｜>", "<|im_start", "<||>", "<|>", "＜think＞"]
CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'Re", "'RE", "'rE", "'ve", "'VE", "'Ve",
                "'m", "'M", "'ll", "'LL", "'Ll", "'lL", "'d", "'D", "’s", "’LL", "’Re", "ʼs", "'ſ",
                "'ſt", "''", "'", "’"]
ODD_LETTERS = ["ſ", "ẞ", "ß", "İ", "ı", "K", "Å", "ﬀ", "ﬁ", "ﬂ", "ﬃ", "ﬄ", "ﬅ", "ﬆ", "Ǆ", "ǅ",
               "ǆ", "ς", "Σ", "ΐ", "ŉ", "ǰ", "ẖ", "Ⅻ", "ⅻ", "Ꭰ", "ꭰ", "𐐀", "𐐨", "µ", "Ω"]
SPACES = [" ", "\t", "\n", "\r\n", "\r", "\u3000", "\u00a0", "\u2000", "\u2001", "\u2002",
          "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
          "\u202f", "\u205f", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u1680",
          "\u180e", "\ufeff", "\u200b"]
DIGITS = [0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6,
          0xD66, 0xE50, 0xED0, 0xF20, 0x1040, 0x17E0, 0x1810, 0x1946, 0xFF10, 0x1D7CE, 0x1D7D8,
          0x1D7E2, 0x1D7EC, 0x1D7F6, 0x104A0, 0x11066, 0x1E950, 0x1FBF0]
BIDI = ["\u200e", "\u200f", "\u061c", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
        "\u2066", "\u2067", "\u2068", "\u2069"]


def ascii_case(rng: random.Random, w: str) -> str:
    mode = rng.randrange(4)
    if mode == 0:
        return w
    if mode == 1:
        return "".join(ch.upper() if "a" <= ch <= "z" else ch for ch in w)
    if mode == 2:
        return w[:1].upper() + w[1:] if w[:1].isascii() else w
    return "".join((ch.upper() if rng.random() < 0.5 else ch) if "a" <= ch <= "z" else ch for ch in w)


def gen_section(tag: str, budget: int, line) -> str:
    rng = random.Random(f"{SEED}:{tag}")
    out = []
    total = 0
    while total < budget:
        s = line(rng)
        out.append(s)
        total += nbytes(s)
    return take("".join(out), budget)


def build_edge(c: Corpus, u: UData) -> None:
    words = lambda r, n: " ".join(r.choice(EN_WORDS) for _ in range(n))  # noqa: E731
    emoji = [hexseq(l.split(";")[0]) for l in read_text(str(UNICODE_DIR / "emoji" / "emoji-test.txt")).splitlines()
             if l and not l.startswith("#") and "; fully-qualified" in l]
    cjk_b = u.assigned(0x20000, 0x2A6DF)
    cjk_rest = u.assigned(0x2A700, 0x323AF)
    math = u.assigned(0x1D400, 0x1D7FF)
    emoticons = u.assigned(0x1F300, 0x1FAFF)
    hist = (u.assigned(0x10000, 0x100FA) + u.assigned(0x10330, 0x1034A) + u.assigned(0x12000, 0x12399)
            + u.assigned(0x13000, 0x1342E) + u.assigned(0x1D100, 0x1D1EA) + u.assigned(0x10400, 0x1044F)
            + u.assigned(0x1F100, 0x1F1FF))
    ch = chr
    src = "generated by build_corpus.py (seeded random.Random)"

    def ws(r):
        k = r.randrange(8)
        if k == 0:
            return r.choice(SPACES) * r.choice([1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 100, 255, 256, 1000])
        if k == 1:
            return "".join(r.choice(SPACES) for _ in range(r.randint(1, 64)))
        if k == 2:
            return words(r, r.randint(1, 8)) + " " * r.randint(0, 40) + "\n"
        if k == 3:
            return "\t" * r.randint(1, 12) + words(r, 3) + "\r\n" * r.randint(1, 5)
        if k == 4:
            return "\u3000".join(r.choice(WORLD) for _ in range(3)) + "\u3000" * r.randint(1, 9) + "\n"
        if k == 5:
            return "\u00a0".join(words(r, 1) for _ in range(r.randint(2, 9))) + "\u00a0\n"
        if k == 6:
            return r.choice(SPACES).join(words(r, 1) for _ in range(r.randint(2, 9))) + "\n"
        return "    " * r.randint(1, 10) + "if x:\n" + "\t" * r.randint(1, 6) + "return y  \n\n\n"
    c.add("edge-whitespace", gen_section("ws", 110_000, ws), src + ": whitespace runs "
          "(space, TAB, CR LF, NBSP, U+3000, U+2000-200A, U+2028/2029, NEL, VT, FF, BOM, ZWSP)")

    def digits(r):
        base = r.choice(DIGITS)
        n = r.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 20, 31, 32, 33, 64, 100, 257])
        run = "".join(ch(base + r.randrange(10)) for _ in range(n))
        k = r.randrange(7)
        if k == 0:
            return run + "\n"
        if k == 1:
            return f"{r.randrange(10**r.randint(1, 12)):,}.{r.randrange(100):02d} {r.random():.17g} {r.randrange(1 << 64):#x}\n"
        if k == 2:
            return f"v{r.randrange(20)}.{r.randrange(100)}.{r.randrange(1000)}-rc.{r.randrange(9)} 2024-{r.randint(1,12):02d}-{r.randint(1,28):02d}T{r.randrange(24):02d}:{r.randrange(60):02d}:00Z +1-555-{r.randrange(10000):04d}\n"
        if k == 3:
            return words(r, 2) + run + words(r, 1) + run[::-1] + "\n"
        if k == 4:
            return f"{r.random() * 10 ** r.randint(-30, 30):e} {-r.randrange(10**9)} 0b{r.randrange(1 << 40):b} 1e{r.randint(-308, 308)} {r.randrange(10**40)}\n"
        if k == 5:
            return " ".join("".join(ch(r.choice(DIGITS) + r.randrange(10)) for _ in range(r.randint(1, 6))) for _ in range(8)) + "\n"
        return "".join(str(i % 10) for i in range(n * 7)) + " " + "9" * n + " " + "0" * n + "\n"
    c.add("edge-digits", gen_section("digits", 110_000, digits), src + ": digit runs 1..700 "
          "long in ASCII, Arabic-Indic, Devanagari, Thai, full-width, math-bold and other scripts")

    ctrl = [ch(x) for x in range(0x20)] + ["\x7f"] + [ch(x) for x in range(0x80, 0xA0)]
    nonchar = ["\ufffd", "\ufffe", "\uffff", "\U0010ffff", "\U0001fffe", "\U000f0000", "\ue000", "\uf8ff"]

    def controls(r):
        k = r.randrange(5)
        if k == 0:
            return "".join(r.choice(ctrl) for _ in range(r.randint(1, 40))) + "\n"
        if k == 1:
            return "\x00".join(words(r, 1) for _ in range(r.randint(2, 6))) + "\n"
        if k == 2:
            return words(r, 2) + r.choice(ctrl) + words(r, 2) + r.choice(nonchar) + "\n"
        if k == 3:
            return "\x1b[" + str(r.randrange(100)) + "m" + words(r, 3) + "\x1b[0m\x07\x08\n"
        return "".join(ch(x) for x in range(0x20)) + "\x7f" + "".join(nonchar) + "\n"
    c.add("edge-controls", gen_section("controls", 70_000, controls), src + ": C0 controls "
          "U+0000-001F (incl. NUL), DEL, C1 U+0080-009F, ANSI escapes, noncharacters U+FFFE/FFFF/10FFFF, "
          "private use, U+FFFD")

    rtl = [w for w in WORLD if any("\u0590" <= x <= "\u08ff" or "\u0700" <= x <= "\u074f" or "\u0780" <= x <= "\u07bf" for x in w)]

    def bidi(r):
        k = r.randrange(4)
        if k == 0:
            return f"{r.choice(rtl)} {words(r, 3)} {r.randrange(10000)} {r.choice(rtl)} ({words(r, 1)}).\n"
        if k == 1:
            return r.choice(BIDI) + r.choice(rtl) + r.choice(BIDI) + words(r, 2) + r.choice(BIDI) + "\n"
        if k == 2:
            return "".join(r.choice(rtl).split()[0] + words(r, 1) for _ in range(4)) + "\n"
        return f"\u202e{words(r, 4)}\u202c \u2067{r.choice(rtl)} 123-456\u2069 \u200f%{r.randrange(100)}\u200e\n"
    c.add("edge-bidi", gen_section("bidi", 80_000, bidi), src + ": mixed-direction Arabic/"
          "Hebrew/Syriac/Thaana with Latin and numbers, bidi controls LRM/RLM/ALM/LRE..PDI")

    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/="

    def longw(r):
        k = r.randrange(8)
        n = r.choice([64, 100, 255, 256, 257, 500, 1000, 2048, 4096])
        if k == 0:
            return "".join(r.choice(alnum) for _ in range(n)) + "\n"
        if k == 1:
            return r.choice("a-=_.x0#*~") * n + "\n"
        if k == 2:
            return "".join(w.capitalize() for w in (r.choice(EN_WORDS).replace("'", "") for _ in range(n // 6))) + "\n"
        if k == 3:
            return "https://example.com/" + "/".join(words(r, 1) for _ in range(n // 10)) + "?q=" + "%E2%96%81" * 20 + "\n"
        if k == 4:
            return "".join(r.choice(WORLD).replace(" ", "") for _ in range(n // 20)) + "\n"
        if k == 5:
            return "".join(r.choice(emoji) for _ in range(n // 8)) + "\n"
        if k == 6:
            return hashlib.sha512(str(r.random()).encode()).hexdigest() * (n // 128 + 1) + "\n"
        return "Pneumonoultramicroscopicsilicovolcanoconiosis" * (n // 45 + 1) + "\n"
    c.add("edge-longwords", gen_section("longwords", 140_000, longw), src + ": very long "
          "tokens without spaces (base64, repeats, CamelCase, URLs, CJK/Thai runs, emoji runs)")

    def contr(r):
        parts = []
        for _ in range(r.randint(3, 10)):
            w = ascii_case(r, r.choice(EN_WORDS))
            k = r.randrange(5)
            if k == 0:
                w += r.choice(CONTRACTIONS)
            elif k == 1:
                w = r.choice(ODD_LETTERS) + w + r.choice(CONTRACTIONS)
            elif k == 2:
                w = w.replace("s", "ſ").replace("'", r.choice(["'", "’", "ʼ"]))
            elif k == 3:
                w = r.choice(CONTRACTIONS) + r.choice(CONTRACTIONS)
            parts.append(w)
        return " ".join(parts) + r.choice([".", "!", "?", "", "...", " '", "'\n"]) + "\n"
    c.add("edge-contractions", gen_section("contractions", 100_000, contr), src + ": "
          "apostrophe contractions with odd casing ('S 'LL 'Re, U+2019, U+02BC), long s U+017F, "
          "case-folding oddities (ß ẞ İ ı K ﬁ Ǆ ς)")

    def special(r):
        k = r.randrange(5)
        if k == 0:
            return "".join(r.choice(SPECIAL) for _ in range(r.randint(1, 6))) + "\n"
        if k == 1:
            return (f"{SPECIAL[0]}{SPECIAL[2]}{words(r, 6)}{SPECIAL[3]}<think>\n{words(r, 12)}\n</think>\n\n"
                    f"{r.choice(WORLD)}{SPECIAL[1]}\n")
        if k == 2:
            return " ".join(r.choice(SPECIAL_BROKEN) + words(r, 1) for _ in range(5)) + "\n"
        if k == 3:
            return words(r, 2) + "｜" * r.randint(1, 5) + r.choice(SPECIAL + SPECIAL_BROKEN) + "｜｜" + words(r, 2) + "\n"
        return f'{{"role": "user", "content": "{r.choice(SPECIAL)}{words(r, 3)}"}} `{r.choice(SPECIAL_BROKEN)}`\n'
    c.add("edge-special-tokens", gen_section("special", 80_000, special), src + ": chat-template "
          "marker look-alikes (<｜begin▁of▁sentence｜>, <think>, full-width ｜ and ｜｜, ▁, malformed variants)")

    vs = [ch(x) for x in range(0xFE00, 0xFE10)] + [ch(x) for x in range(0xE0100, 0xE01F0)]
    tags = [ch(x) for x in range(0xE0020, 0xE007F)]

    def zwj(r):
        k = r.randrange(6)
        if k == 0:
            return "\u200d".join(r.choice(emoji) for _ in range(r.randint(2, 6))) + "\n"
        if k == 1:
            return "".join(r.choice(bases_vs) + r.choice(vs) for _ in range(r.randint(1, 20))) + "\n"
        if k == 2:
            return "\U0001f3f4" + "".join(r.choice(tags) for _ in range(r.randint(1, 8))) + "\U000e007f " + words(r, 2) + "\n"
        if k == 3:
            return "".join(r.choice(WORLD) + r.choice(["\u200c", "\u200d", "\u2060", "\u034f"]) for _ in range(3)) + "\n"
        if k == 4:
            return "".join(d + r.choice(["\ufe0f", "\ufe0e", ""]) + r.choice(["\u20e3", ""]) for d in "#*0123456789") + "\n"
        return "".join(r.choice(emoji) + r.choice(["\U0001f3fb", "\U0001f3fc", "\U0001f3fd", "\U0001f3fe", "\U0001f3ff", "\u200d", ""]) for _ in range(8)) + "\n"
    bases_vs = ["a", "0", "#", "\u2764", "\u263a", "\u2708", "\u845b", "\u8fbb", "\u1820", "\U00020000"]
    c.add("edge-zwj-variation", gen_section("zwj", 100_000, zwj), src + ": ZWJ/ZWNJ/WJ/CGJ, "
          "variation selectors VS1-VS256, emoji tag sequences, keycaps, free skin-tone modifiers")

    lj = list(range(0x1100, 0x1113))
    vj = list(range(0x1161, 0x1176))
    tj = list(range(0x11A8, 0x11C3))
    old = u.assigned(0x1113, 0x11FF) + u.assigned(0xA960, 0xA97C) + u.assigned(0xD7B0, 0xD7FB)
    compat = u.assigned(0x3131, 0x318E) + u.assigned(0xFFA0, 0xFFDC)

    def hangul(r):
        k = r.randrange(5)
        if k == 0:
            return "".join(ch(r.choice(lj)) + ch(r.choice(vj)) + (ch(r.choice(tj)) if r.random() < 0.5 else "") for _ in range(r.randint(1, 12))) + "\n"
        if k == 1:
            return "".join(ch(r.choice(old)) for _ in range(r.randint(1, 20))) + "\n"
        if k == 2:
            return "".join(ch(r.choice(compat)) for _ in range(r.randint(1, 20))) + " ㅋㅋㅋㅋ ㅎㅎ\n"
        if k == 3:
            return "".join(ch(0xAC00 + r.randrange(11172)) for _ in range(r.randint(1, 15))) + "\n"
        return "".join(ch(r.choice(vj)) + ch(r.choice(tj)) + ch(r.choice(lj)) for _ in range(5)) + "\n"
    c.add("edge-hangul", gen_section("hangul", 70_000, hangul), src + ": conjoining Hangul jamo "
          "L V T (incl. ill-formed orders), old jamo, compatibility/half-width jamo, random syllables")

    pools = [cjk_b, cjk_rest, math, emoticons, hist]

    def astral(r):
        pool = r.choice(pools)
        k = r.randrange(3)
        if k == 0:
            return "".join(ch(r.choice(pool)) for _ in range(r.randint(1, 40))) + "\n"
        if k == 1:
            return " ".join(ch(r.choice(pool)) + words(r, 1) for _ in range(6)) + "\n"
        return "".join(ch(x) for x in pool[r.randrange(len(pool)): ][:r.randint(10, 120)]) + "\n"
    c.add("edge-astral", gen_section("astral", 120_000, astral), src + ": supplementary-plane "
          "text: CJK Ext B-H, math alphanumerics U+1D400.., emoticons U+1F300.., Linear B, Gothic, "
          "cuneiform, hieroglyphs, musical symbols, Deseret")

    def mixed(r):
        k = r.randrange(6)
        if k == 0:
            return "".join(r.choice(WORLD).split()[0] + r.choice(EN_WORDS) for _ in range(4)) + "\n"
        if k == 1:
            return f"def {r.choice(EN_WORDS)}_{r.randrange(99)}(x: int = {r.randrange(1000)}) -> str:  # {r.choice(WORLD)}\n    return f\"{{x!r:>{r.randrange(20)}}}\"\n"
        if k == 2:
            return f"{r.choice(WORLD)} {r.choice(emoji)} {words(r, 4)}{r.choice(SPECIAL)}{r.choice(SPACES)}{r.choice(CONTRACTIONS)}\n"
        if k == 3:
            return "".join(r.choice([r.choice(EN_WORDS), r.choice(WORLD), r.choice(emoji), r.choice(SPACES), ch(r.choice(DIGITS) + r.randrange(10)), ch(r.choice(math))]) for _ in range(20)) + "\n"
        if k == 4:
            return "  ".join(f"{ascii_case(r, r.choice(EN_WORDS))}{r.choice(CONTRACTIONS)}" for _ in range(5)) + " \u3000\u00a0\t\n"
        return json.dumps({"text": r.choice(WORLD), "n": r.randrange(10**6), "e": r.choice(emoji)}, ensure_ascii=r.random() < 0.5) + "\n"
    c.add("edge-mixed", gen_section("mixed", 150_000, mixed), src + ": mixed scripts inside "
          "words, code with non-ASCII comments, JSON with and without \\u escapes")


# --------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------

def tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=MAN_ENV).stdout
        return out.decode("utf-8", "replace").strip().splitlines()[0]
    except (OSError, IndexError):
        return "?"


def zstd_version() -> str:
    m = re.search(r"v\d+\.\d+\.\d+", tool_version(["zstd", "--version"]))
    return "zstd " + (m.group(0) if m else "?")


GROUPS = [
    ("English prose", ("en-",)),
    ("Source code", ("code-",)),
    ("Translated man pages", ("man-",)),
    ("gettext catalogs", ("gettext-",)),
    ("Unicode data", ("unicode-",)),
    ("Generated edge cases", ("edge-",)),
]


def write_readme(path: Path, index: list[dict], data: bytes, zst: bytes, d: Dpkg) -> None:
    total = len(data)
    L = []
    L.append("# Tokenizer parity corpus\n")
    L.append("`tokenizer_corpus.txt.zst` is a single UTF-8 text (no BOM) used by the tokenizer "
             "parity tests; `tokenizer_corpus.index.json` lists its sections as byte ranges "
             "(`offset`, `length` into the *uncompressed* text, plus `source` and `sha256`).\n")
    L.append("**Generated file — do not edit.** Produced by `tests/oracle/build_corpus.py` "
             "(see its docstring for the exact `apt-get install` line). Tests use the committed "
             "`.zst`; CI never regenerates it and needs none of the packages below.\n")
    L.append("| | |\n|---|---|")
    L.append(f"| uncompressed | {total:,} bytes |")
    L.append(f"| compressed | {len(zst):,} bytes (`zstd -{ZSTD_LEVEL} -T1`, {zstd_version()}) |")
    L.append(f"| sha256 (uncompressed) | `{hashlib.sha256(data).hexdigest()}` |")
    L.append(f"| sha256 (.zst) | `{hashlib.sha256(zst).hexdigest()}` |")
    L.append(f"| seed | `{SEED}` |")
    L.append(f"| renderer | `{tool_version(['man', '--version'])}`, `{tool_version(['groff', '--version'])}`, `col -bx`, MANWIDTH=80, LC_ALL=C.UTF-8 |")
    L.append("")
    L.append("## Notes for test authors\n")
    L.append("* The text contains **NUL and every other C0/C1 control character**, CR, CR LF, "
             "lone CR, U+2028/U+2029, noncharacters (U+FFFE, U+FFFF, U+10FFFF), private-use "
             "code points and U+FEFF in the middle of text (sections `edge-controls`, "
             "`edge-whitespace`). Always pass explicit lengths; never treat it as a C string.")
    L.append("* It is valid UTF-8 (checked with a strict decoder). Source bytes that were not "
             "valid UTF-8 were decoded with `errors=\"replace\"`, so U+FFFD occurs in real-text "
             "sections too.")
    L.append("* Sections are contiguous and cover the whole file; every section ends with `\\n`. "
             "Section boundaries are *not* marked inside the text.")
    L.append("* Real-text sections are cut at line boundaries at a fixed byte budget; "
             "the files drawn are a seeded shuffle of all candidates.")
    L.append("")
    L.append("## Composition\n")
    L.append("| group | bytes | share |\n|---|---:|---:|")
    for g, prefixes in GROUPS:
        n = sum(s["length"] for s in index if s["name"].startswith(prefixes))
        L.append(f"| {g} | {n:,} | {100 * n / total:.1f}% |")
    L.append("")
    L.append("## Sections\n")
    L.append("| name | offset | bytes | source |\n|---|---:|---:|---|")
    for s in index:
        src = s["source"].replace("|", "\\|")
        L.append(f"| `{s['name']}` | {s['offset']:,} | {s['length']:,} | {src} |")
    L.append("")
    L.append("## Licences\n")
    L.append("All real text comes from Debian 12 (bookworm) main packages: free-software "
             "documentation (man pages from the manpages-l10n project and upstream projects, "
             "mostly GPL-2+/GPL-3+, BSD/MIT-style and the Linux man-pages licence), changelogs and "
             "READMEs, source code under DFSG-free licences (PSF, GPL, LGPL, MIT, BSD, Apache-2.0, "
             "Artistic), gettext translations (same licence as the program they belong to), "
             "ISO-code data (iso-codes, LGPL-2.1+) and the Unicode Character Database / emoji data "
             "(Unicode Data Files and Software licence, Unicode-DFS-2016; unicode-data package). The per-package copyright files are in "
             "`/usr/share/doc/<package>/copyright` of the packages listed below. The corpus is "
             "used only as test input. The `edge-*` sections are generated by the script.\n")
    L.append("## Packages and versions used\n")
    L.append("Every package that contributed at least one file, with the version installed "
             "when the corpus was built:\n")
    L.append("```")
    for p in sorted(d.used):
        L.append(f"{p} {d.version.get(p, '?')}")
    L.append("```")
    path.write_text("\n".join(L) + "\n", encoding="utf-8", newline="\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--keep-plain", type=Path, help="also write the uncompressed corpus here")
    ap.add_argument("--check", action="store_true",
                    help="rebuild into a temp dir and compare with the files in --out-dir")
    args = ap.parse_args()

    d = Dpkg()
    missing = [p for p in ("unicode-data", "man-db", "groff-base", "zstd", "manpages-ja",
                           "manpages-zh", "manpages-ru", "manpages-de", "dt-schema",
                           "libjs-jquery-ui") if p not in d.version]
    if missing:
        print("missing packages: " + " ".join(missing) + " (see the docstring)", file=sys.stderr)
        return 2
    u = UData()
    c = Corpus()
    print("building sections (name, bytes):", file=sys.stderr)
    build_english(c, d)
    build_code(c, d)
    build_man_l10n(c, d)
    build_gettext(c, d)
    build_unicode(c, d, u)
    build_edge(c, u)
    data = c.data()
    data.decode("utf-8", errors="strict")
    if not MIN_TOTAL <= len(data) <= MAX_TOTAL:
        print(f"corpus size {len(data):,} outside [{MIN_TOTAL:,}, {MAX_TOTAL:,}]", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "tokenizer_corpus.txt"
        plain.write_bytes(data)
        subprocess.run(["zstd", f"-{ZSTD_LEVEL}", "-T1", "-q", "-f", "--no-progress",
                        str(plain), "-o", str(plain) + ".zst"], check=True)
        zst = Path(str(plain) + ".zst").read_bytes()
    out = args.out_dir
    if args.check:
        old = (out / "tokenizer_corpus.txt.zst").read_bytes()
        if old != zst:
            print("MISMATCH: rebuilt corpus differs from committed tokenizer_corpus.txt.zst "
                  f"(new sha256 {hashlib.sha256(data).hexdigest()})", file=sys.stderr)
            return 1
        print("OK: rebuilt corpus is identical to the committed one", file=sys.stderr)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer_corpus.txt.zst").write_bytes(zst)
    (out / "tokenizer_corpus.index.json").write_text(
        json.dumps(c.index, indent=1, ensure_ascii=False) + "\n", encoding="utf-8", newline="\n")
    write_readme(out / "README.md", c.index, data, zst, d)
    if args.keep_plain:
        args.keep_plain.write_bytes(data)
    print(f"total {len(data):,} bytes, zstd -{ZSTD_LEVEL}: {len(zst):,} bytes, "
          f"sha256 {hashlib.sha256(data).hexdigest()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
