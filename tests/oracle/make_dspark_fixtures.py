#!/usr/bin/env python3
"""Make the DeepSeek-V4 DSpark draft fixture (tests/fixtures/model/README.md says the format).

    make_dspark_fixtures.py              tests/fixtures/model/dsv4-dspark-release/, then
                                         its GGUFs (as --gguf)
    make_dspark_fixtures.py --gguf       tests/fixtures/model/gguf-dsv4/dsv4-dspark-target.gguf,
                                         dsv4-dspark.gguf (llama.cpp's converter: the target
                                         bf16, the draft --dspark), dsv4-dspark.json and
                                         dsv4-dspark.llama_logits.f32 (llama.cpp end to end on
                                         them: its target's features into its draft)
    make_dspark_fixtures.py --check      regenerate both into a scratch folder and compare
    make_dspark_fixtures.py --llama-cpp  the reference (dspark_reference) against llama.cpp's
                                         DSpark draft graph (dflash arch, graph_dsv4) on the
                                         same weights and the reference's target features
    make_dspark_fixtures.py --find-salt  the first seed salt whose margins clear the bars

A tiny DeepSeek-V4 target in DeepSeek's release layout (as dsv4-gguf-release: CSA,
sliding, HCA, CSA; a hash layer then scored MoE; MXFP4 routed experts, bf16
otherwise) with a DSpark draft head beside it under mtp.*: S stages, each a
sliding-window V4 block (mHC, shared-KV attention with sinks, scored MoE + shared
expert), fed by the target's features through main_proj/main_norm, then an mHC head,
the final norm, the target's LM head, a rank-R Markov bias chained on the block's own
argmaxes, and a confidence head.

What the reference computes (as llama.cpp's dflash.cpp graph_dsv4 and
common/speculative.cpp's draft-dspark run it):

- feature of position p: for each target layer id j (dspark_target_layer_ids, listed
  order), the mean over the hc streams of the target's residual streams after main
  layer j (llama.cpp's layer input j + 1, build_hc_mean; its converter writes the ids
  + 1), concatenated: [n_target * E];
- injection at p: g = main_norm(RMSNorm(main_proj feat_p)); each stage writes the key
  RoPE_p(kv_norm(wkv g)) (RoPE on the trailing qk_rope_head_dim dims, rope_theta, no
  YaRN) into its cache at position p;
- a block at positions n .. n+B-1, tokens [anchor, noise x (B-1)]: the target's
  embeddings copied into the hc streams; per stage: mHC pre, attn_norm, V4 attention
  whose queries at p see every cached key q with p - q < sliding_window (the block's
  own keys, written at n+i first, included: non-causal inside the block; nothing after
  the block is cached), RoPE undone on the output, grouped output projection; mHC post;
  the FFN likewise. Then hc_head -> h (pre-norm) -> norm -> the target's head;
  Markov: prev_0 = anchor, logits_i += w2 w1[prev_i], conf_i = sigmoid(conf_proj
  [h_i; w1[prev_i]]), prev_{i+1} = argmax(logits_i);
- cases: one sequence, prefixes N_1 < N_2 < ...; before case k the features of
  [N_{k-1}, N_k) are injected (after removing every cached position >= N_{k-1}), then
  the block at N_k with anchor seq[N_k].

Run with the model oracle venv (scripts/oracle-venv.sh --model).
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_dsv4_fixtures as d4  # noqa: E402
import make_model_fixtures as mmf  # noqa: E402

NAME = "dsv4-dspark-release"
SW, CSA, HCA = d4.SW, d4.CSA, d4.HCA

# The target: dsv4-gguf-release's shape (what llama.cpp's converter and deepseek4
# graph accept: compression 4 and 128, 16 indexer heads of 64).
TARGET = dict(layer_types=[CSA, SW, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
              compress_rates={CSA: 4, HCA: 128}, max_position_embeddings=512,
              index_n_heads=16, index_head_dim=64)
STAGES = 2              # num_nextn_predict_layers: the DSpark stages
BLOCK = 4               # dspark_block_size
TARGET_LAYERS = [1, 3]  # dspark_target_layer_ids (0-based main layers; 3 is the last)
NOISE = 3               # dspark_noise_token_id
RANK = 8                # the Markov head's rank
CASES = [3, 8, 13, 21, 30]  # prefix lengths (the window of 8 is crossed)
N_SEQ = 32
SALT = 0                # seed salt: the first that clears the margins below
MIN_TOP2 = 1e-3         # smallest allowed gap between a row's top two biased logits
MIN_STAGE_ROUTER = 1e-3  # ... between a stage router's k-th and (k+1)-th expert score
MIN_ROUTER = 1e-4       # ... the same for the target's routers (the V4.1 fixtures' bar)
MIN_INDEX = 1e-4        # ... between the target indexer's k-th and (k+1)-th score
LLAMA_THREADS = 2       # llama.cpp's threads (its reduction order; the fixtures pin it)


def seed_of(salt):
    return sum(NAME.encode()) * 7919 + salt


def config_args():
    cfg = dict(d4.BASE, **TARGET)
    cfg["num_hidden_layers"] = len(cfg["layer_types"])
    cfg["num_nextn_predict_layers"] = STAGES
    return cfg


def build(seed, torch):
    """The target (DeepseekV4ForCausalLM, randomized as the dsv4 fixtures are), the
    stages (layers L .. L+S-1 of a model S layers longer: sliding, scored MoE) and the
    DSpark glue, all float32 from the seed."""
    from torch import nn
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import (DeepseekV4HyperHead,
                                                                      DeepseekV4RMSNorm)
    cfg_args = config_args()
    config = DeepseekV4Config(**cfg_args)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()
    d4.randomize(model, config, torch)
    torch.manual_seed(seed + 17)
    L = config.num_hidden_layers
    ext = dict(cfg_args, layer_types=list(config.layer_types) + [SW] * STAGES,
               mlp_layer_types=list(config.mlp_layer_types) + ["moe"] * STAGES,
               num_hidden_layers=L + STAGES)
    ext_config = DeepseekV4Config(**ext)
    ext_config._attn_implementation = "eager"
    big = DeepseekV4ForCausalLM(ext_config).to(torch.float32).eval()
    d4.randomize(big, ext_config, torch)
    E, V, eps = config.hidden_size, config.vocab_size, config.rms_norm_eps
    glue = nn.ModuleDict({
        "main_proj": nn.Linear(len(TARGET_LAYERS) * E, E, bias=False),
        "main_norm": DeepseekV4RMSNorm(E, eps=eps),
        "norm": DeepseekV4RMSNorm(E, eps=eps),
        "hc_head": DeepseekV4HyperHead(config),
        "markov_w1": nn.Embedding(V, RANK),
        "markov_w2": nn.Linear(RANK, V, bias=False),
        "conf": nn.Linear(E + RANK, 1, bias=False)}).to(torch.float32)
    with torch.no_grad():
        for pname, p in glue.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("hc_base"):
                p.copy_(0.5 * torch.randn_like(p))
            elif pname.endswith("hc_scale"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.startswith("markov"):
                p.copy_(0.5 * torch.randn_like(p))  # a bias of the logits' size
            else:
                p.copy_(config.initializer_range * torch.randn_like(p))
    return model, big, glue


def glue_tensors(glue):
    """The DSpark glue in DeepSeek's release names: main_proj/main_norm on stage 0,
    the head parts on the last stage (llama.cpp's converter takes them as root
    tensors from any stage)."""
    last = f"mtp.{STAGES - 1}."
    t = {"mtp.0.main_proj.weight": glue["main_proj"].weight,
         "mtp.0.main_norm.weight": glue["main_norm"].weight,
         last + "norm.weight": glue["norm"].weight,
         last + "hc_head_fn": glue["hc_head"].hc_fn,
         last + "hc_head_base": glue["hc_head"].hc_base,
         last + "hc_head_scale": glue["hc_head"].hc_scale,
         last + "markov_head.markov_w1.weight": glue["markov_w1"].weight,  # [V, R]
         last + "markov_head.markov_w2.weight": glue["markov_w2"].weight,  # [V, R]
         last + "confidence_head.proj.weight": glue["conf"].weight}        # [1, E + R]
    return {k: v.detach().clone().contiguous() for k, v in t.items()}


def release_state(model, big, glue, L, torch, tmp):
    """(the release checkpoint's tensors, their dequantized float32 values under
    save_pretrained's names for the reference). Routed experts MXFP4 (the converter
    reads DSpark's experts only so), everything else bf16."""
    import safetensors.torch
    model.save_pretrained(tmp / "main", safe_serialization=True)
    big.save_pretrained(tmp / "big", safe_serialization=True)
    saved = safetensors.torch.load_file(tmp / "main" / "model.safetensors")
    ext = safetensors.torch.load_file(tmp / "big" / "model.safetensors")
    saved.update({k: v for k, v in ext.items()
                  if any(k.startswith(f"model.layers.{L + s}.") for s in range(STAGES))})
    saved.update(glue_tensors(glue))
    state, deq = {}, {}
    for k, v in sorted(saved.items()):
        release = d4.release_name(k)
        for s in range(STAGES):
            if release.startswith(f"layers.{L + s}."):
                release = f"mtp.{s}." + release[len(f"layers.{L + s}."):]
        if ".ffn.experts." in k and k.endswith(".weight") and v.dim() == 2:
            codes, e8, dq = d4.mxfp4_quantize(v.to(torch.float32))
            state[release], state[release[:-len("weight")] + "scale"], deq[k] = codes, e8, dq
        elif v.is_floating_point():
            state[release] = v.to(torch.bfloat16).contiguous()
            deq[k] = v.to(torch.bfloat16).to(torch.float32).contiguous()
        else:
            state[release] = deq[k] = v.contiguous()
    return state, deq


def release_config(tmp, stages=STAGES, block=BLOCK, targets=TARGET_LAYERS, noise=NOISE):
    """The main config.json as save_pretrained wrote it, with the release keys
    llama.cpp's converter reads: per-layer compression ratios (the stages' 0 after
    the main layers'), the hash layer count, the DSpark keys (the fixture's by
    default; bench/dspark_bench.py gives its own)."""
    cfg = json.loads((tmp / "main" / "config.json").read_text())
    rate = {SW: 0, **cfg["compress_rates"]}
    cfg["compress_ratios"] = [rate[t] for t in cfg["layer_types"]] + [0] * stages
    cfg["num_hash_layers"] = sum(t == "hash_moe" for t in cfg["mlp_layer_types"])
    cfg["num_nextn_predict_layers"] = stages
    cfg["dspark_block_size"] = block
    cfg["dspark_target_layer_ids"] = targets
    cfg["dspark_noise_token_id"] = noise
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128]}
    cfg["dtype"] = "bfloat16"
    return cfg


