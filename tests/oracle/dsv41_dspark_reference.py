#!/usr/bin/env python3
"""DeepSeek-V4.1's DSpark draft head as dense PyTorch: the executable reference for tiny
checkpoints, beside dsv41_reference.py's main model (docs/deepseek-v41.md, "The DSpark
head").

No library runs it on a CPU: DeepInfer 0.1.0 (the DFlash module) calls GPU kernels in
every step. This module re-derives its dense meaning from DeepInfer's source, and
check_dsv41_ops.py holds the parts DeepInfer gives PyTorch references of to them
(get_fused_dflash_get_input_ref: the block's positions and the keys each row sees;
dflash_input_store_ref: the features; confidence_head_fused_ref: the confidence).
Everything is float32 on the checkpoint's weights dequantized (DeepInfer keeps the
features, the keys (fp8) and the activations in lower precision).

What it computes, and where each part comes from (DeepInfer's files, under
deepinfer/model_executor/ unless named):

- config (hugging_face/config.py _build_dflash_cfg): num_nextn_predict_layers = S
  stages (`mtp.{s}.*`, names.py: a main layer's suffixes, the block. level dropped);
  dspark_target_layer_ids (0-based main layers, listed order); dspark_markov_rank R;
  dspark_noise_token_id; dspark_n_routed_experts / dspark_num_experts_per_tok (the
  stages' MoE; everything else of it is the main model's: v4_modules/builder.py
  build_model); dspark_target_attn_input (must be true: decoder_layer.py asserts it).
- features (models/deepseek.py, decoder_layer.py _store_dflash_input,
  tilelang_ops/dflash.py dflash_input_store_ref): per token, for each target layer j,
  the mean over the hc streams of the residual streams at layer j's attention input
  (after the previous sub-layer's post and j's Engram: HCLazyPostData.residual after
  attn_norm_forward), concatenated: [n_target * E].
- injection (mtp/dflash.py update_main_cache, v4_modules/attn.py
  DFlashAttention.update_main_cache): g = RMSNorm(main_proj feat_p) * main_norm; each
  stage's key RoPE_p(RMSNorm(wkv_s g) * kv_norm_s) at p (the stage's RoPE:
  hugging_face/config.py _dflash_spec, rope_theta, never YaRN; interleaved, on the last
  qk_rope_head_dim dims).
- block (mtp/dflash.py forward_drafts, _embed_draft_init_tokens): tokens [anchor,
  noise x (B - 1)] at positions n .. n + B - 1 (n = the anchor's position; the last
  accepted position a = n - 1), the main embedding, expanded into the hc streams, the
  first sub-layer reading stream 0 (v4_modules/hc.py _make_identity_pre_mix); each
  stage the shifted-mHC sub-layer loop of the main model (dsv41_reference.py
  hidden_states) with attention as a V4.1 sliding layer (DFlashAttention.forward_drafts:
  q_a -> q_norm -> wq_b, no per-head q norm (use_qnorm is off for V4.1), RoPE at n + i;
  the row's own key RoPE_{n+i}(RMSNorm(wkv y_i) kv_norm) written at n + i; sink
  attention; RoPE undone on the output; the grouped output projection) and the MoE
  (sqrtsoftplus + bias routing over the stage's experts, renormalised, times
  routed_scaling_factor, plus the shared expert, the SwiGLU clamp). Every row sees the
  same keys, positions n - W .. n + B - 1 clipped at 0 (W = sliding_window): the
  kv_index that tilelang_ops/get_kv_index.py get_fused_dflash_get_input_ref builds
  (positions a - W + 1 .. a + B for every row of the request), so the block is
  non-causal and an earlier row sees the later rows' keys.
- head (mtp/dflash.py forward_drafts, sample_drafts): the last sub-layer's post, then
  h = sum over streams of the streams * the last pre mix (mhc_pre_apply_mix; shifted mHC
  has no hc_head); logits_i = (RMSNorm(h_i) * mtp.{S-1}.norm) @ head.T (the main LM head).
- Markov chain and confidence (sample_drafts, ConfidenceHead,
  tilelang_ops/dflash.py confidence_head_fused_ref): prev_0 = anchor;
  logits_i += markov_head.head @ markov_head.embed[prev_i];
  conf_i = sigmoid(clamp([h_i; embed[prev_i]] @ proj.T / T, -60, 60)) (T from
  DEEPINFER_DFLASH_CONFIDENCE_HEAD_TEMPERATURE, 1.0 by default);
  prev_{i+1} = argmax(logits_i) (greedy; the lower ID among equals).

    reference = V41DSparkReference.load(folder)
    logits, feats = reference.features(ids)          # main logits [T, V], [T, n_target * E]
    caches = reference.new_caches()
    reference.inject(caches, feats[:n], range(n))
    out = reference.block(caches, n, anchor)          # biased logits [B, V], drafts, conf
"""
import pathlib

