#!/usr/bin/env python3
"""Fidelity of deepinfer's logits on a real GGUF, against transformers in f32 on
the file's own weights dequantized by the gguf package (the reference without
any activation quantization or f16 cache), with llama.cpp (llama-cpp-python,
the model oracle venv's portable build) measured the same way beside it.

For each text (a paragraph, code, a ChatML turn, a definition; up to 64 tokens,
tokenized by `deepinfer tokenize`) every position's logits of both engines are
compared with the reference. Checks, pooled over the texts:
  - deepinfer's mean |diff| <= llama.cpp's x MEAN_SLACK;
  - deepinfer's max |diff| <= llama.cpp's x MAX_SLACK;
  - deepinfer's mean KL divergence of its next-token distribution from the
    reference's, KL(reference || engine) a position (llama-perplexity's
    --kl-divergence measure), <= llama.cpp's x KLD_SLACK: it weighs the tokens
    that carry the probability, where |diff| weighs every logit alike;
  - no argmax differing from the reference where the reference's top two are
    further apart than CLEAR_GAP (closer ones go either way with 8-bit
    activations, for llama.cpp too).
Prints the numbers and ok:/FAIL: lines; exits 1 on a failed check.

--kv-cache-type q8_0 or q4_0 runs both engines with that KV cache (llama.cpp:
type_k and type_v, with its flash attention, which a quantized V needs; both
rotate the cached groups of 64 by a Hadamard matrix first), over six more
texts (the cache's rounding varies from text to text), held to the same
checks against the same f32 reference: deepinfer's rounding of the cache must
cost no more than llama.cpp's. With Q4_0 both engines miss clear argmaxes
(llama.cpp about 18 of 398 positions with this model): the misses are
printed, and the mean, max and KL-divergence checks decide.

--fixture FIXTURE.json takes the text and the reference from a GGUF fixture
instead (make_model_fixtures.py's: its prompt and greedy tokens, and its
dequant_f32_logits_file, transformers in f32 on the file's weights
dequantized): the DeepSeek-V4 GGUFs, whose reference model is not a Llama.
Their compressed attention's choices (the indexer's top-k, the experts) are
discrete, so a cache's rounding moves a few rows a long way in either
engine: the pooled mean, max and KL divergence decide, and deepinfer may miss no more clear
argmaxes than llama.cpp (Q4_0's are printed only, as above).

    check_fidelity.py --cli build/release/examples/deepinfer [--kv-cache-type T] MODEL.gguf
    check_fidelity.py --cli ... [--kv-cache-type T] --fixture gguf-dsv4/NAME.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import dequantized_reference  # noqa: E402

MEAN_SLACK = 1.05
MAX_SLACK = 1.25
KLD_SLACK = 1.15
CLEAR_GAP = 0.25
TEXTS = [
    "The quick brown fox jumps over the lazy dog. In the beginning of the twentieth century, "
    "the city grew rapidly as new railways connected it to the coast, and merchants from many "
    "countries settled there",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nfor i in range(10):\n    print(i, fibonacci(i))\n",
    "<|im_start|>user\nWhat is the capital of France, and why is it famous? Give three "
    "reasons.<|im_end|>\n<|im_start|>assistant\nThe capital of France is Paris. It is famous for",
    "Photosynthesis is the process by which green plants and some other organisms use sunlight "
    "to synthesize foods from carbon dioxide and water. It generally involves the green pigment "
    "chlorophyll and generates oxygen as a byproduct.",
]


# more texts for the quantized caches
EXTRA_TEXTS = [
    "Once upon a time there was a little girl who lived in a village near the forest. Whenever "
    "she went out, the little girl wore a red riding cloak, so everyone in the village called her",
    "import numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()\n"
    "\nprint(softmax(np.array([1.0, 2.0, 3.0])))\n",
    "<|im_start|>user\nExplain why the sky is blue in two sentences.<|im_end|>\n"
    "<|im_start|>assistant\nSunlight is scattered by",
    "The mitochondrion is an organelle found in most eukaryotic cells. It generates most of the "
    "chemical energy needed to power the cell's biochemical reactions, stored in",
    "In 1969, the Apollo 11 mission landed the first humans on the Moon. Neil Armstrong and Buzz "
    "Aldrin spent about two and a quarter hours together outside the spacecraft",
    "SELECT name, COUNT(*) AS orders FROM customers JOIN orders ON customers.id = "
    "orders.customer_id GROUP BY name ORDER BY orders DESC LIMIT 10;",
]


def field(reader, key):
    import gguf
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    return v.tolist()[0]


def reference_model(reader):
    """An f32 LlamaForCausalLM of the GGUF's shape (weights set later)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    a = field(reader, "general.architecture")
    if a != "llama":
        raise SystemExit(f"check_fidelity: {a} files are not handled (llama only)")
    names = {t.name for t in reader.tensors}
    vocab = next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]
    config = LlamaConfig(
        vocab_size=int(vocab), hidden_size=field(reader, "llama.embedding_length"),
        intermediate_size=field(reader, "llama.feed_forward_length"),
        num_hidden_layers=field(reader, "llama.block_count"),
        num_attention_heads=field(reader, "llama.attention.head_count"),
        num_key_value_heads=field(reader, "llama.attention.head_count_kv"),
        rms_norm_eps=field(reader, "llama.attention.layer_norm_rms_epsilon"),
        rope_theta=field(reader, "llama.rope.freq_base"),
        max_position_embeddings=field(reader, "llama.context_length"),
        tie_word_embeddings="output.weight" not in names, torch_dtype=torch.float32)
    return LlamaForCausalLM(config).to(torch.float32), config