def reload(deq, glue, L, tmp, torch):
    """The target and the stages on the dequantized weights (from_pretrained, as the
    other DeepSeek-V4 references), the glue with its bf16-rounded values."""
    import safetensors.torch
    from transformers import DeepseekV4ForCausalLM

    def stage(k):
        return k.startswith("model.layers.") and int(k.split(".")[2]) >= L

    every = {k: v for k, v in deq.items() if not k.startswith("mtp.")}
    for name in ("main", "big"):
        d = tmp / f"deq-{name}"
        d.mkdir()
        (d / "config.json").write_text((tmp / name / "config.json").read_text())
        state = {k: v for k, v in every.items() if not stage(k)} if name == "main" else every
        safetensors.torch.save_file(state, d / "model.safetensors", metadata={"format": "pt"})
    model = DeepseekV4ForCausalLM.from_pretrained(tmp / "deq-main", dtype=torch.float32).eval()
    big = DeepseekV4ForCausalLM.from_pretrained(tmp / "deq-big", dtype=torch.float32).eval()
    for m in (model, big):
        m.config._attn_implementation = "eager"
    with torch.no_grad():
        for k, v in glue_tensors(glue).items():
            v = v.to(torch.bfloat16).to(torch.float32)
            leaf = k.split(".", 2)[2]
            target = {"main_proj.weight": glue["main_proj"].weight,
                      "main_norm.weight": glue["main_norm"].weight,
                      "norm.weight": glue["norm"].weight,
                      "hc_head_fn": glue["hc_head"].hc_fn,
                      "hc_head_base": glue["hc_head"].hc_base,
                      "hc_head_scale": glue["hc_head"].hc_scale,
                      "markov_head.markov_w1.weight": glue["markov_w1"].weight,
                      "markov_head.markov_w2.weight": glue["markov_w2"].weight,
                      "confidence_head.proj.weight": glue["conf"].weight}[leaf]
            target.copy_(v)
    return model, big


