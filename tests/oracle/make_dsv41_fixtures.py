#!/usr/bin/env python3
"""Make the DeepSeek-V4.1 parity fixtures (tests/fixtures/model/README.md says the format).

    make_dsv41_fixtures.py [NAME ...]           tiny V4.1 checkpoints into tests/fixtures/model/
    make_dsv41_fixtures.py --check [NAME ...]   regenerate into a scratch folder and compare

Each checkpoint is random weights from a fixed seed in DeepSeek's release layout
(layers.N.attn.wq_a, ffn.experts.E.w1, ...; a deepseek_v41 config.json with its
text_config), with reference.json (prompt, argmax, greedy), logits.f32 (every prompt
position) and sequence_logits.f32 (prompt + greedy in one pass) computed by
dsv41_reference.py on the stored weights (check_dsv41_ops.py holds that reference to
DeepSeek's own kernel references). A seed is kept only when no near-tie decides a
discrete choice: the routers' and the indexers' gaps at their top-k boundaries are
at least MIN_MARGIN (reference.json gives them), so any implementation's rounding
picks the same experts and entries.

Run with the model oracle venv (scripts/oracle-venv.sh --model).
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv41_reference as ref  # noqa: E402
import make_dsv4_fixtures as v4  # noqa: E402
import make_model_fixtures as mmf  # noqa: E402

N_PROMPT = 40  # past the window (6) and enough ratio-2 entries for top-3 to choose
N_GREEDY = 24
# name -> (prompt, greedy) where a fixture needs other lengths: the candidate fixture's
# 64 blocks of 8 entries restrict a row from its 513th visible entry on
LENGTHS = {"dsv41-candidate-f32": (560, 16)}
MIN_MARGIN = 1e-4  # float32 implementations differ by about 1e-6 here

BASE = dict(hidden_size=64, vocab_size=256, num_attention_heads=4, head_dim=96,
            qk_rope_head_dim=64, q_lora_rank=48, o_lora_rank=16, o_groups=2, sliding_window=6,
            rope_theta=10000.0, compress_rope_theta=160000.0, rms_norm_eps=1e-6,
            swiglu_limit=2.0, tie_word_embeddings=False, num_key_value_heads=1, index_topk=3,
            index_n_heads=8, index_head_dim=64, hc_mult=4, hc_eps=1e-6, hc_sinkhorn_iters=20,
            hidden_act="silu", n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
            routed_scaling_factor=1.5, scoring_func="sqrtsoftplus", norm_topk_prob=True,
            topk_method="noaux_tc", moe_intermediate_size=32, attention_bias=False,
            attention_dropout=0.0, max_position_embeddings=256, num_nextn_predict_layers=0)

YARN = {"factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32, "beta_slow": 1}

# name -> (text_config overrides, storage, seed salt)
DSV41 = {
    # every layer kind: sliding window only, ratio 2, ratio 1; layer 2 shares layer
    # 1's compressed KV, indexer keys and top-k; layer 3 is the first YOCO consumer
    # and layer 4 a KV source projecting from its normed hidden; YaRN; f32
    "dsv41-f32": (dict(compress_ratios=[0, 2, 2, 1, 1], kv_source_layer_ids=[1, 3, 4],
                       index_source_layer_ids=[1, 3, 4], rope_scaling=YARN), "float32", 1),
    # DeepSeek-V4.1-Flash's storage: fp8-e4m3 projections with an E8M0 scale per
    # 32x32 block, the routed experts in MXFP4 (an E8M0 scale per 32 values), the
    # compressor, indexer keys and weights, router and norms bf16. Sharing split
    # three ways (the chain index-topk within index-K within KV): layer 2 has its
    # own indexer but layer 1's keys, layer 3 its own keys from layer 1's KV, layer 5
    # layer 4's KV and keys with its own top-k; YOCO from layer 4, with layer 6 a
    # KV source after it; Engram before layers 1 and 3 (2- to 4-grams), its tables
    # fp8 with an E8M0 scale per 32 values of a row and its projection fp8 in 32x32
    # blocks, as the release stores them (fp8_embed, fp8_proj)
    "dsv41-fp8-mxfp4-release": (dict(compress_ratios=[0, 2, 2, 2, 1, 1, 1],
                                     kv_source_layer_ids=[1, 4, 6],
                                     index_k_source_layer_ids=[1, 3, 4, 6],
                                     index_source_layer_ids=[1, 2, 3, 4, 5, 6],
                                     engram_layer_ids=[1, 3], engram_max_ngram_size=4,
                                     engram_vocab_size=37, engram_n_heads=2, engram_head_dim=32,
                                     engram_pad_token_id=2),
                                "fp8-mxfp4", 2),
    # Engram before layer 0's attention (the streams straight from the embedding) and
    # layer 2's (a KV-sharing layer); 2- and 3-grams, two heads each; the tokenizer
    # (tokenizer.json: DeepSeek-V4's first 320 tokens and the merges among them) gives
    # the compressed vocabulary; f32
    "dsv41-engram-f32": (dict(compress_ratios=[0, 2, 2, 1, 1], kv_source_layer_ids=[1, 3, 4],
                              index_source_layer_ids=[1, 3, 4], vocab_size=320,
                              engram_layer_ids=[0, 2], engram_max_ngram_size=3,
                              engram_vocab_size=61, engram_n_heads=2, engram_head_dim=16,
                              engram_pad_token_id=2), "float32", 3),
    # the candidate-block top-k: layer 2 (ratio 1, the first YOCO consumer) scores
    # blocks of 8 of its entries by their largest indexer logit and keeps 64 (the last
    # visible block always); layer 3 takes layer 2's KV, keys and top-k; layer 4, a KV
    # and index source of its own, takes its top-3 among the entries of those blocks.
    # DeepInfer's limits hold: 64 x 8 = 512 candidate entries (its sparse indexer's bf16
    # logits rows align to 1024 bytes), index heads of 128 (8 of them). bf16 storage
    # and 4 experts keep the checkpoint small; vocabulary 128 the logits files
    "dsv41-candidate-f32": (dict(compress_ratios=[0, 2, 1, 1, 1], kv_source_layer_ids=[1, 2, 4],
                                 index_source_layer_ids=[1, 2, 4], candidate_source_layer_id=2,
                                 candidate_topk_blocks=64, candidate_block_size=8,
                                 index_head_dim=128, n_routed_experts=4, vocab_size=128),
                            "bfloat16", 8),  # (salt 8: its first seed clears the margins)
}

# Projections DeepSeek-V4.1 keeps bf16 (mla_attn.py: use_fp8_gemm=False; moe.py gate)
BF16_PROJECTIONS = (".compressor.", ".weights_proj.", ".indexer.wk.", ".gate.weight",
                    ".engram.q_weight", ".engram.k_weight")


def weights(cfg, text, g, torch):
    """Random float32 weights of every tensor the text model reads, by release name."""
    h, H, D, ql, ol = cfg.hidden, cfg.n_head, cfg.head_dim, cfg.q_lora_rank, cfg.o_lora_rank
    G, m, E, FE, V = cfg.o_groups, cfg.hc_mult, cfg.n_experts, text["moe_intermediate_size"], \
        cfg.vocab
    IH, ID = cfg.index_heads, cfg.index_dim
    t = {}

    def rnd(name, *shape, s=0.1):
        t[name] = torch.randn(*shape, generator=g) * s

    def norm(name, n):
        t[name] = 1 + 0.1 * torch.randn(n, generator=g)
    rnd("embed.weight", V, h, s=1.0)
    rnd("head.weight", V, h)
    norm("norm.weight", h)
    for L, ratio in enumerate(cfg.ratios):
        p = f"layers.{L}."
        for kind in ("attn", "ffn"):
            rnd(p + f"hc_{kind}_fn", (2 + m) * m, m * h, s=0.02)
            rnd(p + f"hc_{kind}_base", (2 + m) * m, s=0.5)
            t[p + f"hc_{kind}_scale"] = 0.5 + torch.rand(3, generator=g)
            norm(p + f"{kind}_norm.weight", h)
        a = p + "attn."
        rnd(a + "wq_a.weight", ql, h)
        norm(a + "q_norm.weight", ql)
        rnd(a + "wq_b.weight", H * D, ql)
        rnd(a + "wkv.weight", D, h)
        norm(a + "kv_norm.weight", D)
        rnd(a + "wo_a.weight", G * ol, H // G * D)
        rnd(a + "wo_b.weight", h, G * ol)
        rnd(a + "attn_sink", H, s=1.0)
        if ratio and cfg.kv_map[L] == L:
            rnd(a + "compressor.wkv.weight", D, h)
            if ratio == 2:
                rnd(a + "compressor.wgate.weight", D, h, s=0.5)
            norm(a + "compressor.norm.weight", D)
        if ratio and cfg.index_map[L] == L:
            rnd(a + "indexer.wq_b.weight", IH * ID, ql)
            rnd(a + "indexer.weights_proj.weight", IH, h)
            if cfg.index_k_map[L] == L:
                rnd(a + "indexer.wk.weight", ID, D)
                norm(a + "indexer.k_norm.weight", ID)
        f = p + "ffn."
        rnd(f + "gate.weight", E, h, s=0.3)
        rnd(f + "gate.bias", E, s=0.05)
        for e in range(E):
            rnd(f + f"experts.{e}.w1.weight", FE, h)
            rnd(f + f"experts.{e}.w3.weight", FE, h)
            rnd(f + f"experts.{e}.w2.weight", h, FE)
        for w in ("w1", "w3"):
            rnd(f + f"shared_experts.{w}.weight", FE, h)
        rnd(f + "shared_experts.w2.weight", h, FE)
        if L in cfg.engram_layers:
            e, rows = p + "engram.", engram_rows(cfg)[cfg.engram_layers.index(L)]
            norm(e + "q_weight", m * h)
            t[e + "q_weight"] = t[e + "q_weight"].reshape(m, h)
            norm(e + "k_weight", m * h)
            t[e + "k_weight"] = t[e + "k_weight"].reshape(m, h)
            # (DeepInfer pads the stacked tables to a multiple of 256 rows)
            rnd(e + "embed.weight", -(-rows // 256) * 256, cfg.engram_head_dim, s=1.0)
            rnd(e + "wkv.weight", (m + 1) * h, cfg.engram_tables * cfg.engram_head_dim)
    return t


def engram_rows(cfg):
    """Each Engram layer's stacked table rows, by DeepInfer's EngramLayout."""
    import make_engram_fixtures as mef
    n = cfg.engram_max_ngram - 1
    layout = mef.deepinfer_engram()[0]["EngramLayout"].from_cfg(mef.AttrDict(
        engram_max_ngram_size=cfg.engram_max_ngram, engram_layer_ids=cfg.engram_layers,
        vocab_size=[cfg.engram_table_vocab] * n, n_head_per_ngram=[cfg.engram_heads] * n,
        n_embed_per_ngram=[cfg.engram_heads * cfg.engram_head_dim] * n))
    return [sum(sum(h) for h in layout.layer_vocab_sizes[L]) for L in cfg.engram_layers]


def tiny_tokenizer(vocab, out):
    """DeepSeek-V4's tokenizer.json cut to its first vocab IDs (the merges among them)
    into out/tokenizer.json; returns the size of its compressed vocabulary (DeepInfer's
    CompressedVocabulary)."""
    import make_engram_fixtures as mef
    t = json.loads((mef.asset_dir() / "deepseek-v4" / "tokenizer.json").read_text())
    keep = {k: i for k, i in t["model"]["vocab"].items() if i < vocab}
    t["model"]["vocab"] = keep
    t["model"]["merges"] = [m for m in t["model"]["merges"]
                            if all(part in keep for part in m.split(" ")) and m.replace(" ", "") in keep]
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < vocab]
    (out / "tokenizer.json").write_text(json.dumps(t, ensure_ascii=False, indent=1) + "\n")
    return len(mef.deepinfer_engram()[0]["CompressedVocabulary"](str(out / "tokenizer.json")))


def fp8_block32(w, torch):
    """float32 -> (e4m3 codes, F8_E8M0 scale per 32x32 block, dequantized): each
    block's scale the smallest power of two putting its largest magnitude within
    e4m3's 448 (DeepSeek's ue8m0 scale_fmt)."""
    import math
    rows, cols = w.shape
    br, bc = -(-rows // 32), -(-cols // 32)
    scale = torch.zeros(br, bc)
    for i in range(br):
        for j in range(bc):
            amax = float(w[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32].abs().max().clamp(min=1e-12))
            scale[i, j] = 2.0 ** math.ceil(math.log2(amax / 448.0))
    full = scale.repeat_interleave(32, 0)[:rows].repeat_interleave(32, 1)[:, :cols]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scale.to(torch.float8_e8m0fnu), q.float() * full


def fp8_row32(w, torch):
    """float32 -> (e4m3 codes, F8_E8M0 scale per 32 values of a row, dequantized): an
    Engram table as DeepInfer's _load_engram_tables reads it."""
    import math
    rows, cols = w.shape
    scale = torch.zeros(rows, cols // 32)
    for i in range(rows):
        for j in range(cols // 32):
            amax = float(w[i, j * 32:(j + 1) * 32].abs().max().clamp(min=1e-12))
            scale[i, j] = 2.0 ** math.ceil(math.log2(amax / 448.0))
    full = scale.repeat_interleave(32, 1)
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scale.to(torch.float8_e8m0fnu), q.float() * full


def store(t, storage, torch):
    """The tensors as the checkpoint stores them, and the float32 values they hold."""
    if storage == "float32":
        return dict(t), dict(t)
    state, deq = {}, {}
    for k, v in t.items():
        if storage == "fp8-mxfp4" and k.endswith(".engram.embed.weight"):
            q, sc, dq = fp8_row32(v, torch)
            state[k], state[k[:-len("weight")] + "scale"], deq[k] = q, sc, dq
        elif storage == "fp8-mxfp4" and ".ffn.experts." in k:
            codes, e8, dq = v4.mxfp4_quantize(v)
            state[k], state[k[:-len("weight")] + "scale"], deq[k] = codes, e8, dq
        elif (storage == "fp8-mxfp4" and v.dim() == 2 and k.startswith("layers.")
              and not any(b in k for b in BF16_PROJECTIONS) and "hc_" not in k):
            q, sc, dq = fp8_block32(v, torch)
            state[k], state[k[:-len("weight")] + "scale"], deq[k] = q, sc, dq
        elif k.endswith(("attn_sink", "gate.bias")) or "hc_" in k:
            state[k], deq[k] = v, v  # DeepSeek keeps these f32
        else:
            state[k] = v.to(torch.bfloat16)
            deq[k] = state[k].float()
    return state, deq


def margins(trace, cfg):
    """The smallest gap at the routers' and the indexers' top-k boundaries (a candidate
    consumer's among the entries it chooses from)."""
    route, index = [], []
    for kind, L, scores, *rest in trace:
        if kind == "route":
            top = scores.topk(cfg.top_k + 1, dim=-1).values
            route.append(float((top[:, -2] - top[:, -1]).min()))
        elif kind == "index" and len(rest) == 2:
            for t, allowed in enumerate(rest[1]):
                if len(allowed) > cfg.index_topk:
                    top = scores[t, allowed].topk(cfg.index_topk + 1).values
                    index.append(float(top[-2] - top[-1]))
        elif kind == "index":
            for t, visible in enumerate(rest[0]):
                if visible > cfg.index_topk:
                    top = scores[t, :visible].topk(cfg.index_topk + 1).values
                    index.append(float(top[-2] - top[-1]))
    return min(route), (min(index) if index else None)


def candidate_stats(trace, cfg):
    """The candidate-block top-k's smallest gap between the source's block scores at
    places candidate_topk_blocks and candidate_topk_blocks + 1 over the rows where it
    restricts (more valid blocks than it keeps), those rows, and the rows where a
    consumer's top-k differs from its top-k over every visible entry."""
    nb, gaps, restricted, differs = cfg.candidate_topk_blocks, [], [], set()
    for kind, L, scores, *rest in trace:
        if kind == "candidate":
            for t, valid in enumerate(rest[0]):
                if valid > nb:
                    top = scores[t, :valid].topk(nb + 1).values
                    gaps.append(float(top[-2] - top[-1]))
                    restricted.append(t)
        elif kind == "index" and len(rest) == 2:
            for t, (visible, allowed) in enumerate(zip(*rest)):
                if (ref.top_k(scores[t], visible, cfg.index_topk) !=
                        ref.top_k_within(scores[t], allowed, cfg.index_topk)):
                    differs.add(t)
    return (min(gaps) if gaps else None), restricted, sorted(differs)


def build(name, out, salt_offset=0):
    """The checkpoint of fixture name in folder out (config.json, model.safetensors)
    and its reference on the stored weights; returns (reference, seed)."""
    import torch
    from safetensors.torch import save_file
    overrides, storage, salt = DSV41[name]
    text = dict(BASE, **overrides)
    text["num_hidden_layers"] = len(text["compress_ratios"])
    hf = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
          "dtype": "bfloat16", "text_config": text, "bos_token_id": 0, "eos_token_id": 1,
          "pad_token_id": 2}
    if storage == "fp8-mxfp4":
        hf["quantization_config"] = {"quant_method": "fp8", "expert_dtype": "fp4",
                                     "activation_scheme": "dynamic",
                                     "weight_block_size": [32, 32], "scale_fmt": "ue8m0"}
    out.mkdir(parents=True, exist_ok=True)
    if text.get("engram_layer_ids"):
        text["engram_compressed_vocab_size"] = tiny_tokenizer(text["vocab_size"], out)
    cfg = ref.V41Config(hf)
    seed = sum(name.encode()) * 7919 + salt + salt_offset
    state, deq = store(weights(cfg, text, torch.Generator().manual_seed(seed), torch), storage,
                       torch)
    save_file({k: v.contiguous() for k, v in sorted(state.items())}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    reference = ref.V41Reference.load(out)
    if any((reference.w[k] - v).abs().max() > 0 for k, v in deq.items()):
        raise SystemExit(f"{name}: the reference does not read back the stored weights")
    return reference, seed


def make(name):
    import numpy as np
    import torch
    out = mmf.OUT / name
    n_prompt, n_greedy = LENGTHS.get(name, (N_PROMPT, N_GREEDY))
    for attempt in range(20):  # seeds until no near-tie decides a choice
        reference, seed = build(name, out, attempt)
        g = torch.Generator().manual_seed(seed + 1)
        prompt = torch.randint(3, reference.cfg.vocab, (n_prompt,), generator=g).tolist()
        trace = []
        with torch.no_grad():
            logits = reference.forward(prompt, trace)
            seq = list(prompt)
            for _ in range(n_greedy):
                seq.append(int(reference.forward(seq)[-1].argmax()))
            trace = []
            seq_logits = reference.forward(seq, trace)
        route_margin, index_margin = margins(trace, reference.cfg)
        block_margin = None
        if reference.cfg.candidate_source is not None:
            block_margin, restricted, differs = candidate_stats(trace, reference.cfg)
            if not restricted or not differs:
                raise SystemExit(f"{name}: the candidate blocks restrict {len(restricted)} rows "
                                 f"and change no consumer's top-k: the fixture tests nothing")
        if (route_margin >= MIN_MARGIN and (index_margin is None or index_margin >= MIN_MARGIN)
                and (block_margin is None or block_margin >= MIN_MARGIN)):
            break
    else:
        raise SystemExit(f"{name}: no seed without near-ties in 20 tries")
    logits.numpy().astype("<f4").tofile(out / "logits.f32")
    seq_logits.numpy().astype("<f4").tofile(out / "sequence_logits.f32")
    reference_json = {
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": "DeepseekV41ForCausalLM",
        "storage_dtype": ("float8_e4m3fn (32x32 E8M0 block scales), routed experts MXFP4, "
                          "Engram tables fp8 (an E8M0 scale per 32 values of a row), "
                          "compressor/indexer keys and weights/router/norms/Engram norms bf16, "
                          "sinks/mHC/router bias f32" if DSV41[name][1] == "fp8-mxfp4" else
                          "bfloat16, sinks/mHC/router bias f32" if DSV41[name][1] == "bfloat16"
                          else DSV41[name][1]),
        "compute_dtype": "float32",
        "seed": seed,
        "files": ["model.safetensors"],
        "config": json.loads((out / "config.json").read_text()),
        "prompt": prompt,
        "logits_file": "logits.f32",
        "logits_shape": [n_prompt, reference.cfg.vocab],
        "argmax": np.argmax(logits.numpy(), axis=1).tolist(),
        "greedy": seq[n_prompt:],
        "router_min_margin": round(route_margin, 6),
        "index_min_margin": round(index_margin, 6) if index_margin is not None else None,
        "sequence_logits_file": "sequence_logits.f32",
        "sequence_logits_shape": [n_prompt + n_greedy, reference.cfg.vocab],
        "oracle": {"reference": "tests/oracle/dsv41_reference.py (checked by "
                                "check_dsv41_ops.py)", "torch": torch.__version__},
    }
    if reference.cfg.candidate_source is not None:
        # over the rows of the sequence (prompt + greedy); a row's choices are the same
        # in the prompt's pass (causal)
        reference_json["candidate"] = {
            "block_min_margin": round(block_margin, 6) if block_margin is not None else None,
            "rows": len(seq),
            "restricted_rows": len(restricted),
            "first_restricted_row": restricted[0] if restricted else None,
            "restricted_prompt_rows": sum(t < n_prompt for t in restricted),
            "topk_differs_from_dense_rows": len(differs),
            "topk_differs_from_dense_prompt_rows": sum(t < n_prompt for t in differs),
        }
    (out / "reference.json").write_text(json.dumps(reference_json, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {size} bytes, seed {seed}, router margin {route_margin:.4g}, index margin "
          f"{index_margin if index_margin is None else round(index_margin, 4)}, "
          f"greedy {seq[n_prompt:n_prompt + 8]}..."
          + (f", candidate {reference_json['candidate']}" if block_margin is not None else ""))


def main(argv):
    if argv[:1] in (["--help"], ["-h"]):
        print(__doc__)
        return
    mmf.fixtures_main(argv, DSV41, make, "DeepSeek-V4.1")


if __name__ == "__main__":
    main(sys.argv[1:])
