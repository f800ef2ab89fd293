#!/usr/bin/env python3
"""Make the DeepSeek-V4.1 DSpark draft fixture (tests/fixtures/model/README.md says the format).

    make_dsv41_dspark_fixtures.py              tests/fixtures/model/dsv41-dspark-release/
    make_dsv41_dspark_fixtures.py --check      regenerate into a scratch folder and compare
    make_dsv41_dspark_fixtures.py --find-salt  the first seed salt whose margins clear the bars

A tiny DeepSeek-V4.1 target (make_dsv41_fixtures.py's shape and weight writer: sliding,
ratio 2, ratio 2 sharing the first's KV, ratio 1 (YOCO); YaRN on the compressed layers;
Engram before layer 1's attention; bf16 storage) with a DSpark head beside it under
mtp.*: S stages, each a V4.1 sliding layer with its own, smaller MoE
(dspark_n_routed_experts, dspark_num_experts_per_tok), fed by the target's features
through main_proj/main_norm, then the shifted mHC's last pre mix, the head's norm, the
target's LM head, a rank-R Markov bias chained on the block's own argmaxes, and a
confidence head.

The reference is dsv41_dspark_reference.py (its docstring says what it computes and
from which of DeepInfer's files; check_dsv41_ops.py holds its parts to DeepInfer's own
*_ref functions) on the weights as stored. Cases: one sequence, prefixes N_1 < N_2 <
...; before case k the features of [N_{k-1}, N_k) are injected (their keys overwrite
what the previous block wrote there), then the block at N_k with anchor seq[N_k]. A seed
is kept only when no near-tie decides a discrete choice (MIN_* below).

Run with the model oracle venv (scripts/oracle-venv.sh --model).
"""
import copy
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv41_dspark_reference as dref  # noqa: E402
import dsv41_reference as ref  # noqa: E402
import make_dsv41_fixtures as v41  # noqa: E402
import make_model_fixtures as mmf  # noqa: E402

NAME = "dsv41-dspark-release"
# The target: make_dsv41_fixtures' BASE, narrower so the file stays small.
TARGET = dict(compress_ratios=[0, 2, 2, 1], kv_source_layer_ids=[1, 3],
              index_source_layer_ids=[1, 3], rope_scaling=v41.YARN, head_dim=64,
              qk_rope_head_dim=32, q_lora_rank=32, index_head_dim=32,
              moe_intermediate_size=16, sliding_window=6,
              engram_layer_ids=[1], engram_max_ngram_size=3, engram_vocab_size=37,
              engram_n_heads=2, engram_head_dim=16, engram_pad_token_id=2)
STAGES = 2              # num_nextn_predict_layers: the DSpark stages
BLOCK = 4               # dspark_block_size
TARGET_LAYERS = [1, 3]  # dspark_target_layer_ids (0-based main layers; 1 an Engram layer)
NOISE = 3               # dspark_noise_token_id
RANK = 8                # dspark_markov_rank
EXPERTS, TOP_K = 4, 1   # dspark_n_routed_experts, dspark_num_experts_per_tok (main: 8, 2)
CASES = [3, 8, 13, 21, 30]  # prefix lengths (the window of 6 is crossed)
N_SEQ = 32
SALT = 0                # seed salt: the first that clears the margins below
MIN_TOP2 = 1e-3         # smallest allowed gap between a row's top two biased logits
MIN_STAGE_ROUTER = 1e-3  # ... between a stage router's k-th and (k+1)-th expert score
MIN_MARGIN = v41.MIN_MARGIN  # ... the target's routers and indexers (1e-4)


def seed_of(salt):
    return sum(NAME.encode()) * 7919 + salt


def text_config():
    text = dict(v41.BASE, **TARGET)
    text["num_hidden_layers"] = len(text["compress_ratios"])
    text["compress_ratios"] = text["compress_ratios"] + [0] * STAGES
    text.update(num_nextn_predict_layers=STAGES, dspark_block_size=BLOCK,
                dspark_target_layer_ids=TARGET_LAYERS, dspark_target_attn_input=True,
                dspark_markov_rank=RANK, dspark_noise_token_id=NOISE,
                dspark_n_routed_experts=EXPERTS, dspark_num_experts_per_tok=TOP_K)
    return text