def target_pass(model, seq, torch):
    """The target on seq: its logits [T, V] (one pass), the DSpark features [T,
    n_target * E] (per listed layer j, the hc-stream mean of the streams after layer
    j), N_GREEDY greedy tokens after seq (generate) and the logits of seq + greedy in
    one pass, and the smallest router and indexer margins over those passes."""
    config = model.config
    streams, margins, index_margins = {}, [], []

    def keep(j):
        def hook(mod, inp, out):  # (returns None: the output stays)
            streams[j] = out[0]
        return hook

    def router_margin(mod, inp, out):
        if hasattr(mod, "e_score_correction_bias"):  # (hash routers choose by table)
            sc = mod.score_fn(out[0]) + mod.e_score_correction_bias
            top = sc.topk(config.num_experts_per_tok + 1, dim=-1).values
            margins.append(float((top[:, -2] - top[:, -1]).min()))

    def index_margin(mod, inp, out):
        # (every query that sees more than k compressed entries; a one-pass run)
        scores, rate, k = out[0], config.compress_rates[CSA], config.index_topk
        for t in range(scores.shape[0]):
            valid = min((t + 1) // rate, scores.shape[1])
            if valid > k:
                top = scores[t, :valid].topk(k + 1).values
                index_margins.append(float(top[-2] - top[-1]))

    layers = model.model.layers
    hooks = [layers[j].register_forward_hook(keep(j)) for j in TARGET_LAYERS]
    hooks += [layer.mlp.gate.register_forward_hook(router_margin) for layer in layers]
    hooks += [layer.self_attn.compressor.indexer.scorer.register_forward_hook(index_margin)
              for layer in layers if layer.self_attn.compressor is not None
              and hasattr(layer.self_attn.compressor, "indexer")]
    ids = torch.tensor([seq])
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits[0].to(torch.float32)
        for h in hooks[:len(TARGET_LAYERS)]:
            h.remove()
        gen = model.generate(ids, do_sample=False, max_new_tokens=mmf.N_GREEDY,
                             min_new_tokens=mmf.N_GREEDY, pad_token_id=0, eos_token_id=None)
        index_margins.clear()  # (the one-pass run below covers every query)
        seq_logits = model(gen, use_cache=False).logits[0].to(torch.float32)
    for h in hooks[len(TARGET_LAYERS):]:
        h.remove()
    feats = torch.cat([streams[j].mean(dim=1) for j in TARGET_LAYERS], dim=-1)
    return (logits, feats, gen[0, len(seq):].tolist(), seq_logits, min(margins),
            min(index_margins) if index_margins else None)


def stage_attention(attn, h, pos, cache, rope, window, torch):
    """A stage's V4 attention for the block rows h [B, E] at positions pos: the
    block's own keys written into cache (position -> key [D]) first, then each query
    at p over every cached key q with p - q < window (later block rows included),
    one shared K = V head, a sink per head, RoPE undone on the output, the grouped
    output projection."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb
    n = h.shape[0]
    H, D = attn.num_heads, attn.head_dim
    cos, sin = rope(pos)
    q = attn.q_b_norm(attn.q_b_proj(attn.q_a_norm(attn.q_a_proj(h))).view(n, H, D)).transpose(0, 1)
    q = apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=0)  # [H, n, D]
    kv = apply_rotary_pos_emb(attn.kv_norm(attn.kv_proj(h))[None], cos, sin, unsqueeze_dim=0)[0]
    for i, p in enumerate(pos.tolist()):
        cache[p] = kv[i]
    out = []
    for i, p in enumerate(pos.tolist()):
        seen = sorted(c for c in cache if p - c < window)
        K = torch.stack([cache[c] for c in seen])                        # [m, D]
        s = (q[:, i] @ K.T) * attn.scaling                               # [H, m]
        w = torch.softmax(torch.cat([s, attn.sinks[:, None]], dim=1), dim=1)[:, :-1]
        out.append(w @ K)                                                # [H, D]
    out = apply_rotary_pos_emb(torch.stack(out, 1), cos, -sin, unsqueeze_dim=0)  # [H, n, D]
    grouped = out.transpose(0, 1).reshape(n, attn.config.o_groups, -1)
    return attn.o_b_proj(attn.o_a_proj(grouped).flatten(1))


def stage_block(layer, x, pos, cache, rope, window, torch):
    """One stage on the block's streams x [B, hc, E]: mHC pre, attn_norm, the
    attention above, mHC post; then mHC pre, ffn_norm, the MoE + shared expert, mHC
    post (transformers' DeepseekV4DecoderLayer with the attention swapped)."""
    post, comb, collapsed = layer.attn_hc(x[None])
    a = stage_attention(layer.self_attn, layer.input_layernorm(collapsed)[0], pos, cache, rope,
                        window, torch)[None]
    x = post.unsqueeze(-1) * a.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), x[None])
    post, comb, collapsed = layer.ffn_hc(x)
    m = layer.mlp(layer.post_attention_layernorm(collapsed))
    return (post.unsqueeze(-1) * m.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), x))[0]


