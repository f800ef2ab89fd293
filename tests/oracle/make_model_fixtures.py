#!/usr/bin/env python3
"""Make the model parity fixtures (tests/fixtures/model/README.md says the format).

    make_model_fixtures.py tiny [NAME ...]   tiny random checkpoints (transformers)
    make_model_fixtures.py gguf ASSET_DIR [NAME ...]   real GGUFs (llama-cpp-python)

tiny: Qwen2 and Llama checkpoints built with transformers from fixed seeds, saved
as safetensors under tests/fixtures/model/<name>/ with reference.json (prompt,
argmax and greedy tokens) and logits.f32 (every prompt position's logits).
Deterministic: the same packages (tests/oracle/requirements-model.txt) give the
same bytes.

gguf: the real GGUF models fetched by scripts/fetch_assets.py, run through
llama.cpp (llama-cpp-python): per prompt, greedy tokens and each position's top-32
logits, into tests/fixtures/model/gguf/<name>.json.

Run with the model oracle venv: scripts/oracle-venv.sh --model.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
OUT = ROOT / "tests" / "fixtures" / "model"

N_PROMPT = 16
N_GREEDY = 32

# name: (architecture, config overrides, storage dtype, sharded)
TINY = {
    "qwen2-tied-bf16": ("qwen2", dict(tie_word_embeddings=True), "bfloat16", False),
    "qwen2-untied-f32-sharded": ("qwen2", dict(tie_word_embeddings=False), "float32", True),
    "qwen2-tied-f16": ("qwen2", dict(tie_word_embeddings=True, num_key_value_heads=1), "float16",
                       False),
    "llama-gqa-f16": ("llama", dict(), "float16", False),
    "llama-llama3-bf16": ("llama", dict(rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=64),
        max_position_embeddings=512), "bfloat16", False),
    "llama-linear-f32": ("llama", dict(rope_parameters=dict(
        rope_type="linear", rope_theta=10000.0, factor=2.0)), "float32", False),
    "llama-yarn-f32": ("llama", dict(rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0,
        original_max_position_embeddings=32), max_position_embeddings=128), "float32", False),
}

BASE = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, initializer_range=0.1)


def make_tiny(name):
    import numpy as np
    import safetensors
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    arch, overrides, dtype, sharded = TINY[name]
    seed = sum(name.encode()) * 7919
    torch.manual_seed(seed)
    cfg_args = dict(BASE, **overrides)
    if arch == "qwen2":
        cfg_args.setdefault("rope_parameters", dict(rope_type="default", rope_theta=1000000.0))
        config = Qwen2Config(**cfg_args)
        model = Qwen2ForCausalLM(config)
    else:
        cfg_args.setdefault("rope_parameters", dict(rope_type="default", rope_theta=10000.0))
        config = LlamaConfig(**cfg_args)
        model = LlamaForCausalLM(config)
    config._attn_implementation = "eager"
    model.eval()
    # Norm weights and biases start at 1 and 0: perturb them so the test sees them.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
        # Round to the storage dtype, then compute in float32 from those values.
        torch_dtype = getattr(torch, dtype)
        for p in model.parameters():
            p.copy_(p.to(torch_dtype).to(torch.float32))
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors"):
        old.unlink()
    model.to(torch_dtype).save_pretrained(
        out, max_shard_size="100KB" if sharded else "50GB", safe_serialization=True)
    model.to(torch.float32)
    for junk in ("generation_config.json",):
        (out / junk).unlink(missing_ok=True)

    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(3, config.vocab_size, (N_PROMPT,), generator=g).tolist()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits = model(ids).logits[0].to(torch.float32).numpy()
        gen = model.generate(ids, do_sample=False, max_new_tokens=N_GREEDY,
                             min_new_tokens=N_GREEDY, pad_token_id=0, eos_token_id=None)
    greedy = gen[0, N_PROMPT:].tolist()
    logits.astype("<f4").tofile(out / "logits.f32")
    files = sorted(p.name for p in out.glob("*.safetensors"))
    ref = {
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": type(model).__name__,
        "storage_dtype": dtype,
        "compute_dtype": "float32",
        "seed": seed,
        "files": files,
        "config": json.loads((out / "config.json").read_text()),
        "prompt": prompt,
        "logits_file": "logits.f32",
        "logits_shape": [N_PROMPT, config.vocab_size],
        "argmax": np.argmax(logits, axis=1).tolist(),
        "greedy": greedy,
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__,
                   "attn_implementation": "eager"},
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {len(files)} safetensors file(s), {size} bytes, greedy {greedy[:8]}...")


# GGUF models (scripts/fetch_assets.py names -> file in the asset dir) and prompts.
GGUF = {
    "smollm2-135m-instruct": "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
    "r1-distill-qwen-7b": "r1-distill-qwen-7b/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf",
}
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
]
TOP_K = 32
# llama.cpp settings that change the numbers, fixed and recorded.
LLAMA_SETTINGS = dict(n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, n_threads_batch=2,
                      logits_all=True, flash_attn=False, type_k=1, type_v=1, seed=0,
                      n_gpu_layers=0, use_mmap=True, verbose=False)


def make_gguf(asset_dir, name):
    import hashlib
    import llama_cpp
    import numpy as np

    path = pathlib.Path(asset_dir) / GGUF[name]
    llm = llama_cpp.Llama(model_path=str(path), **LLAMA_SETTINGS)
    cases = []
    for text in PROMPTS:
        tokens = llm.tokenize(text.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(tokens)
        scores = np.array(llm.scores[:llm.n_tokens], dtype=np.float32)
        positions = []
        for row in scores:
            top = np.argsort(-row, kind="stable")[:TOP_K]
            positions.append({"argmax": int(np.argmax(row)), "top_ids": top.tolist(),
                              "top_logits": [float(row[i]) for i in top]})
        # Greedy: argmax of the last logits, fed back one token at a time.
        greedy = []
        nxt = int(np.argmax(scores[-1]))
        for _ in range(N_GREEDY):
            greedy.append(nxt)
            llm.eval([nxt])
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        cases.append({"text": text, "prompt": tokens, "positions": positions, "greedy": greedy,
                      "greedy_text": llm.detokenize(greedy).decode("utf-8", "replace")})
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    ref = {
        "format": "deepinfer-gguf-fixture-1",
        "name": name,
        "file": GGUF[name],
        "file_sha256": h.hexdigest(),
        "n_vocab": llm.n_vocab(),
        "top_k": TOP_K,
        "oracle": {"llama_cpp_python": llama_cpp.__version__,
                   "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(),
                   "settings": {k: v for k, v in LLAMA_SETTINGS.items() if k != "verbose"},
                   "kv_cache_type": "f16 (type_k = type_v = 1, GGML_TYPE_F16)",
                   "greedy": "argmax of llama.cpp's logits, one token per eval"},
        "cases": cases,
    }
    out = OUT / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"{name}: {len(cases)} prompts, greedy[0] {cases[0]['greedy_text']!r}")


def main(argv):
    if argv[:1] == ["tiny"]:
        for name in argv[1:] or list(TINY):
            make_tiny(name)
    elif argv[:1] == ["gguf"] and len(argv) >= 2:
        for name in argv[2:] or list(GGUF):
            make_gguf(argv[1], name)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