import torch

import dsv41_reference as ref
from dsv41_reference import Unsupported


class DSparkConfig:
    """The DSpark keys of a deepseek_v41 config.json (DeepInfer's _build_dflash_cfg)."""

    def __init__(self, hf, main):
        t = hf["text_config"]
        self.stages = main.n_nextn
        if self.stages < 1:
            raise Unsupported("num_nextn_predict_layers: 0 (no DSpark stage)")
        ref.need_positive(t, ("dspark_block_size", "dspark_markov_rank", "dspark_n_routed_experts",
                              "dspark_num_experts_per_tok"))
        self.block = t["dspark_block_size"]
        self.rank = t["dspark_markov_rank"]
        self.n_experts = t["dspark_n_routed_experts"]
        self.top_k = t["dspark_num_experts_per_tok"]
        if self.top_k > self.n_experts:
            raise Unsupported(f"dspark_num_experts_per_tok: {self.top_k} > "
                              f"dspark_n_routed_experts {self.n_experts}")
        ids = t.get("dspark_target_layer_ids")
        if not isinstance(ids, list) or not ids or any(
                not isinstance(j, int) or not 0 <= j < main.n_layer for j in ids):
            raise Unsupported(f"dspark_target_layer_ids: {ids!r} (main layers 0.."
                              f"{main.n_layer - 1})")
        self.targets = list(ids)
        if not t.get("dspark_target_attn_input", True):
            raise Unsupported("dspark_target_attn_input: false (DeepInfer takes the "
                              "attention inputs only)")
        noise = t.get("dspark_noise_token_id")
        if not isinstance(noise, int) or not 0 <= noise < main.vocab:
            raise Unsupported(f"dspark_noise_token_id: {noise!r}")
        self.noise = noise
        ratios = t["compress_ratios"][main.n_layer:]
        if any(r != 0 for r in ratios):
            raise Unsupported(f"compress_ratios: the stages' {ratios} (sliding layers: 0)")
        self.pad = hf.get("pad_token_id")


def stage_shapes(cfg, dcfg):
    """name -> shape of every mtp.* tensor the head reads: each stage a block
    (dsv41_reference.block_shapes) over the stages' experts, then the head's own."""
    h = cfg.hidden
    out = {}
    for s in range(dcfg.stages):
        out.update(ref.block_shapes(cfg, f"mtp.{s}.", dcfg.n_experts))
    last = f"mtp.{dcfg.stages - 1}."
    out.update({"mtp.0.main_proj.weight": (h, len(dcfg.targets) * h),
                "mtp.0.main_norm.weight": (h,), last + "norm.weight": (h,),
                last + "markov_head.embed.weight": (cfg.vocab, dcfg.rank),
                last + "markov_head.head.weight": (cfg.vocab, dcfg.rank),
                last + "confidence_head.proj.weight": (1, h + dcfg.rank)})
    return out


def confidence(h, markov_emb, proj, temperature=1.0):
    """sigmoid(clamp([h; markov_emb] @ proj.T / temperature, -60, 60)): h [n, E],
    markov_emb [n, R], proj [1, E + R] (DeepInfer's confidence_head_fused_ref)."""
    z = torch.cat([h, markov_emb], -1) @ proj.t()
    return torch.sigmoid((z[:, 0] / temperature).clamp(-60.0, 60.0))