def dspark_reference(model, big, glue, seq, feats, torch):
    """The cases: (biased logits [K * B, V], drafts [K][B], confidences [K][B],
    smallest top-2 gap, smallest stage router margin)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb
    L = model.config.num_hidden_layers
    window = big.config.sliding_window
    stages = [big.model.layers[L + s] for s in range(STAGES)]
    margins = []

    def router_margin(mod, inp, out):
        sc = mod.score_fn(out[0]) + mod.e_score_correction_bias
        top = sc.topk(big.config.num_experts_per_tok + 1, dim=-1).values
        margins.append(float((top[:, -2] - top[:, -1]).min()))

    hooks = [st.mlp.gate.register_forward_hook(router_margin) for st in stages]

    def rope(pos):  # the sliding layers' ("main") RoPE: cos, sin [n, rope_dim / 2]
        cos, sin = big.model.rotary_emb(feats, position_ids=pos[None], layer_type="main")
        return cos[0], sin[0]

    caches = [dict() for _ in stages]
    rows, drafts, confs, top2 = [], [], [], []
    done = 0
    with torch.no_grad():
        for n in CASES:
            for c in caches:  # (llama.cpp: llama_memory_seq_rm(mem, seq, done, -1))
                for p in [p for p in c if p >= done]:
                    del c[p]
            pos = torch.arange(done, n)
            g = glue["main_norm"](glue["main_proj"](feats[done:n]))  # (RMSNorm, then weight)
            cos, sin = rope(pos)
            for st, c in zip(stages, caches):
                k = st.self_attn.kv_norm(st.self_attn.kv_proj(g))
                k = apply_rotary_pos_emb(k[None], cos, sin, unsqueeze_dim=0)[0]
                for i, p in enumerate(pos.tolist()):
                    c[p] = k[i]
            done = n
            tokens = [seq[n]] + [NOISE] * (BLOCK - 1)
            x = model.model.embed_tokens(torch.tensor(tokens))[:, None, :].repeat(
                1, model.config.hc_mult, 1)
            bpos = torch.arange(n, n + BLOCK)
            for st, c in zip(stages, caches):
                x = stage_block(st, x, bpos, c, rope, window, torch)
            h = glue["hc_head"](x[None])[0]                  # [B, E], before the norm
            logits = model.lm_head(glue["norm"](h))          # [B, V]
            prev, row_d, row_c = tokens[0], [], []
            for i in range(BLOCK):
                w1 = glue["markov_w1"].weight[prev]
                lg = logits[i] + glue["markov_w2"](w1)
                conf = torch.sigmoid(glue["conf"](torch.cat([h[i], w1])))
                t2 = lg.topk(2).values
                top2.append(float(t2[0] - t2[1]))
                prev = int(lg.argmax())
                rows.append(lg)
                row_d.append(prev)
                row_c.append(round(float(conf[0]), 6))
            drafts.append(row_d)
            confs.append(row_c)
    for hk in hooks:
        hk.remove()
    return torch.stack(rows).numpy(), drafts, confs, min(top2), min(margins)


def compute(salt, torch):
    """Everything from the seed: (release state, config, reference pieces)."""
    import tempfile
    seed = seed_of(salt)
    model, big, glue = build(seed, torch)
    L = model.config.num_hidden_layers
    scratch = tempfile.TemporaryDirectory()
    tmp = pathlib.Path(scratch.name)
    state, deq = release_state(model, big, glue, L, torch, tmp)
    cfg = release_config(tmp)
    model, big = reload(deq, glue, L, tmp, torch)
    g = torch.Generator().manual_seed(seed + 1)
    seq = torch.randint(3, model.config.vocab_size, (N_SEQ,), generator=g).tolist()
    logits, feats, greedy, seq_logits, router, index = target_pass(model, seq, torch)
    dl, drafts, confs, top2, stage_router = dspark_reference(model, big, glue, seq, feats, torch)
    return dict(seed=seed, state=state, cfg=cfg, seq=seq, logits=logits.numpy(),
                greedy=greedy, seq_logits=seq_logits.numpy(),
                feats=feats.numpy(), dspark_logits=dl, drafts=drafts, confs=confs, top2=top2,
                router=router, stage_router=stage_router, index=index)


def good(r):
    return r["top2"] >= MIN_TOP2 and r["stage_router"] >= MIN_STAGE_ROUTER and \
        r["router"] >= MIN_ROUTER and (r["index"] is None or r["index"] >= MIN_INDEX)


def make(name):
    import numpy as np
    import safetensors
    import safetensors.torch
    import torch
    import transformers
    r = compute(SALT, torch)
    if not good(r):
        sys.exit(f"{name}: salt {SALT} has a near-tie (top-2 {r['top2']:.2e}, stage router "
                 f"{r['stage_router']:.2e}, router {r['router']:.2e}, index {r['index']}): "
                 f"pick another (--find-salt)")
    out = mmf.OUT / name
    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(r["state"], out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(r["cfg"], indent=2, sort_keys=True) + "\n")
    r["logits"].astype("<f4").tofile(out / "logits.f32")
    r["seq_logits"].astype("<f4").tofile(out / "sequence_logits.f32")
    r["dspark_logits"].astype("<f4").tofile(out / "dspark_logits.f32")
    n_feat = CASES[-1]
    r["feats"][:n_feat].astype("<f4").tofile(out / "dspark_features.f32")
    V = r["cfg"]["vocab_size"]
    ref = {
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": "DeepseekV4ForCausalLM",
        "storage_dtype": "mxfp4-bf16",
        "compute_dtype": "float32",
        "seed": r["seed"],
        "files": ["model.safetensors"],
        "config": r["cfg"],
        "prompt": r["seq"],
        "logits_file": "logits.f32",
        "logits_shape": [N_SEQ, V],
        "argmax": r["logits"].argmax(1).tolist(),
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
            "cases": CASES,
            "anchors": [r["seq"][n] for n in CASES],
            "drafts": r["drafts"],
            "confidence": r["confs"],
            "min_top2_margin": round(r["top2"], 6),
            "router_min_margin": round(r["stage_router"], 6),
            "logits_file": "dspark_logits.f32",
            "logits_shape": [len(CASES) * BLOCK, V],
            "features_file": "dspark_features.f32",
            "features_shape": [n_feat, len(TARGET_LAYERS) * r["cfg"]["hidden_size"]],
        },
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__,
                   "attn_implementation": "eager"},
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {size} bytes, drafts {r['drafts']}, top-2 margin {r['top2']:.4f}, "
          f"stage router margin {r['stage_router']:.4f}, router margin {r['router']:.4f}, "
          f"index margin {r['index']}")


def find_salt():
    import torch
    for salt in range(64):
        r = compute(salt, torch)
        print(f"salt {salt}: top-2 {r['top2']:.2e} stage router {r['stage_router']:.2e} router "
              f"{r['router']:.2e} index {r['index']} drafts {r['drafts']}", flush=True)
        if good(r):
            return


def llama_cpp_dspark(target_path, draft_path, feats, seq, vocab, check_features):
    """llama.cpp's DSpark draft (llama-cpp-python's low-level API): a target context
    (for ctx_other: the draft has no embeddings or head of its own), a draft context
    with non-causal attention and its nextn output on (the confidences), driven as
    common/speculative.cpp's draft-dspark does: per case, drop the draft's cells from
    the previous prefix on, inject the features of the new positions (an embedding
    batch), decode the block. With check_features the target also runs over the
    sequence with its layer inputs j + 1 extracted (llama.cpp's own features);
    feats None injects those (end to end, as the DSpark speculation does) instead
    of the given ones. Two threads (LLAMA_THREADS), as the other llama.cpp oracles.
    Returns (logits [K * B, V], confidences [K][B], target features or None)."""
    import ctypes
    import numpy as np
    import llama_cpp as lc
    lib = lc.llama_cpp._lib
    set_nextn = getattr(lib, "_Z26llama_set_embeddings_nextnP13llama_contextbb")
    set_nextn.argtypes, set_nextn.restype = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None
    get_nextn = getattr(lib, "_Z26llama_get_embeddings_nextnP13llama_context")
    get_nextn.argtypes, get_nextn.restype = [ctypes.c_void_p], ctypes.POINTER(ctypes.c_float)
    set_inp = getattr(lib, "_Z30llama_set_embeddings_layer_inpP13llama_contextjb")
    set_inp.argtypes, set_inp.restype = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None
    get_inp = getattr(lib, "_Z30llama_get_embeddings_layer_inpP13llama_contextj")
    get_inp.argtypes, get_inp.restype = [ctypes.c_void_p, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float)
    quiet = lc.llama_log_callback(lambda level, text, user: None)  # (kept alive below)
    lc.llama_log_set(quiet, None)
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    tm = lc.llama_model_load_from_file(str(target_path).encode(), mp)
    dm = lc.llama_model_load_from_file(str(draft_path).encode(), mp)
    assert tm and dm, "llama.cpp did not load the GGUFs"
    cp = lc.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256
    cp.n_threads = cp.n_threads_batch = LLAMA_THREADS
    tctx = lc.llama_init_from_model(tm, cp)
    assert tctx
    E = lc.llama_model_n_embd(tm)
    tfeat = None
    if check_features:
        for j in TARGET_LAYERS:
            set_inp(tctx, j + 1, True)
        batch = lc.llama_batch_ext_init(tctx)
        for i, t in enumerate(seq):
            idx = lc.llama_batch_ext_add_token(batch, 0, t)
            pos = lc.llama_pos(i)
            assert idx == i and lc.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
        assert lc.llama_process(tctx, lc.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
        tfeat = np.concatenate([np.ctypeslib.as_array(get_inp(tctx, j + 1), shape=(len(seq), E)).copy()
                                for j in TARGET_LAYERS], axis=1)
        lc.llama_batch_ext_free(batch)
    dp = lc.llama_context_default_params()
    dp.n_ctx = dp.n_batch = dp.n_ubatch = 256
    dp.n_threads = dp.n_threads_batch = LLAMA_THREADS
    dp.ctx_other = tctx
    dctx = lc.llama_init_from_model(dm, dp)
    assert dctx, "llama.cpp did not make the draft context"
    lc.llama_set_causal_attn(dctx, False)  # (speculative.cpp: no dflash.attention.causal)
    set_nextn(dctx, True, True)
    n_embd_draft = lc.llama_model_n_embd(dm)
    mem = lc.llama_get_memory(dctx)
    if feats is None:
        assert tfeat is not None, "no features: inject the target's own (check_features)"
        feats = tfeat
    W = feats.shape[1]
    f = np.ascontiguousarray(feats, dtype=np.float32)
    rows, confs, done = [], [], 0
    for n in CASES:
        assert lc.llama_memory_seq_rm(mem, 0, done, -1)
        batch = lc.llama_batch_ext_init(dctx)
        for i, p in enumerate(range(done, n)):
            e = lc.llama_embd(f[p:].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, W)
            idx = lc.llama_batch_ext_add_embd(batch, 0, e)
            pos = lc.llama_pos(p)
            assert idx == i and lc.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
        assert lc.llama_process(dctx, lc.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
        lc.llama_batch_ext_free(batch)
        done = n
        batch = lc.llama_batch_ext_init(dctx)
        for i, t in enumerate([seq[n]] + [NOISE] * (BLOCK - 1)):
            idx = lc.llama_batch_ext_add_token(batch, 0, t)
            pos = lc.llama_pos(n + i)
            assert idx == i and lc.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
            assert lc.llama_batch_ext_set_output_logits(batch, idx, True)
        assert lc.llama_process(dctx, lc.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
        lc.llama_batch_ext_free(batch)
        rows += [np.ctypeslib.as_array(lc.llama_get_logits_ith(dctx, i), shape=(vocab,)).copy()
                 for i in range(BLOCK)]
        c = get_nextn(dctx)
        confs.append([float(c[i * n_embd_draft]) for i in range(BLOCK)])
    lc.llama_free(dctx)
    lc.llama_free(tctx)
    lc.llama_model_free(dm)
    lc.llama_model_free(tm)
    del quiet
    return np.stack(rows), confs, tfeat


def llama_cpp_check():
    """The reference against llama.cpp's DSpark draft (llama-cpp-python 0.3.36): the
    release checkpoint converted by llama.cpp's converter (the target as bf16; the
    draft with --dspark --target-model-dir), the reference's features injected in
    float32, the same blocks decoded; compares the biased logits and the confidences.
    Exits non-zero when worse than llama.cpp's bf16/f16 rounding allows (as the MTP
    check: max |diff| <= 0.05 of the logit range, argmax agreement >= 0.9)."""
    import tempfile
    import numpy as np
    import safetensors.torch
    import torch
    r = compute(SALT, torch)
    scratch = tempfile.TemporaryDirectory()
    tmp = pathlib.Path(scratch.name)
    rel = tmp / NAME
    rel.mkdir()
    safetensors.torch.save_file(r["state"], rel / "model.safetensors", metadata={"format": "pt"})
    (rel / "config.json").write_text(json.dumps(r["cfg"]))
    tok = tmp / "target-tokenizer"
    mmf.stand_in_tokenizer(tok, r["cfg"]["vocab_size"])
    (tok / "config.json").write_text(json.dumps(r["cfg"]))
    target, draft = tmp / "target.gguf", tmp / "dspark.gguf"
    mmf.convert_checkpoint(rel, target, "bf16")
    mmf.convert_checkpoint(rel, draft, "bf16", extra_args=["--dspark", "--target-model-dir", str(tok)])
    want = r["dspark_logits"]
    got, confs, tfeat = llama_cpp_dspark(target, draft, r["feats"], r["seq"],
                                         r["cfg"]["vocab_size"], True)
    span = float(want.max() - want.min())
    diff = np.abs(got - want)
    agree = float((got.argmax(1) == want.argmax(1)).mean())
    cdiff = float(np.abs(np.array(confs) - np.array(r["confs"])).max())
    fspan = float(r["feats"].max() - r["feats"].min())
    fdiff = np.abs(tfeat - r["feats"])
    print(f"llama.cpp's target features (layer inputs {[j + 1 for j in TARGET_LAYERS]}) vs the "
          f"reference's: max |diff| {fdiff.max() / fspan:.2e} of their range, mean "
          f"{fdiff.mean() / fspan:.2e}")
    print(f"llama.cpp drafts {[list(map(int, got[k * BLOCK:(k + 1) * BLOCK].argmax(1))) for k in range(len(CASES))]}")
    print(f"reference drafts {r['drafts']}")
    ok = diff.max() / span <= 0.05 and agree >= 0.9 and cdiff <= 0.05 and fdiff.max() / fspan <= 0.05
    print(f"{'ok' if ok else 'FAIL'}: the DSpark reference vs llama.cpp's DSpark draft, "
          f"{len(CASES)} blocks of {BLOCK}: max |diff| {diff.max() / span:.2e} of the logit range, "
          f"mean {diff.mean() / span:.2e}, argmax agreement {agree:.3f}, confidence max |diff| "
          f"{cdiff:.2e}")
    if not ok:
        sys.exit(1)


# --gguf: the fixture as llama.cpp users get it, in gguf-dsv4/ beside the other
# deepseek4 GGUF fixtures (tests/fixtures/model/README.md)
GGUF_DIR = "gguf-dsv4"
GGUF_TARGET = "dsv4-dspark-target"   # the target, convert_hf_to_gguf.py --outtype bf16
GGUF_NAME = "dsv4-dspark"            # the draft, ... --dspark --target-model-dir
# the DSpark draft GGUF's root tensors (llama.cpp's names) back to the release's
DSPARK_GGUF_ROOT = {"fc.weight": "mtp.0.main_proj.weight",
                    "enc.output_norm.weight": "mtp.0.main_norm.weight",
                    "output_norm.weight": f"mtp.{STAGES - 1}.norm.weight",
                    "output_hc_fn.weight": f"mtp.{STAGES - 1}.hc_head_fn",
                    "output_hc_base.weight": f"mtp.{STAGES - 1}.hc_head_base",
                    "output_hc_scale.weight": f"mtp.{STAGES - 1}.hc_head_scale",
                    "markov_w1.weight": f"mtp.{STAGES - 1}.markov_head.markov_w1.weight",
                    "markov_w2.weight": f"mtp.{STAGES - 1}.markov_head.markov_w2.weight",
                    "conf_proj.weight": f"mtp.{STAGES - 1}.confidence_head.proj.weight"}


def vendored_gguf():
    """gguf-py as the converter has it (vendor/llama.cpp/gguf-py of the pinned
    llama-cpp-python sdist), ahead of any installed gguf."""
    path = str(mmf.llama_cpp_source() / "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    return gguf


def gguf_release_name(name, draft):
    """The release checkpoint's name of a GGUF tensor (llama.cpp's deepseek4 or
    dflash names; make_model_fixtures' tables inverted), or for the stacked experts
    (prefix of its per-expert names, "w1"/"w2"/"w3")."""
    if draft and name in DSPARK_GGUF_ROOT:
        return DSPARK_GGUF_ROOT[name]
    if not draft and name in mmf.DSV4_GGUF_TOP:
        return d4.release_name(mmf.DSV4_GGUF_TOP[name])
    layer, rest = name[len("blk."):].split(".", 1)
    prefix = f"mtp.{layer}." if draft else f"layers.{layer}."
    if rest in mmf.DSV4_GGUF_EXPERTS:
        return prefix + "ffn.experts.", mmf.DSV4_GGUF_EXPERTS[rest]
    return d4.release_name("model.layers.0." + mmf.DSV4_GGUF_LAYER[rest]).replace(
        "layers.0.", prefix, 1)


def mxfp4_dequantize(codes, e8):
    """The release's MXFP4 expert (I8 codes [rows, cols / 2], low nibble first;
    F8_E8M0 scales [rows, cols / 32]) in float32 [rows, cols], read here without
    the converter."""
    import numpy as np
    c = codes.view(np.uint8)
    nib = np.stack([c & 15, c >> 4], axis=-1).reshape(c.shape[0], -1)
    table = np.array(d4.E2M1, dtype=np.float32)
    scale = np.exp2(e8.view(np.uint8).astype(np.float32) - 127.0)
    return (table[nib].reshape(c.shape[0], -1, 32) * scale[..., None]).reshape(nib.shape)


def gguf_exactness(path, checkpoint, draft):
    """Every tensor of the GGUF at path, read by the converter's gguf-py and
    dequantized, against the release checkpoint's values (bf16 as stored, the
    MXFP4 experts decoded from their codes and scales, tid2eid as integers):
    {GGUF name: (ggml type, ne, max |difference|)} over every tensor, and the
    release names the GGUF does not hold."""
    import numpy as np
    import torch
    import safetensors.torch
    gguf = vendored_gguf()
    state = safetensors.torch.load_file(checkpoint)
    used, out = set(), {}
    for t in gguf.GGUFReader(path).tensors:
        got = np.array(t.data) if t.tensor_type == gguf.GGMLQuantizationType.I32 else \
            gguf.quants.dequantize(t.data, t.tensor_type)  # (I32: tid2eid)
        rel = gguf_release_name(t.name, draft)
        if isinstance(rel, tuple):
            prefix, w = rel
            want = []
            for e in range(got.shape[0]):
                k = f"{prefix}{e}.{w}."
                used.update({k + "weight", k + "scale"})
                want.append(mxfp4_dequantize(state[k + "weight"].numpy(),
                                             state[k + "scale"].view(torch.uint8).numpy()))
            want = np.stack(want)
        else:
            used.add(rel)
            want = state[rel]
            want = want.numpy() if not want.is_floating_point() else \
                want.to(torch.float32).numpy()
        assert got.shape == want.shape, (t.name, got.shape, want.shape)
        diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        out[t.name] = (t.tensor_type.name, [int(x) for x in t.shape], diff)
    lacks = sorted(k for k in state if k.startswith("mtp.") == draft and k not in used)
    return out, lacks


def rel_rows(got, want):
    """Per row, max |got - want| over want's whole range."""
    import numpy as np
    return np.abs(got - want).max(axis=1) / float(want.max() - want.min())


