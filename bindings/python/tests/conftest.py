"""Shared fixtures: the library, the committed model fixtures, the real assets.

Environment:
  DEEPINFER_LIBRARY    libdeepinfer.so to test (else the package's bundled copy, else
                       the loader's search path)
  DEEPINFER_EXPECT_BUNDLED  1: test_bundled.py fails (instead of skipping) when the
                       installed package holds no library of its own (scripts/test.sh)
  DEEPINFER_CLI        the `deepinfer` command of the same build (the greedy-token
                       oracle); else found next to the library (../examples/deepinfer)
  DI_ASSET_DIR         the asset folder (scripts/fetch_assets.py --asset-dir); else
                       $DI_CACHE/assets or ~/.cache/deepinfer/assets. Tests that need
                       an asset skip when it is absent.
"""

import json
import os
import pathlib
import random
import struct

import pytest

import deepinfer

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "model" / "qwen2-tied-f16"


def asset_dir() -> pathlib.Path:
    if os.environ.get("DI_ASSET_DIR"):
        return pathlib.Path(os.environ["DI_ASSET_DIR"])
    if os.environ.get("DI_CACHE"):
        return pathlib.Path(os.environ["DI_CACHE"]) / "assets"
    xdg = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(xdg) / "deepinfer" / "assets"


def asset(rel: str) -> pathlib.Path:
    p = asset_dir() / rel
    if not p.is_file():
        pytest.skip(f"asset {rel} not fetched (scripts/fetch_assets.py)")
    return p


@pytest.fixture(scope="session")
def tiny_ref():
    """The transformers oracle of the tiny Qwen2 checkpoint: prompt and 32 greedy ids."""
    return json.loads((TINY / "reference.json").read_text())


@pytest.fixture(scope="session")
def tiny():
    """An engine on the tiny Qwen2 checkpoint (vocabulary 512, no tokenizer)."""
    with deepinfer.Engine(TINY, n_threads=2, max_running=8, n_batch=64) as e:
        yield e


SMOL = "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smol_path():
    return asset(SMOL)


@pytest.fixture(scope="session")
def smol(smol_path):
    """An engine on SmolLM2-135M-Instruct Q4_1 (skipped when not fetched)."""
    with deepinfer.Engine(smol_path, n_threads=2, max_running=8) as e:
        yield e


@pytest.fixture(scope="session")
def smol_fixture():
    """llama.cpp's prompts, greedy ids and greedy text for SmolLM2 (committed)."""
    return json.loads((FIXTURES / "model" / "gguf" / "smollm2-135m-instruct.json").read_text())


@pytest.fixture(scope="session")
def cli():
    """The `deepinfer` command of the build under test (skipped when absent)."""
    env = os.environ.get("DEEPINFER_CLI")
    cands = [pathlib.Path(env)] if env else []
    lib = os.environ.get("DEEPINFER_LIBRARY")
    if lib:
        cands.append(pathlib.Path(lib).resolve().parent.parent / "examples" / "deepinfer")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.skip("the deepinfer command was not found (set DEEPINFER_CLI)")


def _f16(rng, n, scale):
    return struct.pack(f"<{n}e", *[(rng.random() - 0.5) * scale for _ in range(n)])


def write_big_vocab_model(d: pathlib.Path, seed: int = 12345) -> None:
    """A one-layer Qwen2 with the DeepSeek-R1-distill vocabulary size (152064) and
    random weights, as a Hugging Face folder: tiny, but every token id the R1
    tokenizer makes is valid in it (as tests/unit/test_engine.c builds one)."""
    vocab, e, q, kv, f = 152064, 32, 32, 16, 64
    shapes = [
        ("model.embed_tokens.weight", [vocab, e]),
        ("model.norm.weight", [e]),
        ("model.layers.0.input_layernorm.weight", [e]),
        ("model.layers.0.post_attention_layernorm.weight", [e]),
        ("model.layers.0.self_attn.q_proj.weight", [q, e]),
        ("model.layers.0.self_attn.k_proj.weight", [kv, e]),
        ("model.layers.0.self_attn.v_proj.weight", [kv, e]),
        ("model.layers.0.self_attn.o_proj.weight", [e, q]),
        ("model.layers.0.mlp.gate_proj.weight", [f, e]),
        ("model.layers.0.mlp.up_proj.weight", [f, e]),
        ("model.layers.0.mlp.down_proj.weight", [e, f]),
    ]
    rng = random.Random(seed)
    header, blobs, off = {}, [], 0
    for name, shape in shapes:
        n = 1
        for s in shape:
            n *= s
        blob = struct.pack(f"<{n}e", *([1.0] * n)) if len(shape) == 1 else _f16(rng, n, 0.8)
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "model.safetensors", "wb") as fp:
        fp.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            fp.write(b)
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "vocab_size": vocab,
                "hidden_size": e,
                "intermediate_size": f,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "max_position_embeddings": 512,
                "rms_norm_eps": 1e-6,
                "rope_theta": 10000.0,
                "tie_word_embeddings": True,
                "hidden_act": "silu",
                "bos_token_id": 151646,
                "eos_token_id": 151643,
            }
        )
    )


R1_TOKENIZER = "r1-distill-qwen-7b/model_part_0000.gguf"


@pytest.fixture(scope="session")
def r1(tmp_path_factory):
    """An engine with the R1 encoding: a tiny random Qwen2 with the R1 vocabulary
    size and the real R1 tokenizer (skipped when the R1 asset is not fetched)."""
    tok = asset(R1_TOKENIZER)
    d = tmp_path_factory.mktemp("r1") / "model"
    write_big_vocab_model(d)
    with deepinfer.Engine(d, tokenizer_path=tok, n_threads=2) as e:
        yield e
