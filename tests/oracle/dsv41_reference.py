#!/usr/bin/env python3
"""DeepSeek-V4.1's text model as dense PyTorch: the executable reference for tiny
checkpoints (docs/deepseek-v41.md says what it computes and where each part comes from).

No library runs V4.1 on a CPU: DeepSeek's own engine (DeepInfer 0.1.0, PyPI) calls GPU
kernels in every forward. This module re-derives its dense meaning, and
check_dsv41_ops.py holds each part to the public PyTorch references of those kernels
(tile-kernels 2.1.0's tile_kernels/torch, deepinfer-gemm 2.8.2's tests, DeepInfer's own
*_ref functions). Everything here is float32 on the checkpoint's weights dequantized.

What it runs: the hf_shifted mHC (the pre mix of each sub-layer is the one the previous
sub-layer computed; no HC head), sliding-window attention with per-head sinks on every
layer, compressed KV at ratios 1 and 2 (no overlap, no position bias) with the lightning
indexer whose keys KProject makes from the compressor's pre-RoPE output, cross-layer
sharing of the compressed KV, the indexer keys and the top-k (the config's *_source_layer_ids),
YOCO (the KV sources after n_prefill_layer project from the first consumer's normed
hidden), the grouped output projection, sqrtsoftplus MoE with a shared expert and the
SwiGLU clamp, and Engram (hashed n-gram embeddings over the tokenizer's compressed
vocabulary, gated into the residual streams before an attention sub-layer: DeepInfer's
engram_metadata.py and tile-kernels' engram_hash_ref run as they are, the gate is
engram_gate_ref's in float32), and the candidate-block top-k (candidate_source_layer_id:
the source's block maxima of its indexer logits pick candidate_topk_blocks blocks, the
last visible one always among them, and each later layer with its own indexer takes its
top-k among the visible entries of those blocks: DeepInfer's index_attn.py with
candidate_blocks.py's *_ref). Not here: the DSpark head (mtp.N.*, the compress_ratios
entries after the main layers: dsv41_dspark_reference.py runs it on this model's
attention-input streams) and images (vision_config): the text model's logits do not
depend on them.

    reference = V41Reference.load(folder)
    logits = reference.forward(token_ids)        # [T, vocab], every position
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F


class Unsupported(ValueError):
    """A config or checkpoint this reference does not run, with the field named."""


def need_positive(t, keys):
    """Each of keys in the config dict t is a positive integer, else Unsupported naming it."""
    for key in keys:
        if not isinstance(t.get(key), int) or t[key] < 1:
            raise Unsupported(f"{key}: {t.get(key)!r} (a positive integer)")


def source_map(source_ids, n_layer, field):
    """Each layer from the first source on -> the nearest source at or before it
    (DeepInfer's hugging_face/config.py _source_map); other layers are their own."""
    ids = sorted(source_ids)
    if any(not isinstance(i, int) or i < 0 or i >= n_layer for i in ids):
        raise Unsupported(f"{field}: {source_ids} names a layer outside 0..{n_layer - 1}")
    out = list(range(n_layer))
    for layer in range(ids[0] if ids else n_layer, n_layer):
        out[layer] = max(s for s in ids if s <= layer)
    return out


class V41Config:
    """The text config of a deepseek_v41 config.json, with DeepInfer's defaults for
    what the file does not say (hc_post_mult_value 2, hc_shifted True)."""

    def __init__(self, hf):
        if hf.get("model_type") != "deepseek_v41":
            raise Unsupported(f"model_type: {hf.get('model_type')!r}, expected 'deepseek_v41'")
        t = hf["text_config"]
        self.n_layer = t["num_hidden_layers"]
        self.hidden = t["hidden_size"]
        self.vocab = t["vocab_size"]
        self.n_head = t["num_attention_heads"]
        self.head_dim = t["head_dim"]
        self.rope_dim = t["qk_rope_head_dim"]
        self.q_lora_rank = t["q_lora_rank"]
        self.o_lora_rank = t["o_lora_rank"]
        self.o_groups = t["o_groups"]
        self.window = t["sliding_window"]
        self.rope_theta = float(t["rope_theta"])
        self.compress_rope_theta = float(t["compress_rope_theta"])
        self.rope_scaling = t.get("rope_scaling")
        self.eps = t["rms_norm_eps"]
        self.swiglu_limit = t["swiglu_limit"]
        self.tie = t["tie_word_embeddings"]
        if t.get("num_key_value_heads", 1) != 1:
            raise Unsupported(f"num_key_value_heads: {t['num_key_value_heads']}, expected 1")
        ratios = t["compress_ratios"]
        self.n_nextn = t.get("num_nextn_predict_layers", 0) or 0
        if len(ratios) != self.n_layer + self.n_nextn:
            raise Unsupported(f"compress_ratios: {len(ratios)} entries for "
                              f"{self.n_layer} + {self.n_nextn} layers")
        self.ratios = ratios[:self.n_layer]
        for r in self.ratios:
            if r not in (0, 1, 2):
                raise Unsupported(f"compress_ratios: {r} (DeepSeek-V4.1 has 0, 1 and 2)")
        need_positive(t, ("sliding_window", "index_topk", "index_n_heads", "index_head_dim",
                          "hc_mult", "num_experts_per_tok", "n_routed_experts", "o_groups"))
        if not isinstance(t.get("hc_sinkhorn_iters"), int) or t["hc_sinkhorn_iters"] < 1:
            raise Unsupported(f"hc_sinkhorn_iters: {t.get('hc_sinkhorn_iters')!r} (at least 1)")
        r = self.rope_dim
        if not isinstance(r, int) or r < 2 or r % 2 or r > self.head_dim or r > t["index_head_dim"]:
            raise Unsupported(f"qk_rope_head_dim: {r!r} (even, within head_dim and "
                              f"index_head_dim)")
        if t["num_experts_per_tok"] > t["n_routed_experts"]:
            raise Unsupported(f"num_experts_per_tok: {t['num_experts_per_tok']} > "
                              f"n_routed_experts {t['n_routed_experts']}")
        if t.get("attention_bias"):
            raise Unsupported("attention_bias: true")
        if self.rope_scaling is not None and not all(
                k in self.rope_scaling for k in ("factor", "original_max_position_embeddings")):
            raise Unsupported("rope_scaling: needs factor and original_max_position_embeddings")
        self.index_topk = t["index_topk"]
        self.index_heads = t["index_n_heads"]
        self.index_dim = t["index_head_dim"]
        # sharing (DeepInfer's _shared_layer_cfg): only compressed layers carry it
        kv_ids = t.get("kv_source_layer_ids")
        idx_ids = t.get("index_source_layer_ids")
        compressed = [i for i, r in enumerate(self.ratios) if r > 0]
        self.kv_map = source_map(kv_ids if kv_ids is not None else compressed, self.n_layer,
                                 "kv_source_layer_ids")
        self.index_map = source_map(idx_ids if idx_ids is not None else compressed, self.n_layer,
                                    "index_source_layer_ids")
        k_ids = t.get("index_k_source_layer_ids")
        if k_ids is None:  # (absent or null: the KV sources', as the library reads it)
            k_ids = kv_ids
        self.index_k_map = source_map(k_ids if k_ids is not None else compressed, self.n_layer,
                                      "index_k_source_layer_ids")
        for name, m in (("kv", self.kv_map), ("index", self.index_map),
                        ("index_k", self.index_k_map)):
            for layer, src in enumerate(m):
                if src != layer and (self.ratios[layer] == 0 or
                                     self.ratios[layer] != self.ratios[src]):
                    raise Unsupported(f"{name}_source_layer_ids: layer {layer} (ratio "
                                      f"{self.ratios[layer]}) cannot share layer {src}'s "
                                      f"(ratio {self.ratios[src]})")
        # the chain index-topk within index-K within KV (cross_layer.py
        # _validate_index_kv_compatibility): a finer segment never crosses a coarser one
        for fine_name, fine, coarse_name, coarse in (
                ("index", self.index_map, "index_k", self.index_k_map),
                ("index_k", self.index_k_map, "kv", self.kv_map)):
            for layer, src in enumerate(fine):
                if coarse[src] != coarse[layer]:
                    raise Unsupported(f"{fine_name}_source_layer_ids: layer {layer} takes layer "
                                      f"{src}'s, across a {coarse_name} segment")
        # YOCO: the first ratio-1 layer and every layer after it are consumers
        ones = [i for i, r in enumerate(self.ratios) if r == 1]
        self.n_prefill_layer = ones[0] if ones else self.n_layer
        self.hc_mult = t["hc_mult"]
        self.hc_eps = t["hc_eps"]
        self.hc_iters = t["hc_sinkhorn_iters"]
        self.hc_post_mult = 2.0
        if not t.get("hc_shifted", True):
            raise Unsupported("hc_shifted: false (the HC head of unshifted mHC)")
        self.engram_layers = list(t.get("engram_layer_ids") or [])
        if self.engram_layers:
            need_positive(t, ("engram_max_ngram_size", "engram_vocab_size", "engram_n_heads",
                              "engram_head_dim", "engram_compressed_vocab_size"))
            self.engram_max_ngram = t["engram_max_ngram_size"]
            self.engram_table_vocab = t["engram_vocab_size"]
            self.engram_heads = t["engram_n_heads"]
            self.engram_head_dim = t["engram_head_dim"]
            self.engram_compressed = t["engram_compressed_vocab_size"]
            self.engram_pad = t.get("engram_pad_token_id", 2)
            self.engram_tables = (self.engram_max_ngram - 1) * self.engram_heads
        self.candidate_source = None
        if t.get("candidate_source_layer_id") is not None:
            self._candidate_config(t)
        if t["hidden_act"] != "silu":
            raise Unsupported(f"hidden_act: {t['hidden_act']!r}")
        self.moe_inter = t["moe_intermediate_size"]
        self.n_experts = t["n_routed_experts"]
        self.n_shared = t["n_shared_experts"]
        self.top_k = t["num_experts_per_tok"]
        self.scaling = float(t["routed_scaling_factor"])
        if t["scoring_func"] != "sqrtsoftplus":
            raise Unsupported(f"scoring_func: {t['scoring_func']!r} (V4.1 routes by sqrtsoftplus)")
        if not t["norm_topk_prob"]:
            raise Unsupported("norm_topk_prob: false")
        if t["topk_method"] != "noaux_tc":
            raise Unsupported(f"topk_method: {t['topk_method']!r}")

    def _candidate_config(self, t):
        """The candidate-block top-k (DeepInfer's hugging_face/config.py _shared_layer_cfg:
        every layer from candidate_source_layer_id S to the last main layer maps to S;
        topk_block_score_reduce is always "max"), refused as DeepInfer's
        cross_layer.py _validate_candidate_config and index_attn.py MQA.__init__ assert."""
        S = t["candidate_source_layer_id"]
        if not isinstance(S, int) or isinstance(S, bool) or not 0 <= S < self.n_layer:
            raise Unsupported(f"candidate_source_layer_id: {S!r} names no layer of "
                              f"0..{self.n_layer - 1}")
        if self.index_map[S] != S:
            raise Unsupported(f"candidate_source_layer_id: layer {S} takes layer "
                              f"{self.index_map[S]}'s top-k (the candidate source must be an "
                              f"index source of its own)")
        if self.ratios[S] == 0:
            raise Unsupported(f"candidate_source_layer_id: layer {S} is a sliding-window layer "
                              f"(the candidate source must be compressed)")
        for L in range(S + 1, self.n_layer):
            if self.ratios[L] != self.ratios[S]:
                raise Unsupported(f"candidate_source_layer_id: layer {L} after the source {S} "
                                  f"has compress ratio {self.ratios[L]}, layer {S}'s is "
                                  f"{self.ratios[S]} (every later layer must have the source's)")
        nb, bs = t.get("candidate_topk_blocks"), t.get("candidate_block_size")
        if not isinstance(nb, int) or isinstance(nb, bool) or not 0 < nb <= 4096 or nb % 8:
            raise Unsupported(f"candidate_topk_blocks: {nb!r} (a multiple of 8 in 8..4096)")
        if not isinstance(bs, int) or isinstance(bs, bool) or bs not in (8, 16):
            raise Unsupported(f"candidate_block_size: {bs!r} (8 or 16)")
        for L in range(S + 1, self.n_layer):
            # a consumer's block in its own entries (cross_layer.py): the source's block
            # times the ratios' quotient, 16 at most, and NB of them hold its top-k
            block = bs * self.ratios[S] // self.ratios[L]
            if block > 16:
                raise Unsupported(f"candidate_block_size: {bs} entries of layer {S} are {block} "
                                  f"of layer {L} (16 at most)")
            if nb * block < self.index_topk:
                raise Unsupported(f"candidate_topk_blocks: {nb} blocks of {block} entries hold "
                                  f"fewer than index_topk {self.index_topk}")
        consumers = [L for L in range(S + 1, self.n_layer) if self.index_map[L] == L]
        if consumers and nb * bs * 2 % 1024:
            # index_attn.py: the sparse indexer's bf16 logits of the candidate entries, a
            # row of candidate_topk_blocks x candidate_block_size, align to 1024 bytes
            raise Unsupported(f"candidate_topk_blocks: {nb} blocks of {bs} are {nb * bs} "
                              f"candidate entries; DeepInfer's sparse indexer needs a multiple "
                              f"of 512 when a later layer has its own indexer (layer "
                              f"{consumers[0]})")
        self.candidate_source = S
        self.candidate_topk_blocks = nb
        self.candidate_block_size = bs


# ---- weights ---------------------------------------------------------------

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize(name, w, scale, block=(32, 32)):
    """One tensor as float32: bf16/f32 as stored; fp8-e4m3 with an E8M0 scale per
    block of the config's weight_block_size (V4.1: 32x32, the last ones partial:
    [ceil(rows/32), ceil(cols/32)] scales); packed e2m1 (I8, two codes a byte, the
    low nibble first) with an E8M0 scale per 32 values of a row (the routed experts)."""
    if scale is None:
        if w.dtype in (torch.int8, torch.uint8, torch.float8_e4m3fn):
            raise Unsupported(f"{name}: {w.dtype} without its .scale")
        return w.float()
    if scale.dtype not in (torch.float8_e8m0fnu, torch.float32):
        raise Unsupported(f"{name}: scale dtype {scale.dtype} (F8_E8M0 or F32)")
    s = scale.float()
    if w.dtype == torch.float8_e4m3fn:
        rows, cols = w.shape
        br, bc = block
        if s.shape != (-(-rows // br), -(-cols // bc)):
            raise Unsupported(f"{name}: scale {tuple(s.shape)} for {rows}x{cols} in "
                              f"{br}x{bc} blocks")
        full = s.repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
        return w.float() * full
    if w.dtype in (torch.int8, torch.uint8):
        if w.dim() != 2 or s.shape != (w.shape[0], w.shape[1] * 2 // 32):
            raise Unsupported(f"{name}: scale {tuple(s.shape)} for MXFP4 codes "
                              f"{tuple(w.shape)} (one per 32 values of a row)")
        b = w.view(torch.uint8).long()
        codes = torch.stack([b & 15, b >> 4], -1).reshape(w.shape[0], w.shape[1] * 2)
        vals = torch.tensor(E2M1)[codes]
        group = vals.shape[1] // s.shape[1]
        return vals * s.repeat_interleave(group, 1)
    raise Unsupported(f"{name}: dtype {w.dtype} with a scale")


def load_tensors(folder, block=(32, 32)):
    """Every tensor of the folder's safetensors, dequantized, by DeepSeek's release
    name (an optional "model." prefix dropped)."""
    from safetensors.torch import load_file
    raw = {}
    for f in sorted(pathlib.Path(folder).glob("*.safetensors")):
        for k, v in load_file(str(f)).items():
            raw[k[len("model."):] if k.startswith("model.") else k] = v
    out = {}
    for k, v in raw.items():
        if k.endswith(".scale"):
            continue
        scale = raw.get(k[:-len(".weight")] + ".scale") if k.endswith(".weight") else None
        # (Engram's tables: an E8M0 scale per 32 values of a row, engram.py's sf)
        out[k] = dequantize(k, v, scale, (1, 32) if k.endswith("engram.embed.weight") else block)
    return out


# ---- ops (each checked against a public reference in check_dsv41_ops.py) ----

def rms_norm(x, w, eps):
    x = x.float()
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def rope_cos_sin(theta, rope_dim, positions, scaling=None):
    """cos, sin [len(positions), rope_dim/2]: DeepInfer's RotaryEmbedding (base) or
    YaRNScalingRotaryEmbedding with mscale 1 (layers/rotary_embedding.py)."""
    exps = torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim
    inv = 1.0 / theta ** exps
    if scaling is not None:
        factor = scaling["factor"]
        orig = scaling["original_max_position_embeddings"]

        def corr(rot):
            return rope_dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
        low = max(math.floor(corr(scaling["beta_fast"])), 0)
        high = min(math.ceil(corr(scaling["beta_slow"])), rope_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(rope_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        extrapolate = 1 - ramp
        inv = (1.0 / (factor * theta ** exps)) * (1 - extrapolate) + inv * extrapolate
    ang = torch.as_tensor(positions, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin, conjugate=False):
    """Interleaved RoPE (pairs 2i, 2i+1) on the trailing rope_dim values of x [T, ..., d];
    cos, sin [T, rope_dim/2]."""
    r = cos.shape[-1] * 2
    out = x.clone()
    part = x[..., -r:]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (r // 2,)
    c, s = cos.reshape(shape), sin.reshape(shape)
    if conjugate:
        s = -s
    a, b = part[..., 0::2], part[..., 1::2]
    out[..., -r:][..., 0::2] = a * c - b * s
    out[..., -r:][..., 1::2] = a * s + b * c
    return out


def sinkhorn(x, iters, eps):
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def hc_mixes(residual, fn, scale, base, m, norm_eps, pre_eps, post_mult, iters):
    """A sub-layer's mixes from the residual streams [T, m, h]: the pre mix [T, m],
    the post mix [T, m] and the Sinkhorn-normalised combination [T, m, m]
    (tile-kernels mhc_pre_norm_fn_ref, mhc_pre_split_mixes_ref, sinkhorn_normalize_ref;
    fn already holds the norm's weight, as the HF checkpoint stores it)."""
    flat = residual.reshape(residual.shape[0], -1)
    mixes = flat @ fn.t()
    mixes = mixes * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    scales = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)])
    mixes = mixes * scales + base
    pre = mixes[:, :m].sigmoid() + pre_eps
    post = mixes[:, m:2 * m].sigmoid() * post_mult
    comb = sinkhorn(mixes[:, 2 * m:].reshape(-1, m, m), iters, pre_eps)
    return pre, post, comb


def hc_post(x, residual, post, comb):
    """The sub-layer output x [T, h] written back: new[j] = post[j] x + sum_i comb[i, j]
    residual[i] (tile-kernels mhc_post_ref)."""
    return x[:, None, :] * post[:, :, None] + torch.einsum("tij,tih->tjh", comb, residual)


def engram_gate(x, k, v, wh, we, eps, clamp=1e-6):
    """Engram's gate on the streams x [T, m, h] with keys k [T, m, h], value v [T, h]
    and norm weights wh, we [m, h]: x + sigmoid(signed sqrt(<RMSNorm(x) wh, RMSNorm(k) we>
    / sqrt(h))) v (tile-kernels engram_gate_ref, in float32, the clamp 1e-6 of
    EngramEmbedding's clamp_value)."""
    rstd_x = torch.rsqrt(x.square().mean(-1) + eps)
    rstd_k = torch.rsqrt(k.square().mean(-1) + eps)
    dot = (x * wh * k * we).sum(-1) * rstd_x * rstd_k * x.shape[-1] ** -0.5
    gate = (dot.abs().clamp_min(clamp).sqrt() * dot.sign()).sigmoid()
    return x + gate[..., None] * v[:, None, :]


def compress(score, latent, ratio):
    """Ratio-r compressed entries of a sequence's projections [T, d]: entry j is the
    per-channel softmax over tokens jr .. jr + r - 1 of score weighting latent, for
    every complete group (DeepInfer's compress_and_update_state_prefill_ref); ratio 1
    passes the latent through."""
    if ratio == 1:
        return latent
    n, d = latent.shape[0] // ratio, latent.shape[1]
    s = score[:n * ratio].reshape(n, ratio, d)
    v = latent[:n * ratio].reshape(n, ratio, d)
    return (v * s.softmax(1)).sum(1)


def indexer_logits(q, k, w):
    """logits[t, j] = sum_h w[t, h] relu(q[t, h] . k[j]) (deepinfer-gemm ref_mqa_logits)."""
    return torch.einsum("thd,jd->thj", q, k).relu().mul(w[:, :, None]).sum(1)


def top_k(logits, visible, k):
    """The indices of the k largest of logits[:visible] (all of them when fewer),
    the lower index first among equal values (the order of torch.topk on ties is
    not DeepInfer's deep_select's, which no public code pins; the fixtures keep a
    margin at the k-th place so that ties never decide)."""
    if visible <= k:
        return list(range(visible))
    vals = logits[:visible].tolist()
    order = sorted(range(visible), key=lambda j: (-vals[j], j))
    return sorted(order[:k])


BF16_MAX = 3.3895313892515355e38  # torch.finfo(torch.bfloat16).max


def candidate_block_scores(logits, visible, block_size):
    """The candidate source's block scores [T, ceil(n / block_size)] of its indexer
    logits [T, n] and the count of valid blocks of each row: block b holds entries
    b*block_size .. (b+1)*block_size - 1 of those visible (logits[t, :visible[t]]); its
    score is their maximum capped at the largest finite bf16, the last valid block's
    +inf (always chosen), blocks past the valid ones -inf (DeepInfer's
    candidate_block_max_ref, in float32)."""
    T, n = logits.shape
    nb = -(-n // block_size)
    padded = torch.full((T, nb * block_size), -math.inf)
    padded[:, :n] = logits
    cols = torch.arange(nb * block_size)
    padded[cols[None, :] >= torch.as_tensor(visible)[:, None]] = -math.inf
    scores = padded.reshape(T, nb, block_size).amax(-1).clamp(max=BF16_MAX)
    valid = [-(-v // block_size) for v in visible]
    for t, v in enumerate(valid):
        if v:
            scores[t, v - 1] = math.inf
    return scores, valid


def candidate_blocks(scores, valid, n_blocks):
    """The top n_blocks of the valid block scores scores[:valid] (all when fewer), the
    lower block first among equal scores, in increasing block order."""
    return top_k(scores, valid, n_blocks)


def candidate_entries(blocks, visible, block_size):
    """The visible entries (< visible) of the candidate blocks, in increasing order."""
    return [e for b in sorted(blocks) for e in range(b * block_size,
                                                     min((b + 1) * block_size, visible))]


def top_k_within(logits, entries, k):
    """The indices of the k largest logits among entries (all when fewer), the lower
    index first among equal values, in increasing order: the candidate consumer's
    top-k (DeepInfer's sparse logits over the candidate entries compacted, top-k over
    the compact row, restore_candidate_indices_inplace back to entries)."""
    if len(entries) <= k:
        return list(entries)
    vals = logits.tolist()
    order = sorted(entries, key=lambda j: (-vals[j], j))
    return sorted(order[:k])


def sink_attention(q, keys, sink, scale):
    """q [H, d], keys [n, d] (K = V), sink [H]: softmax over the keys' logits with
    exp(sink) added to the denominator, then the weighted keys (FlashMLA's
    ref_sparse_attn_decode)."""
    logits = (q @ keys.t()) * scale
    lse = torch.logsumexp(logits, -1)
    p = torch.exp(logits - lse[:, None])
    out = p @ keys
    return out * (1.0 / (1.0 + torch.exp(sink - lse)))[:, None]


def moe_gate(logits, bias, top_k_, scaling):
    """sqrtsoftplus routing (tile-kernels moe_topk_gate_forward): rank by score + bias
    (stable: the lower expert first on ties), weight by the scores normalised over the
    chosen ones, times routed_scaling_factor."""
    scores = F.softplus(logits).sqrt()
    ranked = torch.sort(scores + bias, dim=1, descending=True, stable=True).indices[:, :top_k_]
    chosen = scores.gather(1, ranked)
    return ranked, chosen / (chosen.sum(-1, keepdim=True) + 1e-20) * scaling


def swiglu(x, w1, w3, w2, limit):
    """w2 (silu(min(x w1, limit)) * clamp(x w3, -limit, limit)) (tile-kernels swiglu_forward)."""
    g = (x @ w1.t()).clamp(max=limit)
    u = (x @ w3.t()).clamp(-limit, limit)
    return (F.silu(g) * u) @ w2.t()


# ---- the model -------------------------------------------------------------

def block_shapes(cfg, p, n_experts):
    """name -> shape of the tensors every decoder block under prefix p ("layers.L." or a
    DSpark stage's "mtp.S.") has: its mHC and norms, the attention without compression
    (a sliding-window layer's), the router and n_experts routed experts, the shared
    expert."""
    h, H, D, m = cfg.hidden, cfg.n_head, cfg.head_dim, cfg.hc_mult
    a, f = p + "attn.", p + "ffn."
    out = {}
    for kind in ("attn", "ffn"):
        out.update({p + f"hc_{kind}_fn": ((2 + m) * m, m * h), p + f"hc_{kind}_base": ((2 + m) * m,),
                    p + f"hc_{kind}_scale": (3,), p + f"{kind}_norm.weight": (h,)})
    out.update({a + "wq_a.weight": (cfg.q_lora_rank, h), a + "q_norm.weight": (cfg.q_lora_rank,),
                a + "wq_b.weight": (H * D, cfg.q_lora_rank), a + "wkv.weight": (D, h),
                a + "kv_norm.weight": (D,), a + "attn_sink": (H,),
                a + "wo_a.weight": (cfg.o_groups * cfg.o_lora_rank, H // cfg.o_groups * D),
                a + "wo_b.weight": (h, cfg.o_groups * cfg.o_lora_rank),
                f + "gate.weight": (n_experts, h), f + "gate.bias": (n_experts,)})
    for e in range(n_experts):
        out.update({f + f"experts.{e}.w1.weight": (cfg.moe_inter, h),
                    f + f"experts.{e}.w3.weight": (cfg.moe_inter, h),
                    f + f"experts.{e}.w2.weight": (h, cfg.moe_inter)})
    if cfg.n_shared:
        out.update({f + "shared_experts.w1.weight": (cfg.moe_inter, h),
                    f + "shared_experts.w3.weight": (cfg.moe_inter, h),
                    f + "shared_experts.w2.weight": (h, cfg.moe_inter)})
    return out


def expected_shapes(cfg):
    """name -> shape of every tensor the text model reads, by the config."""
    h, D, m = cfg.hidden, cfg.head_dim, cfg.hc_mult
    out = {"embed.weight": (cfg.vocab, h), "norm.weight": (h,)}
    if not cfg.tie:
        out["head.weight"] = (cfg.vocab, h)
    for L, ratio in enumerate(cfg.ratios):
        a = f"layers.{L}.attn."
        out.update(block_shapes(cfg, f"layers.{L}.", cfg.n_experts))
        if ratio and cfg.kv_map[L] == L:
            out.update({a + "compressor.wkv.weight": (D, h), a + "compressor.norm.weight": (D,)})
            if ratio == 2:
                out[a + "compressor.wgate.weight"] = (D, h)
        if ratio and cfg.index_map[L] == L:
            out.update({a + "indexer.wq_b.weight": (cfg.index_heads * cfg.index_dim, cfg.q_lora_rank),
                        a + "indexer.weights_proj.weight": (cfg.index_heads, h)})
        if ratio and cfg.index_k_map[L] == L:
            out.update({a + "indexer.wk.weight": (cfg.index_dim, D),
                        a + "indexer.k_norm.weight": (cfg.index_dim,)})
        if L in cfg.engram_layers:
            e = f"layers.{L}.engram."
            out.update({e + "q_weight": (m, h), e + "k_weight": (m, h),
                        e + "wkv.weight": ((m + 1) * h, cfg.engram_tables * cfg.engram_head_dim)})
    return out


class V41Reference:
    def __init__(self, cfg, w):
        self.cfg = cfg
        self.w = w
        if cfg.n_head % cfg.o_groups:
            raise Unsupported(f"o_groups: {cfg.o_groups} does not divide num_attention_heads")
        for name, shape in expected_shapes(cfg).items():
            if name not in w:
                raise Unsupported(f"{name}: missing from the checkpoint")
            if tuple(w[name].shape) != shape:
                raise Unsupported(f"{name}: shape {tuple(w[name].shape)}, the config says {shape}")

    @classmethod
    def load(cls, folder):
        folder = pathlib.Path(folder)
        hf = json.loads((folder / "config.json").read_text())
        block = (hf.get("quantization_config") or {}).get("weight_block_size", [32, 32])
        r = cls(V41Config(hf), load_tensors(folder, tuple(block)))
        if r.cfg.engram_layers:
            r.engram_metadata(folder / "tokenizer.json")
        return r

    def engram_metadata(self, tokenizer):
        """The compressed vocabulary of the folder's tokenizer.json and the layers' hash
        tables, by DeepInfer's own engram_metadata.py (seed 0, as its model builds them)."""
        import make_engram_fixtures
        c = self.cfg
        ns, self.engram_hash_ref = make_engram_fixtures.deepinfer_engram()
        vocab = ns["CompressedVocabulary"](str(tokenizer))
        if len(vocab) != c.engram_compressed:
            raise Unsupported(f"engram_compressed_vocab_size: {c.engram_compressed}, the "
                              f"tokenizer's compressed vocabulary has {len(vocab)}")
        self.engram_lookup = torch.tensor(vocab.old2new, dtype=torch.int64)
        n = c.engram_max_ngram - 1
        ecfg = make_engram_fixtures.AttrDict(
            engram_max_ngram_size=c.engram_max_ngram, engram_layer_ids=c.engram_layers,
            vocab_size=[c.engram_table_vocab] * n, n_head_per_ngram=[c.engram_heads] * n,
            n_embed_per_ngram=[c.engram_heads * c.engram_head_dim] * n,
            enable_tokenizer_compression=False, tokenizer_vocab_size=len(vocab))
        self.engram_map = ns["NgramHashMapping"](ecfg, device="cpu")
        for slot, L in enumerate(c.engram_layers):
            name = f"layers.{L}.engram.embed.weight"
            rows = int(self.engram_map.ngram_vocab_sizes[slot].sum())
            t = self._t(name)
            if t.dim() != 2 or t.shape[1] != c.engram_head_dim or t.shape[0] < rows:
                raise Unsupported(f"{name}: shape {tuple(t.shape)}, the config needs at least "
                                  f"({rows}, {c.engram_head_dim})")

    def engram(self, L, residual, ids):
        """Layer L's Engram on the streams residual [T, m, h] of token ids: each token's
        n-grams (its compressed ID and the max_ngram - 1 before it, the pad's before the
        start) pick one row of each table (engram_hash_ref); their projection gives a key
        per stream and one value, and each stream adds the value gated by
        sigmoid(signed sqrt(<RMSNorm(x) q_weight, RMSNorm(k) k_weight> / sqrt(h)))
        (tile-kernels engram_gate_ref, in float32)."""
        c, e = self.cfg, f"layers.{L}.engram."
        T, m, h = residual.shape
        cid = self.engram_lookup[torch.as_tensor(ids)]
        pad = int(self.engram_lookup[c.engram_pad])
        ngram = torch.full((T, c.engram_max_ngram), pad, dtype=torch.int32)
        for r in range(c.engram_max_ngram):
            ngram[r:, r] = cid[:T - r].to(torch.int32)
        slot = c.engram_layers.index(L)
        mp = self.engram_map
        rows = self.engram_hash_ref(ngram, mp.ngram_multipliers[slot:slot + 1],
                                    mp.ngram_vocab_sizes[slot:slot + 1],
                                    mp.ngram_offsets[slot:slot + 1])[0]
        emb = self._t(e + "embed.weight")[rows.long()].reshape(T, -1)
        kv = (emb @ self._t(e + "wkv.weight").t()).reshape(T, m + 1, h)
        return engram_gate(residual, kv[:, :m], kv[:, m], self._t(e + "q_weight"),
                           self._t(e + "k_weight"), c.eps)

    def _t(self, name, *shape):
        if name not in self.w:
            raise Unsupported(f"{name}: missing from the checkpoint")
        if shape and tuple(self.w[name].shape) != shape:
            raise Unsupported(f"{name}: shape {tuple(self.w[name].shape)}, the config says {shape}")
        return self.w[name]

    def _rope(self, layer, positions):
        c = self.cfg
        if c.ratios[layer] > 0:
            return rope_cos_sin(c.compress_rope_theta, c.rope_dim, positions, c.rope_scaling)
        return rope_cos_sin(c.rope_theta, c.rope_dim, positions)

    def attention(self, L, y, shared_hidden, state, trace):
        """One layer's attention on the normed hidden y [T, h]. state carries what the
        source layers made for their consumers: the compressed entries and their
        pre-RoPE form (kv), the indexer keys (index_k), the top-k (topk) and the
        candidate source's visible entries of its candidate blocks (candidates). trace,
        when given, gets ("index", L, logits, visible[, candidates]) of each index source
        (candidates: the entries a candidate consumer chose among) and ("candidate", L,
        block scores, valid blocks, chosen blocks) of the candidate source."""
        c, p = self.cfg, f"layers.{L}.attn."
        T = y.shape[0]
        pos = torch.arange(T)
        cos, sin = self._rope(L, pos)
        ratio = c.ratios[L]
        q_a = rms_norm(y @ self._t(p + "wq_a.weight").t(), self._t(p + "q_norm.weight"), c.eps)
        q = (q_a @ self._t(p + "wq_b.weight").t()).reshape(T, c.n_head, c.head_dim)
        q = rope(q, cos, sin)
        kv = rms_norm(y @ self._t(p + "wkv.weight").t(), self._t(p + "kv_norm.weight"), c.eps)
        kv = rope(kv, cos, sin)
        sink = self._t(p + "attn_sink")
        selected = [[] for _ in range(T)]
        entries = None
        if ratio > 0:
            if c.kv_map[L] == L:
                src = shared_hidden if L >= c.n_prefill_layer else y
                latent = src @ self._t(p + "compressor.wkv.weight").t()
                score = src @ self._t(p + "compressor.wgate.weight").t() if ratio == 2 else None
                pre = rms_norm(compress(score, latent, ratio), self._t(p + "compressor.norm.weight"),
                               c.eps)
                pc = torch.arange(pre.shape[0]) * ratio
                ccos, csin = self._rope(L, pc)
                state["kv"] = (pre, rope(pre, ccos, csin), pc)
            pre, entries, pc = state["kv"]
            visible = [(t + 1) // ratio for t in range(T)]
            if c.index_map[L] == L:
                if c.index_k_map[L] == L:
                    k = rms_norm(pre @ self._t(p + "indexer.wk.weight").t(),
                                 self._t(p + "indexer.k_norm.weight"), c.eps)
                    ccos, csin = self._rope(L, pc)
                    state["index_k"] = rope(k, ccos, csin)
                iq = (q_a @ self._t(p + "indexer.wq_b.weight").t()).reshape(T, c.index_heads,
                                                                             c.index_dim)
                iq = rope(iq, cos, sin)
                iw = y @ self._t(p + "indexer.weights_proj.weight").t()
                logits = indexer_logits(iq, state["index_k"], iw)
                S = c.candidate_source
                if S is not None and L > S:
                    # a candidate consumer: its top-k among the source's candidate blocks
                    allowed = state["candidates"]
                    state["topk"] = [top_k_within(logits[t], allowed[t], c.index_topk)
                                     for t in range(T)]
                    if trace is not None:
                        trace.append(("index", L, logits, visible, allowed))
                else:
                    state["topk"] = [top_k(logits[t], visible[t], c.index_topk)
                                     for t in range(T)]
                    if trace is not None:
                        trace.append(("index", L, logits, visible))
                if L == S:
                    bs = c.candidate_block_size
                    scores, valid = candidate_block_scores(logits, visible, bs)
                    blocks = [candidate_blocks(scores[t], valid[t], c.candidate_topk_blocks)
                              for t in range(T)]
                    state["candidates"] = [candidate_entries(b, visible[t], bs)
                                           for t, b in enumerate(blocks)]
                    if trace is not None:
                        trace.append(("candidate", L, scores, valid, blocks))
            selected = state["topk"]
        out = torch.empty(T, c.n_head, c.head_dim)
        for t in range(T):
            keys = kv[max(0, t - c.window + 1):t + 1]
            if ratio > 0 and selected[t]:
                keys = torch.cat([keys, entries[selected[t]]])
            out[t] = sink_attention(q[t], keys, sink, c.head_dim ** -0.5)
        out = rope(out, cos, sin, conjugate=True)
        g = c.o_groups
        wo_a = self._t(p + "wo_a.weight").reshape(g, c.o_lora_rank, -1)
        mid = torch.einsum("tgr,gdr->tgd", out.reshape(T, g, -1), wo_a).reshape(T, -1)
        return mid @ self._t(p + "wo_b.weight").t()

    def moe(self, L, y, trace):
        c, p = self.cfg, f"layers.{L}.ffn."
        logits = y @ self._t(p + "gate.weight").t()
        idx, wts = moe_gate(logits, self._t(p + "gate.bias"), c.top_k, c.scaling)
        if trace is not None:
            trace.append(("route", L, F.softplus(logits).sqrt() + self._t(p + "gate.bias")))
        out = torch.zeros_like(y)
        for t in range(y.shape[0]):
            for e, wt in zip(idx[t].tolist(), wts[t]):
                e_ = f"{p}experts.{e}."
                out[t] += wt * swiglu(y[t:t + 1], self._t(e_ + "w1.weight"), self._t(e_ + "w3.weight"),
                                      self._t(e_ + "w2.weight"), c.swiglu_limit)[0]
        if c.n_shared:
            s = p + "shared_experts."
            out += swiglu(y, self._t(s + "w1.weight"), self._t(s + "w3.weight"),
                          self._t(s + "w2.weight"), c.swiglu_limit)
        return out

    def hidden_states(self, ids, trace=None, attn_inputs=None):
        """The final normed hidden [T, h] of token ids (a list), every position causal:
        a position's row depends on the tokens up to it alone. attn_inputs (a dict),
        when given, gets each layer's residual streams [T, m, h] at its attention
        input (after the previous sub-layer's post and the layer's Engram): what
        DeepInfer's DeepseekDecoderLayer hands dflash_input_store (DSpark's features)."""
        c, m = self.cfg, self.cfg.hc_mult
        x = self._t("embed.weight")[torch.as_tensor(ids)]
        T = x.shape[0]
        residual = x[:, None, :].expand(T, m, c.hidden).clone()
        pre = torch.zeros(T, m)
        pre[:, 0] = 1.0  # the first sub-layer reads stream 0 (hc.py _make_identity_pre_mix)
        out, post, comb = None, None, None
        state, shared_hidden = {}, None
        for L in range(c.n_layer):
            for kind in ("attn", "ffn"):
                if out is not None:
                    residual = hc_post(out, residual, post, comb)
                if kind == "attn" and L in c.engram_layers:
                    residual = self.engram(L, residual, ids)
                if kind == "attn" and attn_inputs is not None:
                    attn_inputs[L] = residual
                layer_input = (residual * pre[:, :, None]).sum(1)
                pfx = f"layers.{L}.hc_{kind}_"
                pre, post, comb = hc_mixes(residual, self._t(pfx + "fn"), self._t(pfx + "scale"),
                                           self._t(pfx + "base"), m, c.eps, c.hc_eps,
                                           c.hc_post_mult, c.hc_iters)
                y = rms_norm(layer_input, self._t(f"layers.{L}.{kind}_norm.weight"), c.eps)
                if kind == "attn":
                    if L == c.n_prefill_layer:
                        shared_hidden = y
                    out = self.attention(L, y, shared_hidden, state, trace)
                else:
                    out = self.moe(L, y, trace)
        residual = hc_post(out, residual, post, comb)
        h = (residual * pre[:, :, None]).sum(1)
        return rms_norm(h, self._t("norm.weight"), c.eps)

    def forward(self, ids, trace=None, attn_inputs=None):
        if not ids or any(not 0 <= int(i) < self.cfg.vocab for i in ids):
            raise ValueError(f"ids: {len(ids)} ids, each must be in 0..{self.cfg.vocab - 1}")
        head = self._t("embed.weight") if self.cfg.tie else self._t("head.weight")
        return self.hidden_states(ids, trace, attn_inputs) @ head.t()