def make_gguf():
    """gguf-dsv4/dsv4-dspark-target.gguf and dsv4-dspark.gguf: the release
    checkpoint (mmf.OUT's dsv4-dspark-release when this run made it, else the
    committed one) converted as --llama-cpp converts it; dsv4-dspark.json and
    dsv4-dspark.llama_logits.f32: llama.cpp end to end on the two files (its
    target's features of the sequence injected into its draft, the fixture's
    blocks) against the fixture's dspark_logits (the bar a C engine on the same
    files is held to), and the draft alone on the fixture's features."""
    import hashlib
    import tempfile
    import llama_cpp
    import numpy as np
    src = mmf.OUT / NAME
    if not (src / "model.safetensors").exists():
        src = mmf.ROOT / "tests" / "fixtures" / "model" / NAME
    ref = json.loads((src / "reference.json").read_text())
    cfg, ds = ref["config"], ref["dspark"]
    V = cfg["vocab_size"]
    assert ds["cases"] == CASES and ds["block_size"] == BLOCK
    out = mmf.OUT / GGUF_DIR
    out.mkdir(parents=True, exist_ok=True)
    target, draft = out / f"{GGUF_TARGET}.gguf", out / f"{GGUF_NAME}.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        tok = pathlib.Path(tmp) / "target-tokenizer"
        mmf.stand_in_tokenizer(tok, V)
        (tok / "config.json").write_text(json.dumps(cfg))
        mmf.convert_checkpoint(src, target, "bf16")
        mmf.convert_checkpoint(src, draft, "bf16",
                               extra_args=["--dspark", "--target-model-dir", str(tok)])
    exact = {}
    for path, is_draft in ((target, False), (draft, True)):
        table, lacks = gguf_exactness(path, src / "model.safetensors", is_draft)
        if lacks:
            sys.exit(f"{path.name}: the converter left out {lacks}")
        exact[path.name] = table
    want = np.fromfile(src / ds["logits_file"], "<f4").reshape(ds["logits_shape"])
    rfeat = np.fromfile(src / ds["features_file"], "<f4").reshape(ds["features_shape"])
    seq = ref["prompt"]
    # end to end: llama.cpp's target features (layer inputs j + 1) into its draft
    got, confs, tfeat = llama_cpp_dspark(target, draft, None, seq, V, True)
    # the draft alone, on the fixture's features
    alone, alone_confs, _ = llama_cpp_dspark(target, draft, rfeat, seq, V, False)
    got.astype("<f4").tofile(out / f"{GGUF_NAME}.llama_logits.f32")
    rows, arows = rel_rows(got, want), rel_rows(alone, want)
    fdiff = np.abs(tfeat[:len(rfeat)] - rfeat) / float(rfeat.max() - rfeat.min())
    ref_conf = np.array(ds["confidence"])

    def r6(x):
        return round(float(x), 6)

    drafts = [[int(t) for t in got[k * BLOCK:(k + 1) * BLOCK].argmax(1)] for k in range(len(CASES))]
    fixture = {
        "format": "deepinfer-gguf-dspark-fixture-1",
        "name": GGUF_NAME,
        "checkpoint": NAME,
        "target": target.name,
        "target_sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
        "file": draft.name,
        "file_sha256": hashlib.sha256(draft.read_bytes()).hexdigest(),
        "architecture": "dflash",
        "target_architecture": "deepseek4",
        "convert": f"convert_hf_to_gguf.py --outtype bf16 (target), and with --dspark "
                   f"--target-model-dir (draft) (llama-cpp-python {mmf.LLAMA_CPP_PYTHON}'s "
                   f"vendored llama.cpp)",
        # every tensor of the draft: ggml type, ne; and whether each file's
        # dequantized values are the checkpoint's exactly
        "tensors": {k: {"type": v[0], "ne": v[1]} for k, v in exact[draft.name].items()},
        "target_tensor_types": {ty: sum(v[0] == ty for v in exact[target.name].values())
                                for ty in sorted({v[0] for v in exact[target.name].values()})},
        "inexact_tensors": {f"{f}:{k}": v[2] for f, t in exact.items()
                            for k, v in t.items() if v[2] != 0},
        "prompt": seq,
        "case_prefixes": CASES,  # ("cases" is make_model_fixtures.compare's, a list of dicts)
        "block_size": BLOCK,
        "anchors": [seq[n] for n in CASES],
        "reference_logits_file": f"{NAME}/{ds['logits_file']}",
        "reference_features_file": f"{NAME}/{ds['features_file']}",
        # llama.cpp end to end on the two files: its target over the prompt (one
        # batch), its layer inputs j + 1 (llama_set_embeddings_layer_inp) injected
        # into its draft, the blocks decoded (row k * B + i: case k, slot i)
        "llama_logits_file": f"{GGUF_NAME}.llama_logits.f32",
        "llama_logits_shape": [int(x) for x in got.shape],
        "llama_drafts": drafts,
        "llama_confidence": [[r6(c) for c in row] for row in confs],
        # ... against the reference's dspark_logits: the largest and the median
        # row's max |diff| over the reference's range (the bar: 1.2x these)
        "llama_cpp_max_rel_diff": r6(rows.max()),
        "llama_cpp_median_rel_diff": r6(np.median(rows)),
        "llama_cpp_argmax_agreement": r6((got.argmax(1) == want.argmax(1)).mean()),
        "llama_cpp_confidence_max_abs_diff": r6(np.abs(np.array(confs) - ref_conf).max()),
        # its target features against the reference's (over their range)
        "llama_cpp_feature_max_rel_diff": r6(fdiff.max()),
        "llama_cpp_feature_mean_rel_diff": r6(fdiff.mean()),
        # llama.cpp's draft alone on the reference's features
        "draft_alone": {
            "llama_cpp_max_rel_diff": r6(arows.max()),
            "llama_cpp_median_rel_diff": r6(np.median(arows)),
            "llama_cpp_argmax_agreement": r6((alone.argmax(1) == want.argmax(1)).mean()),
            "llama_cpp_confidence_max_abs_diff": r6(np.abs(np.array(alone_confs) - ref_conf).max()),
        },
        "oracle": {**mmf.llama_cpp_versions(),
                   "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(),
                   "settings": {"n_ctx": 256, "n_batch": 256, "n_ubatch": 256,
                                "n_threads": LLAMA_THREADS, "n_threads_batch": LLAMA_THREADS,
                                "draft": "causal_attn false, embeddings_nextn on"}},
    }
    (out / f"{GGUF_NAME}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{GGUF_NAME}: {target.name} {target.stat().st_size} bytes, {draft.name} "
          f"{draft.stat().st_size} bytes, inexact tensors {fixture['inexact_tensors'] or 'none'}; "
          f"llama.cpp end to end vs dspark_logits: max {rows.max():.2e} of the range, median row "
          f"{np.median(rows):.2e}, argmax agreement {fixture['llama_cpp_argmax_agreement']}; "
          f"draft alone max {arows.max():.2e}, median row {np.median(arows):.2e}")


def make_any(name):
    if name == GGUF_NAME:
        make_gguf()
    else:
        make(name)


def main(argv):
    if argv[:1] == ["--find-salt"]:
        find_salt()
        return
    if argv[:1] == ["--llama-cpp"]:
        llama_cpp_check()
        return
    argv = [GGUF_NAME if a == "--gguf" else a for a in argv]
    mmf.fixtures_main(argv, {NAME: None, GGUF_NAME: None}, make_any, "DeepSeek-V4 DSpark")


if __name__ == "__main__":
    main(sys.argv[1:])
