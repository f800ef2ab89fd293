#!/usr/bin/env python3
"""Make the DeepSeek-V4 parity fixtures (tests/fixtures/model/README.md says the format).

    make_dsv4_fixtures.py [NAME ...]           tiny DeepSeek-V4 checkpoints into tests/fixtures/model/
    make_dsv4_fixtures.py --check [NAME ...]   regenerate into a scratch folder and compare
    make_dsv4_fixtures.py --mtp-llama-cpp      the MTP reference (mtp_run) against llama.cpp's
                                               deepseek4 MTP graph on the same weights

Each checkpoint is transformers 5.24's DeepseekV4ForCausalLM built from a fixed
seed, saved by save_pretrained, with reference.json (prompt, argmax, greedy),
logits.f32 (every prompt position) and sequence_logits.f32 (prompt + greedy in one
pass). The configs are small enough that 48 tokens cross every branch: a sliding
window of 8, CSA compressing every 4 tokens with a top-3 lightning indexer, HCA
every 8, hash-routed MoE layers then scored ones, mHC with 4 streams.

Run with the model oracle venv (scripts/oracle-venv.sh --model).
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_model_fixtures as mmf  # noqa: E402

N_PROMPT = mmf.N_PROMPT
N_GREEDY = mmf.N_GREEDY

SW, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

# name -> (config overrides, storage dtype, seed salt)
DSV4 = {
    # every layer type, two hash layers then scored (sqrtsoftplus) MoE, plain RoPE
    "dsv4-sqrtsoftplus-f32": (dict(layer_types=[SW, CSA, HCA, CSA],
                                   mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"]),
                              "float32", 1),
    # sigmoid scoring, YaRN on the compressed branches, bf16 storage
    "dsv4-sigmoid-yarn-bf16": (dict(layer_types=[HCA, CSA, SW],
                                    mlp_layer_types=["hash_moe", "moe", "moe"],
                                    scoring_func="sigmoid",
                                    rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=160000.0,
                                                         original_max_position_embeddings=32,
                                                         beta_fast=32, beta_slow=1),
                                    max_position_embeddings=128),
                               "bfloat16", 3),
    # DeepSeek's fp8-e4m3 projections with 128x128 block scales (the compressor
    # and indexer projections stay bf16, as V4-Flash ships them)
    "dsv4-fp8": (dict(layer_types=[CSA, HCA, SW], mlp_layer_types=["hash_moe", "moe", "moe"]),
                 "fp8", 3),
    # DeepSeek's release layout exactly (embed, layers.N.attn.wq_a, ffn.experts.E.w1,
    # hc_head_fn, head, norm; no "model." prefix) with its scales as "X.scale":
    # power-of-two (ue8m0) F8_E8M0 block scales as V4-Flash stores them, and F32
    # ones on the routed experts as V4-Flash-Base stores them
    "dsv4-fp8-ue8m0-release": (dict(layer_types=[SW, CSA, HCA],
                                    mlp_layer_types=["hash_moe", "moe", "moe"]),
                               "fp8-ue8m0", 0),
    # DeepSeek-V4-Flash's layout: the routed experts in MXFP4 (I8 codes, two a
    # byte, the low nibble first; an F8_E8M0 scale per 32 values of a row), the
    # other projections fp8 with E8M0 block scales
    "dsv4-mxfp4-release": (dict(layer_types=[CSA, SW, HCA],
                                mlp_layer_types=["hash_moe", "moe", "moe"]),
                           "mxfp4", 5),
    # What llama.cpp's converter and its deepseek4 graph accept (compression
    # rates 4 and 128 only, sqrtsoftplus, an indexer key of a multiple of 64
    # for its Hadamard rotation): the release layout with MXFP4 experts and
    # every other weight bf16 (the converter keeps those, so the GGUF holds
    # exactly these weights), HCA at 128 and a prompt long enough (144 tokens)
    # for HCA's first compressed entry; 16 indexer heads keep the indexer's
    # scores free of ties at zero; an MTP layer (llama.cpp's converter writes it
    # as a GGUF of its own with --mtp). The source of the deepseek4 GGUF
    # fixtures (make_model_fixtures.py dsv4-gguf)
    # the MTP layer (mtp.0.*, DeepSeek's release names; transformers ignores
    # them): a sliding-window block with scored MoE, its own e_proj/h_proj,
    # enorm/hnorm, norm and mHC head, on the main model's last hidden streams
    # (mtp_reference below)
    "dsv4-mtp-f32": (dict(layer_types=[SW, CSA, HCA], mlp_layer_types=["hash_moe", "moe", "moe"],
                          num_nextn_predict_layers=1),
                     "float32", 2),
    "dsv4-gguf-release": (dict(layer_types=[CSA, SW, HCA, CSA],
                               mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
                               compress_rates={CSA: 4, HCA: 128}, max_position_embeddings=512,
                               index_n_heads=16, index_head_dim=64, n_prompt=144,
                               num_nextn_predict_layers=1),
                          "mxfp4-bf16", 5),
}

# The config keys DeepSeek's release config.json has beside transformers'
# (llama.cpp's converter reads them): the per-layer compression ratio (0 for
# sliding-window layers) and the number of leading hash-routed layers.
def release_config_keys(cfg):
    rate = {SW: 0, CSA: cfg["compress_rates"][CSA], HCA: cfg["compress_rates"][HCA]}
    # (an MTP layer's ratio after the main ones': 0, a sliding-window layer)
    mtp = [0] * min(cfg.get("num_nextn_predict_layers") or 0, 1)
    return {"compress_ratios": [rate[t] for t in cfg["layer_types"]] + mtp,
            "num_hash_layers": sum(t == "hash_moe" for t in cfg["mlp_layer_types"])}


BASE = dict(vocab_size=512, hidden_size=64, moe_intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=1, head_dim=32, q_lora_rank=48, partial_rotary_factor=0.25,
            num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1,
            routed_scaling_factor=1.5, max_position_embeddings=256, rope_theta=10000.0,
            compress_rates={CSA: 4, HCA: 8}, compress_rope_theta=160000.0, hc_mult=4,
            hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=0.6, sliding_window=8,
            o_groups=2, o_lora_rank=16, index_n_heads=4, index_head_dim=16, index_topk=3,
            num_nextn_predict_layers=0, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            initializer_range=0.1, tie_word_embeddings=False)

def fp8_block_quantize_pow2(w):
    """As make_model_fixtures.fp8_block_quantize, with each 128x128 block's scale
    rounded up to a power of two (DeepSeek-V4's ue8m0 scale_fmt), so it is exact
    as an E8M0 byte."""
    import math
    import torch
    out_f, in_f = w.shape
    bo, bi = -(-out_f // 128), -(-in_f // 128)
    scale = torch.zeros(bo, bi, dtype=torch.float32)
    q = torch.zeros(out_f, in_f, dtype=torch.float8_e4m3fn)
    for i in range(bo):
        for j in range(bi):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = float(blk.abs().max().clamp(min=1e-12))
            s = 2.0 ** math.ceil(math.log2(amax / 448.0))
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def mxfp4_quantize(w):
    """float32 [rows, cols] -> (I8 codes [rows, cols/2], two e2m1 codes a byte with
    the low nibble first; F8_E8M0 scales [rows, cols/32], the smallest power of
    two putting each 32's largest magnitude within e2m1's 6; the dequantized
    float32 [rows, cols]), the layout DeepSeek-V4-Flash ships its routed experts
    in (and llama.cpp's converter reads: repack_mxfp4_blocks)."""
    import torch
    rows, cols = w.shape
    table = torch.tensor(E2M1)
    g = w.reshape(rows, cols // 32, 32)
    e = torch.ceil(torch.log2(g.abs().amax(-1).clamp(min=2.0 ** -100) / 6.0))
    scale = torch.exp2(e)
    codes = ((g / scale[..., None])[..., None] - table).abs().argmin(-1).reshape(rows, cols)
    deq = (table[codes].reshape(rows, cols // 32, 32) * scale[..., None]).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    e8 = (e + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
    return packed.view(torch.int8).contiguous(), e8.contiguous(), deq.contiguous()


def check_mxfp4_against_gguf(codes, e8, deq):
    """The codes as llama.cpp reads them: its converter's repack to GGML's
    block_mxfp4 (repack_mxfp4_blocks in vendor/llama.cpp/conversion/base.py of
    the pinned llama-cpp-python sdist), dequantized by gguf-py, must give deq
    exactly: the nibble order and the scale's bias are llama.cpp's as well."""
    import textwrap
    import numpy as np
    import torch
    import gguf
    text = (mmf.llama_cpp_source() / "conversion" / "base.py").read_text()
    start = text.index("    def repack_mxfp4_blocks(")
    body = textwrap.dedent(text[start:text.index("\n    def ", start + 10)])
    ns = {"np": np, "torch": torch, "Tensor": torch.Tensor}
    exec(body, ns)
    blocks = ns["repack_mxfp4_blocks"](codes, e8)
    got = gguf.quants.dequantize(np.asarray(blocks).reshape(codes.shape[0], -1),
                                 gguf.GGMLQuantizationType.MXFP4)
    if not np.array_equal(got.reshape(deq.shape), deq.numpy()):
        raise SystemExit("MXFP4 packing differs from llama.cpp's reading of it")


def release_name(k):
    """save_pretrained's name (DeepSeek's layout under "model.") as DeepSeek's
    release stores it. save_pretrained reverses transformers' renaming of
    "attn.kv_norm" to "self_attn.kv_norm" into "attn.norm" (its mapping renames
    every ".norm." to ".kv_norm."): the release says "attn.kv_norm", as
    llama.cpp's converter expects."""
    k = k.replace(".attn.norm.", ".attn.kv_norm.")
    top = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight",
           "model.hc_head.hc_fn": "hc_head_fn", "model.hc_head.hc_base": "hc_head_base",
           "model.hc_head.hc_scale": "hc_head_scale"}
    if k in top:
        return top[k]
    return k[len("model."):] if k.startswith("model.layers.") else k


def randomize(model, config, torch):
    """Weights that exercise every term: norms 1 + N(0, 0.2), learned sinks,
    position biases, mHC bases and scales away from their neutral inits, a
    correction bias, and a tid2eid table of distinct random experts per token."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            elif pname.endswith("position_bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif pname.endswith(("attn_hc.base", "ffn_hc.base", "hc_head.hc_base")):
                p.copy_(0.5 * torch.randn_like(p))
            elif pname.endswith(("attn_hc.scale", "ffn_hc.scale", "hc_head.hc_scale")):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith(("o_b_proj.weight", "down_proj")):
                p.mul_(3.0)  # louder layer outputs: less repetitive greedy tokens
        for bname, b in model.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
            elif bname.endswith("tid2eid"):
                k, e = config.num_experts_per_tok, config.n_routed_experts
                rows = [torch.randperm(e)[:k] for _ in range(config.vocab_size)]
                b.copy_(torch.stack(rows).to(b.dtype))


# Prefixes of the prompt + greedy sequence whose chained MTP drafts the
# reference records (the drafter test's requests), and the drafts each.
MTP_PREFIXES = [3, 8, 16, 25, 37, 46]
MTP_DRAFTS = 4


def mtp_parts(config, torch):
    """The MTP layer's glue modules (uninitialised): enorm, hnorm and norm
    RMSNorms, e_proj and h_proj, an mHC head of its own."""
    from torch import nn
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import (DeepseekV4HyperHead,
                                                                      DeepseekV4RMSNorm)
    E, eps = config.hidden_size, config.rms_norm_eps
    return nn.ModuleDict({"enorm": DeepseekV4RMSNorm(E, eps=eps),
                          "hnorm": DeepseekV4RMSNorm(E, eps=eps),
                          "norm": DeepseekV4RMSNorm(E, eps=eps),
                          "e_proj": nn.Linear(E, E, bias=False),
                          "h_proj": nn.Linear(E, E, bias=False),
                          "hc_head": DeepseekV4HyperHead(config)}).to(torch.float32)


def make_mtp(config, cfg_args, seed, torch):
    """The MTP layer's modules from a fixed seed: the block is layer L of a
    DeepseekV4ForCausalLM one layer longer (its L-th layer a sliding-window one
    with scored MoE, as llama.cpp's deepseek4 graph runs DeepSeek-V4's MTP
    block), initialised and randomized as the main model is; enorm, hnorm and
    norm RMSNorms, e_proj and h_proj, and an mHC head of its own (mtp_parts)."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    torch.manual_seed(seed + 17)
    L = config.num_hidden_layers
    ext = dict(cfg_args, layer_types=list(config.layer_types) + [SW],
               mlp_layer_types=list(config.mlp_layer_types) + ["moe"], num_hidden_layers=L + 1)
    ext_config = DeepseekV4Config(**ext)
    ext_config._attn_implementation = "eager"
    big = DeepseekV4ForCausalLM(ext_config).to(torch.float32).eval()
    randomize(big, ext_config, torch)
    std = config.initializer_range
    parts = mtp_parts(config, torch)
    with torch.no_grad():
        for pname, p in parts.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("hc_base"):
                p.copy_(0.5 * torch.randn_like(p))
            elif pname.endswith("hc_scale"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(std * torch.randn_like(p))
    return big, parts


def mtp_from(deq, mtp, L, folder, torch):
    """(big, parts) of make_mtp with the weights in deq (the dequantized
    checkpoint: the block as model.layers.L.*, the glue as mtp.0.*): big read
    back from folder by from_pretrained, as the main model is."""
    import safetensors.torch
    from transformers import DeepseekV4ForCausalLM
    big, parts = mtp
    folder.mkdir()
    big.config.save_pretrained(folder)
    safetensors.torch.save_file({k: v for k, v in deq.items() if not k.startswith("mtp.")},
                                folder / "model.safetensors", metadata={"format": "pt"})
    big = DeepseekV4ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    big.config._attn_implementation = "eager"
    with torch.no_grad():
        for k in ("enorm", "hnorm", "norm", "e_proj", "h_proj"):
            parts[k].weight.copy_(deq[f"mtp.0.{k}.weight"])
        for k in ("fn", "base", "scale"):
            getattr(parts["hc_head"], f"hc_{k}").copy_(deq[f"mtp.0.hc_head_{k}"])
    return big, parts


def mtp_saved(big, parts, L, torch):
    """The MTP layer's tensors: the block's as save_pretrained names layer L
    ("model.layers.L.*"), and its glue as DeepSeek's release names it:
    mtp.0.{e_proj,h_proj,enorm,hnorm,norm}.weight, mtp.0.hc_head_{fn,base,scale}."""
    import tempfile
    import safetensors.torch
    with tempfile.TemporaryDirectory() as tmp:
        big.save_pretrained(tmp, safe_serialization=True)
        saved = safetensors.torch.load_file(pathlib.Path(tmp) / "model.safetensors")
    out = {k: v.contiguous() for k, v in saved.items() if k.startswith(f"model.layers.{L}.")}
    for k in ("enorm", "hnorm", "norm", "e_proj", "h_proj"):
        out[f"mtp.0.{k}.weight"] = parts[k].weight.detach().clone().contiguous()
    head = parts["hc_head"]
    for k in ("fn", "base", "scale"):
        out[f"mtp.0.hc_head_{k}"] = getattr(head, f"hc_{k}").detach().clone().contiguous()
    return out


def mtp_name(k, L):
    """A name of mtp_saved's (or release_name's of it) as the release stores
    it: the block's layer L renamed mtp.0."""
    for pre in (f"model.layers.{L}.", f"layers.{L}."):
        if k.startswith(pre):
            return "mtp.0." + k[len(pre):]
    return k


def mtp_tensors(big, parts, L, torch):
    """The MTP layer as DeepSeek's release stores it (mtp_saved, the block
    under "mtp.0." with release_name's fix of attn.norm)."""
    return {mtp_name(release_name(k), L): v for k, v in mtp_saved(big, parts, L, torch).items()}


def last_streams(model, ids, torch):
    """The main model's hidden streams after its last layer [S, hc, E] (the
    MTP layer's input; before the mHC head and the final norm)."""
    got = []
    hook = model.model.layers[-1].register_forward_hook(lambda m, i, o: got.append(o))
    with torch.no_grad():
        model(ids, use_cache=False)
    hook.remove()
    return got[0][0]


def mtp_run(model, big, parts, streams, tokens, torch):
    """The MTP layer over pairs in one pass (no cache, a causal sliding-window
    mask): pair i joins streams[i] [hc, E] and the embedding of tokens[i], at
    position i + 1 (llama.cpp's deepseek4 MTP graph: DeepSeek-V4's
    x = e_proj(enorm(e)) + h_proj(hnorm(h)) on every stream, the block, then
    norm(hc_head(x)) and the main model's LM head). Returns the logits [n, V]
    and the block's output streams [n, hc, E] (the next chained step's h)."""
    from transformers.masking_utils import create_sliding_window_causal_mask
    L = model.config.num_hidden_layers
    tok = torch.tensor([tokens])
    with torch.no_grad():
        e = model.model.embed_tokens(tok)
        x = parts["e_proj"](parts["enorm"](e)).unsqueeze(2) + \
            parts["h_proj"](parts["hnorm"](streams.unsqueeze(0)))
        pos = torch.arange(1, len(tokens) + 1).unsqueeze(0)
        mask = create_sliding_window_causal_mask(config=big.config, inputs_embeds=e,
                                                 attention_mask=None, cache=None, position_ids=pos)
        pe = {t: big.model.rotary_emb(e, position_ids=pos, layer_type=t)
              for t in ("main", "compress")}
        out = big.model.layers[L](x, position_embeddings=pe, position_ids=pos,
                                  attention_mask=mask, input_ids=tok, cache=None)
        logits = model.lm_head(parts["norm"](parts["hc_head"](out)))
    return logits[0].to(torch.float32), out[0]


def mtp_reference(model, big, parts, seq, torch):
    """MTP logits over the whole sequence (row i: streams of token i, token
    i + 1; it drafts token i + 2), and for each of MTP_PREFIXES the chained
    drafts: draft 0 the argmax of the prefix's last row, draft j the argmax of
    the module run again with the pair (its own output streams, draft j - 1)
    appended, as llama.cpp's MTP drafting chains (and deepinfer's drafter)."""
    import numpy as np
    streams = last_streams(model, torch.tensor([seq]), torch)
    logits, _ = mtp_run(model, big, parts, streams[:-1], seq[1:], torch)
    drafts, margins = [], []
    for P in MTP_PREFIXES:
        h, toks = streams[:P], list(seq[1:P + 1])
        row = []
        for j in range(MTP_DRAFTS):
            lg, out = mtp_run(model, big, parts, h, toks, torch)
            top2 = lg[-1].topk(2).values
            margins.append(float(top2[0] - top2[1]))
            d = int(lg[-1].argmax())
            row.append(d)
            h = torch.cat([h, out[-1:]], dim=0)
            toks.append(d)
        drafts.append(row)
    return logits.numpy().astype(np.float32), drafts, min(margins)


def llama_cpp_mtp_logits(path, streams, tokens, vocab):
    """llama.cpp's MTP logits (llama-cpp-python's MTP context on the MTP GGUF
    path, every pair in one batch): pair i is tokens[i + 1] at position i + 1
    with streams[i] [hc, n_embd] as its hidden state. [len - 1, vocab]."""
    import ctypes
    import numpy as np
    import llama_cpp as lc
    n, W = len(tokens), streams.shape[1] * streams.shape[2]
    h = np.ascontiguousarray(streams.reshape(n, W).numpy(), dtype=np.float32)
    quiet = lc.llama_log_callback(lambda level, text, user: None)  # (kept alive below)
    lc.llama_log_set(quiet, None)
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    mp.load_mtp = True
    lm = lc.llama_model_load_from_file(str(path).encode(), mp)
    cp = lc.llama_context_default_params()
    cp.ctx_type = lc.LLAMA_CONTEXT_TYPE_MTP
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
    ctx = lc.llama_init_from_model(lm, cp)
    assert lm and ctx, "llama.cpp did not load the MTP GGUF"
    batch = lc.llama_batch_ext_init(ctx)
    for i in range(n - 1):
        idx = lc.llama_batch_ext_add_token(batch, 0, tokens[i + 1])
        pos = lc.llama_pos(i + 1)
        ok = idx == i and lc.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
        row = lc.llama_embd(h[i:].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, W)
        ok = ok and lc.llama_batch_ext_set_embd_token(batch, idx, row)
        assert ok and lc.llama_batch_ext_set_output_logits(batch, idx, True)
    assert lc.llama_process(ctx, lc.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
    got = np.stack([np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(vocab,)).copy()
                    for i in range(n - 1)])
    lc.llama_batch_ext_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(lm)
    del quiet
    return got


def mtp_llama_cpp_check():
    """The MTP reference (mtp_run, the oracle of dsv4-mtp-f32's mtp_logits)
    against an independent implementation: llama.cpp's deepseek4 MTP graph
    (llama-cpp-python 0.3.36, an MTP context on the GGUF its converter writes
    with --mtp). A release-layout checkpoint as dsv4-gguf-release is (MXFP4
    experts, bf16 otherwise) with an MTP layer; both run the MTP layer on the
    same input streams (transformers' main model on the dequantized weights)
    and the same dequantized weights. Prints the agreement; exits non-zero
    when it is no better than llama.cpp's usual rounding allows."""
    import tempfile
    import numpy as np
    import safetensors.torch
    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    overrides = dict(DSV4["dsv4-gguf-release"][0])  # (with an MTP layer)
    cfg_args = dict(BASE, **overrides)
    n_prompt = cfg_args.pop("n_prompt")
    cfg_args["num_hidden_layers"] = len(cfg_args["layer_types"])
    config = DeepseekV4Config(**cfg_args)
    config._attn_implementation = "eager"
    seed = 4321
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()
    randomize(model, config, torch)
    mtp = make_mtp(config, cfg_args, seed, torch)
    L = config.num_hidden_layers
    scratch = tempfile.TemporaryDirectory()
    tmp = pathlib.Path(scratch.name)
    model.save_pretrained(tmp / "main", safe_serialization=True)
    saved = safetensors.torch.load_file(tmp / "main" / "model.safetensors")
    saved.update(mtp_saved(*mtp, L, torch))
    state, deq = {}, {}
    for k, v in saved.items():  # experts MXFP4 (release codes and scales), the rest bf16
        release = mtp_name(release_name(k), L)
        if ".ffn.experts." in k and k.endswith(".weight") and v.dim() == 2:
            codes, e8, dq = mxfp4_quantize(v.to(torch.float32))
            state[release], state[release[:-len("weight")] + "scale"], deq[k] = codes, e8, dq
        elif v.is_floating_point():
            state[release] = v.to(torch.bfloat16).contiguous()
            deq[k] = v.to(torch.bfloat16).to(torch.float32).contiguous()
        else:
            state[release] = deq[k] = v.contiguous()
    rel = tmp / "dsv4-mtp-release"
    rel.mkdir()
    safetensors.torch.save_file(state, rel / "model.safetensors", metadata={"format": "pt"})
    cfg_json = json.loads((tmp / "main" / "config.json").read_text())
    cfg_json.update(release_config_keys(cfg_json))  # (with the MTP layer's ratio)
    cfg_json["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                       "activation_scheme": "dynamic",
                                       "weight_block_size": [128, 128]}
    (rel / "config.json").write_text(json.dumps(cfg_json))
    # the reference on the dequantized weights
    (tmp / "deq").mkdir()
    safetensors.torch.save_file(
        {k: v for k, v in deq.items() if not k.startswith((f"model.layers.{L}.", "mtp."))},
        tmp / "deq" / "model.safetensors", metadata={"format": "pt"})
    (tmp / "deq" / "config.json").write_text((tmp / "main" / "config.json").read_text())
    model = DeepseekV4ForCausalLM.from_pretrained(tmp / "deq", dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    big, parts = mtp_from(deq, mtp, L, tmp / "big", torch)
    g = torch.Generator().manual_seed(seed + 1)
    seq = torch.randint(3, config.vocab_size, (n_prompt,), generator=g).tolist()
    streams = last_streams(model, torch.tensor([seq]), torch)
    want = mtp_run(model, big, parts, streams[:-1], seq[1:], torch)[0].numpy()
    # llama.cpp: its converter's MTP GGUF, an MTP context, every pair in one batch
    gguf_path = tmp / "mtp.gguf"
    mmf.convert_checkpoint(rel, gguf_path, "bf16", extra_args=["--mtp"])
    got = llama_cpp_mtp_logits(gguf_path, streams, seq, config.vocab_size)
    n = len(seq)
    span = float(want.max() - want.min())
    diff = np.abs(got - want)
    agree = float((got.argmax(1) == want.argmax(1)).mean())
    # (llama.cpp rounds activations to bf16/f16: on the main model against
    # transformers its max is 0.13 of the range and its argmax agreement 0.94)
    good = diff.max() / span <= 0.05 and agree >= 0.9
    print(f"{'ok' if good else 'FAIL'}: the MTP reference vs llama.cpp's deepseek4 MTP graph, "
          f"{n - 1} pairs: max |diff| {diff.max() / span:.2e} of the logit range, mean "
          f"{diff.mean() / span:.2e}, argmax agreement {agree:.3f}")
    if not good:
        sys.exit(1)


def make_dsv4(name):
    import numpy as np
    import safetensors
    import safetensors.torch
    import torch
    import transformers
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    overrides, dtype, salt = DSV4[name]
    seed = sum(name.encode()) * 7919 + salt
    torch.manual_seed(seed)
    cfg_args = dict(BASE, **overrides)
    n_prompt = cfg_args.pop("n_prompt", N_PROMPT)
    cfg_args["num_hidden_layers"] = len(cfg_args["layer_types"])
    config = DeepseekV4Config(**cfg_args)
    config._attn_implementation = "eager"
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()
    randomize(model, config, torch)
    mtp = make_mtp(config, cfg_args, seed, torch) if cfg_args["num_nextn_predict_layers"] else None
    out = mmf.OUT / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors"):
        old.unlink()
    # save_pretrained writes DeepSeek's release names (layers.N.attn.wq_a,
    # ffn.experts.E.w1, ...) under "model."; the reference is the model
    # from_pretrained reads back, so it runs on exactly the stored weights.
    if dtype in ("fp8", "fp8-ue8m0", "mxfp4", "mxfp4-bf16"):
        import tempfile
        tmp = tempfile.TemporaryDirectory()
        model.save_pretrained(tmp.name, safe_serialization=True)
        saved = safetensors.torch.load_file(pathlib.Path(tmp.name) / "model.safetensors")
        L = config.num_hidden_layers
        if mtp:  # the MTP block as layer L (quantized as a layer is), then renamed mtp.0.*
            saved.update(mtp_saved(*mtp, L, torch))
        state, deq = {}, {}
        for k, v in sorted(saved.items()):
            if (v.dim() == 2 and k.endswith(".weight") and ".layers." in k and ".compressor." not in k
                    and "weights_proj" not in k and ".gate.weight" not in k and "norm" not in k
                    and (dtype != "mxfp4-bf16" or ".ffn.experts." in k)):
                ue8m0 = dtype in ("fp8-ue8m0", "mxfp4")
                if dtype in ("mxfp4", "mxfp4-bf16") and ".ffn.experts." in k:
                    codes, e8, dq = mxfp4_quantize(v.to(torch.float32))
                    check_mxfp4_against_gguf(codes, e8, dq)
                    state[k] = codes
                    state[k[:-len("weight")] + "scale"] = e8
                    deq[k] = dq
                    continue
                q, sc = fp8_block_quantize_pow2(v.to(torch.float32)) if ue8m0 else \
                    mmf.fp8_block_quantize(v.to(torch.float32))
                state[k] = q.contiguous()
                if not ue8m0:
                    state[k + "_scale_inv"] = sc.contiguous()
                elif ".experts." in k and dtype == "fp8-ue8m0":
                    state[k[:-len("weight")] + "scale"] = sc.contiguous()
                else:
                    state[k[:-len("weight")] + "scale"] = sc.to(torch.float8_e8m0fnu).contiguous()
                deq[k] = mmf.fp8_dequantize(q, sc).contiguous()
            elif v.is_floating_point():
                state[k] = v.to(torch.bfloat16).contiguous()
                deq[k] = v.to(torch.bfloat16).to(torch.float32).contiguous()
            else:
                state[k] = deq[k] = v.contiguous()
        if dtype in ("fp8-ue8m0", "mxfp4", "mxfp4-bf16"):
            state = {release_name(k): v for k, v in state.items()}
        state = {mtp_name(k, L): v for k, v in state.items()}
        safetensors.torch.save_file(state, out / "model.safetensors", metadata={"format": "pt"})
        safetensors.torch.save_file(
            {k: v for k, v in deq.items() if not k.startswith((f"model.layers.{L}.", "mtp."))},
            pathlib.Path(tmp.name) / "model.safetensors", metadata={"format": "pt"})
        if mtp:  # the MTP layer on its dequantized weights, for the reference
            mtp = mtp_from(deq, mtp, L, pathlib.Path(tmp.name) / "big", torch)
        ref_dir = tmp.name
        cfg_json = json.loads((pathlib.Path(tmp.name) / "config.json").read_text())
        cfg_json["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                           "activation_scheme": "dynamic",
                                           "weight_block_size": [128, 128]}
        if dtype in ("fp8-ue8m0", "mxfp4", "mxfp4-bf16"):
            cfg_json["quantization_config"]["scale_fmt"] = "ue8m0"
            cfg_json.update(release_config_keys(cfg_json))
        cfg_json["dtype"] = "bfloat16"
        (out / "config.json").write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")
    else:
        model.to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)
        ref_dir = out
        if mtp:  # the MTP layer's tensors beside the model's, as the release ships them
            path = out / "model.safetensors"
            state = safetensors.torch.load_file(path)
            state.update(mtp_tensors(*mtp, config.num_hidden_layers, torch))
            safetensors.torch.save_file(state, path, metadata={"format": "pt"})
    (out / "generation_config.json").unlink(missing_ok=True)
    model = DeepseekV4ForCausalLM.from_pretrained(ref_dir, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"

    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(3, config.vocab_size, (n_prompt,), generator=g).tolist()
    ids = torch.tensor([prompt])
    margins = []

    def router_margin(mod, inp, outp):
        # The gap at the top-k boundary of the scores a scored router ranks by
        # (hash routers choose by table).
        if not hasattr(mod, "e_score_correction_bias"):
            return
        sc = mod.score_fn(outp[0]) + mod.e_score_correction_bias
        top = sc.topk(config.num_experts_per_tok + 1, dim=-1).values
        margins.append(float((top[:, -2] - top[:, -1]).min()))

    index_margins = []

    def index_margin(mod, inp, outp):
        # The lightning indexer's gap between its k-th and (k+1)-th choice for
        # every query that sees more than k entries: a tie there (ReLU makes
        # exact zeros common) is broken differently by any two top-k kernels.
        scores, rate, k = outp[0], config.compress_rates[CSA], config.index_topk
        pos = torch.arange(scores.shape[0]) + scores_offset[0]
        for t in range(scores.shape[0]):
            valid = int((pos[t] + 1) // rate)
            valid = min(valid, scores.shape[1])
            if valid > k:
                top = scores[t, :valid].topk(k + 1).values
                index_margins.append(float(top[-2] - top[-1]))

    scores_offset = [0]
    hooks = [layer.mlp.gate.register_forward_hook(router_margin) for layer in model.model.layers]
    hooks += [layer.self_attn.compressor.indexer.scorer.register_forward_hook(index_margin)
              for layer in model.model.layers
              if layer.self_attn.compressor is not None and hasattr(layer.self_attn.compressor, "indexer")]
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits[0].to(torch.float32).numpy()
        gen = model.generate(ids, do_sample=False, max_new_tokens=N_GREEDY,
                             min_new_tokens=N_GREEDY, pad_token_id=0, eos_token_id=None)
        index_margins.clear()  # the one-pass run below covers every query
        seq_logits = model(gen, use_cache=False).logits[0].to(torch.float32).numpy()
    for h in hooks:
        h.remove()
    greedy = gen[0, n_prompt:].tolist()
    extra = {}
    if mtp:
        mtp_logits, drafts, margin = mtp_reference(model, *mtp, gen[0].tolist(), torch)
        mtp_logits.astype("<f4").tofile(out / "mtp_logits.f32")
        extra = {"mtp_logits_file": "mtp_logits.f32",
                 "mtp_logits_shape": list(mtp_logits.shape),
                 "mtp": "the MTP layer (mtp.0.*) as llama.cpp's deepseek4 MTP graph computes "
                        "DeepSeek-V4's: transformers' DeepseekV4DecoderLayer (sliding window, "
                        "scored MoE) on e_proj(enorm(e)) + h_proj(hnorm(h)) per stream, "
                        "norm(hc_head(x)), the LM head; row i: streams of token i and token "
                        "i + 1 at position i + 1",
                 "mtp_chain": {"prefixes": MTP_PREFIXES, "drafts": drafts,
                               "min_top2_margin": round(margin, 6)}}
    logits.astype("<f4").tofile(out / "logits.f32")
    seq_logits.astype("<f4").tofile(out / "sequence_logits.f32")
    files = sorted(p.name for p in out.glob("*.safetensors"))
    ref = {
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": type(model).__name__,
        "storage_dtype": "float8_e4m3fn (128x128 block scales; norms, mHC, router, embeddings, "
                         "compressor and indexer projections bf16)" if dtype == "fp8" else dtype,
        "compute_dtype": "float32",
        "seed": seed,
        "files": files,
        "config": json.loads((out / "config.json").read_text()),
        "prompt": prompt,
        "logits_file": "logits.f32",
        "logits_shape": [n_prompt, config.vocab_size],
        "argmax": np.argmax(logits, axis=1).tolist(),
        "greedy": greedy,
        "router_min_margin": round(min(margins), 6) if margins else None,
        # Smallest gap between the indexer's k-th and (k+1)-th score over the
        # whole sequence (CSA layers; none: null).
        "index_min_margin": round(min(index_margins), 6) if index_margins else None,
        "sequence_logits_file": "sequence_logits.f32",
        "sequence_logits_shape": [n_prompt + N_GREEDY, config.vocab_size],
        **extra,
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__,
                   "attn_implementation": "eager"},
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {size} bytes, router margin {ref['router_min_margin']}, "
          f"index margin {ref['index_min_margin']}, "
          f"greedy {greedy[:8]}... argmax {ref['argmax'][:8]}")


def main(argv):
    if argv[:1] == ["--mtp-llama-cpp"]:
        mtp_llama_cpp_check()
        return
    mmf.fixtures_main(argv, DSV4, make_dsv4, "DeepSeek-V4")


if __name__ == "__main__":
    main(sys.argv[1:])