class V41DSparkReference:
    def __init__(self, main, dcfg):
        self.main = main
        self.cfg = main.cfg
        self.dcfg = dcfg
        for name, shape in stage_shapes(self.cfg, dcfg).items():
            if name not in main.w:
                raise Unsupported(f"{name}: missing from the checkpoint")
            if tuple(main.w[name].shape) != shape:
                raise Unsupported(f"{name}: shape {tuple(main.w[name].shape)}, the config says {shape}")

    @classmethod
    def load(cls, folder):
        import json
        main = ref.V41Reference.load(folder)
        hf = json.loads((pathlib.Path(folder) / "config.json").read_text())
        return cls(main, DSparkConfig(hf, main.cfg))

    def _t(self, name):
        return self.main._t(name)

    # ---- the target's side ------------------------------------------------

    def features(self, ids, trace=None):
        """The main model's logits [T, V] on ids and the DSpark features [T, n_target * E]:
        per target layer (listed order) the hc-stream mean of its attention-input streams."""
        streams = {}
        logits = self.main.forward(ids, trace, streams)
        return logits, torch.cat([streams[j].mean(-2) for j in self.dcfg.targets], -1)

    def new_caches(self):
        """One key cache per stage: position -> key [head_dim]."""
        return [dict() for _ in range(self.dcfg.stages)]

    def _rope(self, positions):
        c = self.cfg
        return ref.rope_cos_sin(c.rope_theta, c.rope_dim, positions)

    def main_keys(self, feats, positions):
        """Each stage's keys [n, head_dim] of the feature rows feats [n, n_target * E] at
        positions."""
        c = self.cfg
        g = ref.rms_norm(feats @ self._t("mtp.0.main_proj.weight").t(),
                         self._t("mtp.0.main_norm.weight"), c.eps)
        cos, sin = self._rope(torch.as_tensor(list(positions)))
        keys = []
        for s in range(self.dcfg.stages):
            a = f"mtp.{s}.attn."
            k = ref.rms_norm(g @ self._t(a + "wkv.weight").t(), self._t(a + "kv_norm.weight"), c.eps)
            keys.append(ref.rope(k, cos, sin))
        return keys

    def inject(self, caches, feats, positions):
        """Write (overwrite) the keys of the feature rows at positions into caches."""
        positions = list(positions)
        for cache, k in zip(caches, self.main_keys(feats, positions)):
            for i, p in enumerate(positions):
                cache[p] = k[i]

    # ---- the block ----------------------------------------------------------

    def positions(self, n):
        """The block's positions n .. n + B - 1."""
        return list(range(n, n + self.dcfg.block))

    def kv_positions(self, n):
        """The key positions each of the block's rows sees: for every row the same
        n - W .. n + B - 1, those below 0 left out (get_fused_dflash_get_input_ref with
        the last accepted position n - 1)."""
        seen = [p for p in range(n - self.cfg.window, n + self.dcfg.block) if p >= 0]
        return [seen for _ in range(self.dcfg.block)]

    def attention(self, s, y, n, cache):
        """Stage s's attention on the block's normed rows y [B, E] at n .. n + B - 1: the
        rows' own keys written into cache first, then each row over kv_positions(n)."""
        c, p = self.cfg, f"mtp.{s}.attn."
        B = y.shape[0]
        pos = self.positions(n)
        cos, sin = self._rope(torch.tensor(pos))
        q_a = ref.rms_norm(y @ self._t(p + "wq_a.weight").t(), self._t(p + "q_norm.weight"), c.eps)
        q = ref.rope((q_a @ self._t(p + "wq_b.weight").t()).reshape(B, c.n_head, c.head_dim), cos, sin)
        kv = ref.rope(ref.rms_norm(y @ self._t(p + "wkv.weight").t(), self._t(p + "kv_norm.weight"),
                                   c.eps), cos, sin)
        for i, q_pos in enumerate(pos):
            cache[q_pos] = kv[i]
        sink = self._t(p + "attn_sink")
        out = torch.empty(B, c.n_head, c.head_dim)
        for i, seen in enumerate(self.kv_positions(n)):
            missing = [k for k in seen if k not in cache]
            if missing:
                raise ValueError(f"block at {n}: no key at positions {missing} (inject them first)")
            keys = torch.stack([cache[k] for k in seen])
            out[i] = ref.sink_attention(q[i], keys, sink, c.head_dim ** -0.5)
        out = ref.rope(out, cos, sin, conjugate=True)
        g = c.o_groups
        wo_a = self._t(p + "wo_a.weight").reshape(g, c.o_lora_rank, -1)
        mid = torch.einsum("tgr,gdr->tgd", out.reshape(B, g, -1), wo_a).reshape(B, -1)
        return mid @ self._t(p + "wo_b.weight").t()

    def moe(self, s, y, trace):
        """Stage s's MoE: the main model's (dsv41_reference moe) over the stage's
        dspark_n_routed_experts, picking dspark_num_experts_per_tok."""
        c, d, p = self.cfg, self.dcfg, f"mtp.{s}.ffn."
        logits = y @ self._t(p + "gate.weight").t()
        idx, wts = ref.moe_gate(logits, self._t(p + "gate.bias"), d.top_k, c.scaling)
        if trace is not None:
            trace.append(("route", s, torch.nn.functional.softplus(logits).sqrt() +
                          self._t(p + "gate.bias")))
        out = torch.zeros_like(y)
        for t in range(y.shape[0]):
            for e, wt in zip(idx[t].tolist(), wts[t]):
                e_ = f"{p}experts.{e}."
                out[t] += wt * ref.swiglu(y[t:t + 1], self._t(e_ + "w1.weight"), self._t(e_ + "w3.weight"),
                                          self._t(e_ + "w2.weight"), c.swiglu_limit)[0]
        if c.n_shared:
            sh = p + "shared_experts."
            out += ref.swiglu(y, self._t(sh + "w1.weight"), self._t(sh + "w3.weight"),
                              self._t(sh + "w2.weight"), c.swiglu_limit)
        return out

    def hidden(self, caches, n, anchor, trace=None):
        """The block's h [B, E] (before the norm) at n .. n + B - 1 with tokens [anchor,
        noise x (B - 1)], through every stage (the stages' keys written into caches)."""
        c, d, m = self.cfg, self.dcfg, self.cfg.hc_mult
        tokens = [anchor] + [d.noise] * (d.block - 1)
        x = self._t("embed.weight")[torch.tensor(tokens)]
        B = x.shape[0]
        residual = x[:, None, :].expand(B, m, c.hidden).clone()
        pre = torch.zeros(B, m)
        pre[:, 0] = 1.0  # the first sub-layer reads stream 0 (hc.py _make_identity_pre_mix)
        out, post, comb = None, None, None
        for s in range(d.stages):
            for kind in ("attn", "ffn"):
                if out is not None:
                    residual = ref.hc_post(out, residual, post, comb)
                layer_input = (residual * pre[:, :, None]).sum(1)
                pfx = f"mtp.{s}.hc_{kind}_"
                pre, post, comb = ref.hc_mixes(residual, self._t(pfx + "fn"), self._t(pfx + "scale"),
                                               self._t(pfx + "base"), m, c.eps, c.hc_eps,
                                               c.hc_post_mult, c.hc_iters)
                y = ref.rms_norm(layer_input, self._t(f"mtp.{s}.{kind}_norm.weight"), c.eps)
                if kind == "attn":
                    out = self.attention(s, y, n, caches[s])
                else:
                    out = self.moe(s, y, trace)
        residual = ref.hc_post(out, residual, post, comb)
        return (residual * pre[:, :, None]).sum(1)

    def block(self, caches, n, anchor, trace=None, temperature=1.0):
        """The block at n with this anchor (the token at n; caches hold the keys of
        positions up to n - 1): {"h": [B, E], "logits": the biased logits [B, V],
        "drafts": [B], "confidence": [B], "markov_emb": [B, R]}."""
        c, last = self.cfg, f"mtp.{self.dcfg.stages - 1}."
        h = self.hidden(caches, n, anchor, trace)
        head = self._t("embed.weight") if c.tie else self._t("head.weight")
        logits = ref.rms_norm(h, self._t(last + "norm.weight"), c.eps) @ head.t()
        embed = self._t(last + "markov_head.embed.weight")
        mhead = self._t(last + "markov_head.head.weight")
        prev, rows, drafts, embs = anchor, [], [], []
        for i in range(self.dcfg.block):
            e = embed[prev]
            row = logits[i] + mhead @ e
            prev = int(torch.argmax(row))  # (torch.argmax: the first among equals)
            rows.append(row)
            drafts.append(prev)
            embs.append(e)
        embs = torch.stack(embs)
        conf = confidence(h, embs, self._t(last + "confidence_head.proj.weight"), temperature)
        return {"h": h, "logits": torch.stack(rows), "drafts": drafts, "confidence": conf,
                "markov_emb": embs}