def tokenize(cli, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        out = subprocess.run([cli, "tokenize", "--tokenizer", model, "--special", f.name],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out)[:64]


# llama.cpp's ggml_type of each --kv-cache-type (ggml.h)
GGML_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}


def deepinfer_logits(cli, model, ids, vocab, kv_type):
    with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
        path = f.name
    try:
        subprocess.run([cli, "logits", "--model", model, "--tokens", ",".join(map(str, ids)),
                        "--out", path, "--threads", "2", "--kv-cache-type", kv_type], check=True)
        return np.fromfile(path, dtype=np.float32).reshape(len(ids), vocab)
    finally:
        os.unlink(path)


def kl_divergence(ref, logits):
    """KL(softmax(ref) || softmax(logits)) of each row, in nats (float64)."""
    def log_softmax(x):
        x = x.astype(np.float64)
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    lr = log_softmax(ref)
    return (np.exp(lr) * (lr - log_softmax(logits))).sum(axis=1)


def cases(a, cli, quantized):
    """(ids, f32 reference logits) of each text: the fixture's one, or the
    texts tokenized and run through the reference."""
    import gguf
    if a.fixture:
        fx = json.load(open(a.fixture))
        ids = fx["prompt"] + fx["greedy"]
        path = os.path.join(os.path.dirname(a.fixture), fx["dequant_f32_logits_file"])
        yield ids, np.fromfile(path, dtype="<f4").reshape(len(ids), -1)
        return
    reader = gguf.GGUFReader(a.model)
    model, config = reference_model(reader)
    for text in TEXTS + EXTRA_TEXTS if quantized else TEXTS:
        ids = tokenize(cli, a.model, text)
        yield ids, dequantized_reference(model, reader, "llama", config, ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--kv-cache-type", default="f16", choices=sorted(GGML_TYPES))
    ap.add_argument("--fixture", help="a GGUF fixture's JSON: its file, tokens and reference")
    ap.add_argument("model", nargs="?")
    a = ap.parse_args()
    if a.fixture:
        a.model = os.path.join(os.path.dirname(a.fixture), json.load(open(a.fixture))["file"])
    elif not a.model:
        ap.error("MODEL.gguf or --fixture is required")
    import llama_cpp
    quantized = a.kv_cache_type != "f16"
    n_ctx = 256 if a.fixture else 128
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                          logits_all=True, n_threads=2, flash_attn=quantized, verbose=False,
                          type_k=GGML_TYPES[a.kv_cache_type], type_v=GGML_TYPES[a.kv_cache_type])
    print(f"KV cache: {a.kv_cache_type} in both engines")
    # sum|d|, max|d|, misses, sum of the positions' KL divergences
    sums = {"deepinfer": [0.0, 0.0, 0, 0.0], "llama.cpp": [0.0, 0.0, 0, 0.0]}
    n_values = n_positions = 0
    for i, (ids, ref) in enumerate(cases(a, a.cli, quantized)):
        llm.reset()
        llm.eval(ids)
        got = {"deepinfer": deepinfer_logits(a.cli, a.model, ids, ref.shape[1], a.kv_cache_type),
               "llama.cpp": np.array(llm.scores[:len(ids)], dtype=np.float32)}
        top2 = np.sort(ref, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > CLEAR_GAP
        line = []
        for name, lg in got.items():
            d = np.abs(lg - ref)
            miss = (lg.argmax(1) != ref.argmax(1)) & clear
            sums[name][0] += float(d.sum())
            sums[name][1] = max(sums[name][1], float(d.max()))
            sums[name][2] += int(miss.sum())
            kld = kl_divergence(ref, lg)
            sums[name][3] += float(kld.sum())
            line.append(f"{name} mean|diff| {d.mean():.4f} max {d.max():.3f} "
                        f"KLD {kld.mean():.5f} clear argmax misses {int(miss.sum())}")
        n_values += ref.size
        n_positions += ref.shape[0]
        print(f"text {i} ({len(ids)} tokens): " + "; ".join(line))
    di, ll = sums["deepinfer"], sums["llama.cpp"]
    di_mean, ll_mean = di[0] / n_values, ll[0] / n_values
    di_kld, ll_kld = di[3] / n_positions, ll[3] / n_positions
    print(f"pooled: deepinfer mean {di_mean:.4f} max {di[1]:.3f} KLD {di_kld:.5f}; "
          f"llama.cpp mean {ll_mean:.4f} max {ll[1]:.3f} KLD {ll_kld:.5f}")
    checks = [
        (di_mean <= ll_mean * MEAN_SLACK,
         f"mean |diff| from the f32 reference {di_mean:.4f} <= llama.cpp's {ll_mean:.4f} x {MEAN_SLACK}"),
        (di[1] <= ll[1] * MAX_SLACK,
         f"max |diff| {di[1]:.3f} <= llama.cpp's {ll[1]:.3f} x {MAX_SLACK}"),
        (di_kld <= ll_kld * KLD_SLACK,
         f"mean KL divergence from the reference {di_kld:.5f} <= llama.cpp's {ll_kld:.5f} x "
         f"{KLD_SLACK}"),
    ]
    if a.kv_cache_type != "q4_0" and not a.fixture:
        checks.append((di[2] == 0, f"no argmax miss where the reference's top two differ by > "
                                   f"{CLEAR_GAP} (deepinfer {di[2]}, llama.cpp {ll[2]})"))
    elif a.kv_cache_type != "q4_0":
        checks.append((di[2] <= ll[2], f"argmax misses where the reference's top two differ by > "
                                       f"{CLEAR_GAP}: deepinfer {di[2]} <= llama.cpp's {ll[2]}"))
    else:
        print(f"argmax misses where the reference's top two differ by > {CLEAR_GAP}: "
              f"deepinfer {di[2]}, llama.cpp {ll[2]} (not checked: see the docstring)")
    bad = 0
    for ok, what in checks:
        print(("ok: " if ok else "FAIL: ") + what)
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