def head_weights(cfg, g, torch):
    """Random float32 weights of the mtp.* tensors, by release name: each stage a
    sliding layer of make_dsv41_fixtures' writer with the stage's experts, then the
    glue (main_proj/main_norm on stage 0, the rest on the last)."""
    sc = copy.copy(cfg)
    sc.ratios, sc.engram_layers, sc.n_experts = [0] * STAGES, [], EXPERTS
    t = {}
    for k, v in v41.weights(sc, {"moe_intermediate_size": cfg.moe_inter}, g, torch).items():
        if k.startswith("layers."):
            s, rest = k[len("layers."):].split(".", 1)
            t[f"mtp.{s}.{rest}"] = v
    h, V, last = cfg.hidden, cfg.vocab, f"mtp.{STAGES - 1}."
    t["mtp.0.main_proj.weight"] = torch.randn(h, len(TARGET_LAYERS) * h, generator=g) * 0.1
    t["mtp.0.main_norm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    t[last + "norm.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    # a Markov bias of the logits' size
    t[last + "markov_head.embed.weight"] = torch.randn(V, RANK, generator=g) * 0.5
    t[last + "markov_head.head.weight"] = torch.randn(V, RANK, generator=g) * 0.5
    t[last + "confidence_head.proj.weight"] = torch.randn(1, h + RANK, generator=g) * 0.1
    return t


def build(salt, out):
    """The checkpoint (config.json, tokenizer.json, model.safetensors) in folder out and
    the reference on its stored weights; returns (reference, seed)."""
    import torch
    from safetensors.torch import save_file
    text = text_config()
    hf = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
          "dtype": "bfloat16", "text_config": text, "bos_token_id": 0, "eos_token_id": 1,
          "pad_token_id": 2}
    out.mkdir(parents=True, exist_ok=True)
    text["engram_compressed_vocab_size"] = v41.tiny_tokenizer(text["vocab_size"], out)
    cfg = ref.V41Config(hf)
    seed = seed_of(salt)
    t = v41.weights(cfg, text, torch.Generator().manual_seed(seed), torch)
    t.update(head_weights(cfg, torch.Generator().manual_seed(seed + 17), torch))
    state, deq = v41.store(t, "bfloat16", torch)
    save_file({k: v.contiguous() for k, v in sorted(state.items())}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    reference = dref.V41DSparkReference.load(out)
    if any((reference.main.w[k] - v).abs().max() > 0 for k, v in deq.items()):
        raise SystemExit(f"{NAME}: the reference does not read back the stored weights")
    return reference, seed


def stage_margin(trace, top_k):
    """The smallest gap between the stage routers' k-th and (k+1)-th scores."""
    tops = [s.topk(top_k + 1, dim=-1).values for kind, _, s in trace if kind == "route"]
    return min(float((t[:, -2] - t[:, -1]).min()) for t in tops)


def compute(salt, out):
    """Everything from the seed, the checkpoint written into out."""
    import torch
    reference, seed = build(salt, out)
    main, cfg = reference.main, reference.cfg
    g = torch.Generator().manual_seed(seed + 1)
    seq = torch.randint(3, cfg.vocab, (N_SEQ,), generator=g).tolist()
    with torch.no_grad():
        logits, feats = reference.features(seq)
        greedy = list(seq)
        for _ in range(mmf.N_GREEDY):
            greedy.append(int(main.forward(greedy)[-1].argmax()))
        trace = []
        seq_logits = main.forward(greedy, trace)  # (causal: covers the prompt's positions)
        router, index = v41.margins(trace, cfg)
        caches, done, stage_trace = reference.new_caches(), 0, []
        rows, drafts, confs = [], [], []
        for n in CASES:
            reference.inject(caches, feats[done:n], range(done, n))
            done = n
            b = reference.block(caches, n, seq[n], stage_trace)
            rows.append(b["logits"])
            drafts.append(b["drafts"])
            confs.append([round(float(c), 6) for c in b["confidence"]])
    dl = torch.cat(rows)
    t2 = dl.topk(2, dim=-1).values
    return dict(seed=seed, seq=seq, logits=logits.numpy(), greedy=greedy[N_SEQ:],
                seq_logits=seq_logits.numpy(), feats=feats[:CASES[-1]].numpy(),
                dspark_logits=dl.numpy(), drafts=drafts, confs=confs,
                top2=float((t2[:, 0] - t2[:, 1]).min()), router=router, index=index,
                stage_router=stage_margin(stage_trace, TOP_K), cfg=cfg)


def good(r):
    return r["top2"] >= MIN_TOP2 and r["stage_router"] >= MIN_STAGE_ROUTER and \
        r["router"] >= MIN_MARGIN and (r["index"] is None or r["index"] >= MIN_MARGIN)


def make(name):
    import numpy as np
    import torch
    out = mmf.OUT / name
    r = compute(SALT, out)
    if not good(r):
        sys.exit(f"{name}: salt {SALT} has a near-tie (top-2 {r['top2']:.2e}, stage router "
                 f"{r['stage_router']:.2e}, router {r['router']:.2e}, index {r['index']}): "
                 f"pick another (--find-salt)")
    r["logits"].astype("<f4").tofile(out / "logits.f32")
    r["seq_logits"].astype("<f4").tofile(out / "sequence_logits.f32")
    r["dspark_logits"].astype("<f4").tofile(out / "dspark_logits.f32")
    r["feats"].astype("<f4").tofile(out / "dspark_features.f32")
    cfg, V = r["cfg"], r["cfg"].vocab
    reference_json = {
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": "DeepseekV41ForCausalLM",
        "storage_dtype": "bf16 (attention sinks, router biases and mHC f32)",
        "compute_dtype": "float32",
        "seed": r["seed"],
        "files": ["model.safetensors"],
        "config": json.loads((out / "config.json").read_text()),
        "prompt": r["seq"],
        "logits_file": "logits.f32",
        "logits_shape": [N_SEQ, V],
        "argmax": np.argmax(r["logits"], axis=1).tolist(),
        "greedy": r["greedy"],
        "router_min_margin": round(r["router"], 6),
        "index_min_margin": round(r["index"], 6) if r["index"] is not None else None,
        "sequence_logits_file": "sequence_logits.f32",
        "sequence_logits_shape": [N_SEQ + mmf.N_GREEDY, V],
        "dspark": {
            "block_size": BLOCK,
            "stages": STAGES,
            "target_layer_ids": TARGET_LAYERS,
            "noise_token_id": NOISE,
            "markov_rank": RANK,
            "dspark_n_routed_experts": EXPERTS,
            "dspark_num_experts_per_tok": TOP_K,
            "window": cfg.window,
            "cases": CASES,
            "anchors": [r["seq"][n] for n in CASES],
            "drafts": r["drafts"],
            "confidence": r["confs"],
            "min_top2_margin": round(r["top2"], 6),
            "router_min_margin": round(r["stage_router"], 6),
            "logits_file": "dspark_logits.f32",
            "logits_shape": [len(CASES) * BLOCK, V],
            "features_file": "dspark_features.f32",
            "features_shape": [CASES[-1], len(TARGET_LAYERS) * cfg.hidden],
        },
        "oracle": {"reference": "tests/oracle/dsv41_dspark_reference.py (checked by "
                                "check_dsv41_ops.py)", "torch": torch.__version__},
    }
    (out / "reference.json").write_text(json.dumps(reference_json, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {size} bytes, seed {r['seed']}, drafts {r['drafts']}, top-2 margin "
          f"{r['top2']:.4f}, stage router margin {r['stage_router']:.4f}, router margin "
          f"{r['router']:.4g}, index margin {r['index']}")


def find_salt():
    import tempfile
    for salt in range(64):
        with tempfile.TemporaryDirectory() as tmp:
            r = compute(salt, pathlib.Path(tmp))
        print(f"salt {salt}: top-2 {r['top2']:.2e} stage router {r['stage_router']:.2e} router "
              f"{r['router']:.2e} index {r['index']} drafts {r['drafts']}", flush=True)
        if good(r):
            return


def main(argv):
    if argv[:1] in (["--help"], ["-h"]):
        print(__doc__)
        return
    if argv[:1] == ["--find-salt"]:
        find_salt()
        return
    mmf.fixtures_main(argv, {NAME: None}, make, "DeepSeek-V4.1 DSpark")


if __name__ == "__main__":
    main(sys.argv[1:])
