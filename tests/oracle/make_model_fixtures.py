#!/usr/bin/env python3
"""Make the model parity fixtures (tests/fixtures/model/README.md says the format).

    make_model_fixtures.py tiny [NAME ...]   tiny random checkpoints (transformers)
    make_model_fixtures.py dsv3 [NAME ...]   tiny DeepSeek-V3/V2 checkpoints (MLA, MoE, fp8)
    make_model_fixtures.py tiny-gguf [NAME ...]   tiny GGUFs, quantized and run by llama.cpp
    make_model_fixtures.py gguf ASSET_DIR [NAME ...]   real GGUFs (llama-cpp-python)
    make_model_fixtures.py dsv3-gguf [NAME ...]   tiny DeepSeek-V3 checkpoints converted to
        deepseek2 GGUFs by llama.cpp's own convert_hf_to_gguf.py, run by llama.cpp
    make_model_fixtures.py dsv4-gguf [NAME ...]   the tiny DeepSeek-V4 release checkpoint converted
        to deepseek4 GGUFs by the same converter, run by llama.cpp
    make_model_fixtures.py --check tiny|dsv3|tiny-gguf|dsv3-gguf|dsv4-gguf|gguf ...   regenerate into a scratch
        folder and compare with the committed fixtures (weights byte for byte,
        tokens exactly, logits within 1e-4 (torch) or 2e-2 (llama.cpp))

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
    # The whole sequence (prompt + greedy tokens) in one forward pass, no KV
    # cache: the reference for every decode step's logits.
    with torch.no_grad():
        seq_logits = model(gen).logits[0].to(torch.float32).numpy()
    logits.astype("<f4").tofile(out / "logits.f32")
    seq_logits.astype("<f4").tofile(out / "sequence_logits.f32")
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
        # transformers' RoPE cos/sin multiplier (YaRN's attention_factor; 1 otherwise).
        "rope_attention_scaling": float(model.model.rotary_emb.attention_scaling),
        "sequence_logits_file": "sequence_logits.f32",
        "sequence_logits_shape": [N_PROMPT + N_GREEDY, config.vocab_size],
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__,
                   "attn_implementation": "eager"},
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {len(files)} safetensors file(s), {size} bytes, greedy {greedy[:8]}...")


# DeepSeek-V3 architecture (MLA + DeepSeekMoE): name -> (class, overrides, dtype).
# dtype "fp8" stores every attention / MLP / expert projection as float8_e4m3fn
# with 128x128 block scales (weight_scale_inv), as DeepSeek's checkpoints do; the
# reference runs in float32 on the dequantized weights.
DSV3 = {
    "dsv3-qlora-bf16": ("v3", dict(), "bfloat16"),
    "dsv3-noqlora-yarn-f32": ("v3", dict(q_lora_rank=None, rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32,
        mscale=1.0, mscale_all_dim=1.0, beta_fast=32, beta_slow=1),
        max_position_embeddings=128), "float32", 6),
    "dsv3-group1-noninterleave-f32": ("v3", dict(
        n_group=1, topk_group=1, first_k_dense_replace=0, num_experts_per_tok=3,
        norm_topk_prob=False, rope_interleave=False, routed_scaling_factor=1.0), "float32"),
    "dsv3-dense-bf16": ("v3", dict(first_k_dense_replace=3), "bfloat16"),
    "dsv3-fp8": ("v3", dict(hidden_size=128, q_lora_rank=96, kv_lora_rank=64,
                            intermediate_size=192, moe_intermediate_size=64,
                            qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32), "fp8"),
    "dsv3-mtp-f32": ("v3", dict(num_nextn_predict_layers=1), "float32", 2),
    # YaRN with mscale != mscale_all_dim: cos/sin scaled by their ratio (not 1).
    "dsv2-softmax-yarn-bf16": ("v2", dict(topk_method="group_limited_greedy",
                                          routed_scaling_factor=1.5, rope_parameters=dict(
                                              rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                              original_max_position_embeddings=64, mscale=0.9,
                                              mscale_all_dim=0.707)), "bfloat16", 1),
}
DSV3_BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                 n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
                 topk_group=2, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=48,
                 qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                 first_k_dense_replace=1, norm_topk_prob=True, max_position_embeddings=256,
                 rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, initializer_range=0.1,
                 num_nextn_predict_layers=0)


def fp8_block_quantize(w):
    """float32 [out, in] -> (float8_e4m3fn weight, float32 weight_scale_inv
    [ceil(out/128), ceil(in/128)]): each 128x128 block scaled so its largest
    magnitude is 448 (e4m3's largest finite value), as DeepSeek-V3's fp8
    checkpoints store weights (weight ~ fp8 * scale_inv)."""
    import torch
    out_f, in_f = w.shape
    bo, bi = -(-out_f // 128), -(-in_f // 128)
    scale = torch.zeros(bo, bi, dtype=torch.float32)
    q = torch.zeros(out_f, in_f, dtype=torch.float8_e4m3fn)
    for i in range(bo):
        for j in range(bi):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


def fp8_dequantize(q, scale):
    import torch
    w = q.to(torch.float32)
    rows = scale.repeat_interleave(128, 0)[:w.shape[0]]
    return w * rows.repeat_interleave(128, 1)[:, :w.shape[1]]


def per_expert(state):
    """A state dict with transformers 5's fused experts (experts.gate_up_proj
    [E, 2I, H], experts.down_proj [E, H, I]) as checkpoints store them: one
    gate/up/down_proj per expert. Values: (tensor, expert or None, row slice)."""
    params = {}
    for k, v in state.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[:-len("gate_up_proj")]
            half = v.shape[1] // 2
            for e in range(v.shape[0]):
                params[f"{base}{e}.gate_proj.weight"] = (v, e, slice(0, half))
                params[f"{base}{e}.up_proj.weight"] = (v, e, slice(half, 2 * half))
        elif k.endswith("mlp.experts.down_proj"):
            base = k[:-len("down_proj")]
            for e in range(v.shape[0]):
                params[f"{base}{e}.down_proj.weight"] = (v, e, slice(None))
        else:
            params[k] = (v, None, None)
    return params


def make_mtp_layer(model, config):
    """DeepSeek-V3's MTP module as transformers builds it (MtpLayer: enorm, hnorm,
    eh_proj over [enorm(embedding), hnorm(hidden)], a decoder layer, post_norm),
    its decoder layer indexed after the main ones (MoE, as DeepSeek-V3's layer 61),
    random weights like the main model's."""
    import torch
    from transformers.modeling_layers import MtpLayer
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3DecoderLayer,
                                                                      DeepseekV3RMSNorm)
    mtp = MtpLayer(config, DeepseekV3DecoderLayer, DeepseekV3RMSNorm,
                   config.num_hidden_layers).to(torch.float32).eval()
    with torch.no_grad():
        for pname, p in mtp.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        for bname, b in mtp.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return mtp


def run_mtp_layer(model, mtp, ids):
    """MTP logits over a whole sequence in one pass (no cache): row i from the
    main model's final normed hidden state at position i and token i + 1 at
    position i + 1, as transformers' MtpModel.forward_layer + shared head."""
    import torch
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][:, :-1]
        nxt = ids[:, 1:]
        n = nxt.shape[1]
        pos = torch.arange(1, n + 1)[None]
        emb = model.model.embed_tokens(nxt)
        x = mtp.eh_proj(torch.cat([mtp.enorm(emb), mtp.hnorm(hidden)], dim=-1))
        cos_sin = model.model.rotary_emb(x, pos)
        mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        x = mtp.mtp_block(x, attention_mask=mask, position_embeddings=cos_sin, position_ids=pos)
        x = mtp.post_norm(x)
        return model.lm_head(x)[0].to(torch.float32).numpy()


def make_dsv3(name):
    import numpy as np
    import safetensors
    import safetensors.torch
    import torch
    import transformers
    from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                              DeepseekV3ForCausalLM)

    kind, overrides, dtype = DSV3[name][:3]
    # A salt (4th field) moves the seed off draws whose routers have near-ties
    # (two experts' scores within 1e-4 of each other at the top-k boundary), which
    # any rounding difference would flip.
    seed = sum(name.encode()) * 7919 + (DSV3[name][3] if len(DSV3[name]) > 3 else 0)
    torch.manual_seed(seed)
    cfg_args = dict(DSV3_BASE, **overrides)
    cfg_args.setdefault("rope_parameters", dict(rope_type="default", rope_theta=10000.0))
    if kind == "v2":
        cfg_args.pop("num_nextn_predict_layers")
        cfg_args.pop("norm_topk_prob")
        config = DeepseekV2Config(**cfg_args)
        model = DeepseekV2ForCausalLM(config)
    else:
        config = DeepseekV3Config(**cfg_args)
        model = DeepseekV3ForCausalLM(config)
    config._attn_implementation = "eager"
    model.eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(3.0)  # louder layer outputs: less repetitive greedy tokens
        for bname, b in model.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors"):
        old.unlink()
    if dtype == "fp8":
        # Save as bf16 for config.json, then replace the weights with fp8 + scales.
        model.save_pretrained(out, safe_serialization=True)
        (out / "model.safetensors").unlink()
        state = {}
        with torch.no_grad():
            # transformers 5 holds each layer's experts fused (experts.gate_up_proj
            # [E, 2I, H], experts.down_proj [E, H, I]); checkpoints, and
            # save_pretrained, store one gate/up/down_proj per expert.
            params = {}
            for k, v in model.state_dict().items():
                if k.endswith("mlp.experts.gate_up_proj"):
                    base = k[:-len("gate_up_proj")]
                    half = v.shape[1] // 2
                    for e in range(v.shape[0]):
                        params[f"{base}{e}.gate_proj.weight"] = (v, e, slice(0, half))
                        params[f"{base}{e}.up_proj.weight"] = (v, e, slice(half, 2 * half))
                elif k.endswith("mlp.experts.down_proj"):
                    base = k[:-len("down_proj")]
                    for e in range(v.shape[0]):
                        params[f"{base}{e}.down_proj.weight"] = (v, e, slice(None))
                else:
                    params[k] = (v, None, None)
            for k, (full, e, rows) in sorted(params.items()):
                v = full if e is None else full[e, rows]
                quant = (k.startswith("model.layers.") and k.endswith(("_proj.weight", "_mqa.weight"))
                         and ".mlp.gate." not in k)
                if quant:
                    q, s = fp8_block_quantize(v.to(torch.float32))
                    state[k] = q.contiguous()
                    state[k[:-len("weight")] + "weight_scale_inv"] = s.contiguous()
                    v.copy_(fp8_dequantize(q, s))
                else:
                    v.copy_(v.to(torch.bfloat16).to(torch.float32))
                    state[k] = v.to(torch.bfloat16).contiguous()
        safetensors.torch.save_file(state, out / "model.safetensors", metadata={"format": "pt"})
        cfg_json = json.loads((out / "config.json").read_text())
        cfg_json["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                           "activation_scheme": "dynamic",
                                           "weight_block_size": [128, 128]}
        cfg_json["dtype"] = "bfloat16"
        (out / "config.json").write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")
    else:
        torch_dtype = getattr(torch, dtype)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch_dtype).to(torch.float32))
            for bname, b in model.named_buffers():
                if bname.endswith("e_score_correction_bias"):
                    b.copy_(b.to(torch_dtype).to(torch.float32))
        model.to(torch_dtype).save_pretrained(out, safe_serialization=True)
        model.to(torch.float32)
    (out / "generation_config.json").unlink(missing_ok=True)
    mtp = make_mtp_layer(model, config) if cfg_args.get("num_nextn_predict_layers") else None
    if mtp is not None:
        # DeepSeek-V3's checkpoint layout: the MTP module is model.layers.<L>, with
        # enorm, hnorm, eh_proj, shared_head.{norm,head}, its own embed_tokens (a
        # copy of the main one) and an ordinary decoder layer's tensors.
        L = config.num_hidden_layers
        state = dict(safetensors.torch.load_file(out / "model.safetensors"))
        extra = {"enorm.weight": mtp.enorm.weight, "hnorm.weight": mtp.hnorm.weight,
                 "eh_proj.weight": mtp.eh_proj.weight,
                 "shared_head.norm.weight": mtp.post_norm.weight,
                 "shared_head.head.weight": model.lm_head.weight,
                 "embed_tokens.weight": model.model.embed_tokens.weight}
        for k, (full, e, rows) in per_expert(mtp.mtp_block.state_dict()).items():
            extra[k] = full if e is None else full[e, rows]
        for k, v in extra.items():
            state[f"model.layers.{L}.{k}"] = v.detach().to(torch.float32).contiguous()
        safetensors.torch.save_file(state, out / "model.safetensors", metadata={"format": "pt"})

    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(3, config.vocab_size, (N_PROMPT,), generator=g).tolist()
    ids = torch.tensor([prompt])
    margins = []

    def router_margin(mod, inp, outp):
        # The gap at the top-k boundary of the scores the router ranks by.
        logits_r = outp[0]
        sc = logits_r.sigmoid() if kind == "v3" else logits_r.softmax(-1)
        if kind == "v3":
            sc = sc + mod.e_score_correction_bias
        top = sc.topk(config.num_experts_per_tok + 1, dim=-1).values
        margins.append(float((top[:, -2] - top[:, -1]).min()))

    hooks = [layer.mlp.gate.register_forward_hook(router_margin)
             for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    with torch.no_grad():
        logits = model(ids).logits[0].to(torch.float32).numpy()
        gen = model.generate(ids, do_sample=False, max_new_tokens=N_GREEDY,
                             min_new_tokens=N_GREEDY, pad_token_id=0, eos_token_id=None)
        seq_logits = model(gen).logits[0].to(torch.float32).numpy()
    for h in hooks:
        h.remove()
    greedy = gen[0, N_PROMPT:].tolist()
    logits.astype("<f4").tofile(out / "logits.f32")
    seq_logits.astype("<f4").tofile(out / "sequence_logits.f32")
    extra_ref = {}
    if mtp is not None:
        mtp_logits = run_mtp_layer(model, mtp, gen)
        mtp_logits.astype("<f4").tofile(out / "mtp_logits.f32")
        extra_ref = {"mtp_logits_file": "mtp_logits.f32",
                     "mtp_logits_shape": list(mtp_logits.shape),
                     "mtp": "transformers' MtpLayer (DeepseekV3DecoderLayer as layer "
                            f"{config.num_hidden_layers}, MoE): row i drafts token i + 2 from "
                            "the main model's final normed hidden state at i and token i + 1 "
                            "(position i + 1), over the prompt + greedy sequence"}
    files = sorted(p.name for p in out.glob("*.safetensors"))
    ref = {**extra_ref,
        "format": "deepinfer-model-fixture-1",
        "name": name,
        "architecture": type(model).__name__,
        "storage_dtype": "float8_e4m3fn (128x128 block scales; norms, router, embeddings bf16)"
                         if dtype == "fp8" else dtype,
        "compute_dtype": "float32",
        "seed": seed,
        "files": files,
        "config": json.loads((out / "config.json").read_text()),
        "prompt": prompt,
        "logits_file": "logits.f32",
        "logits_shape": [N_PROMPT, config.vocab_size],
        "argmax": np.argmax(logits, axis=1).tolist(),
        "greedy": greedy,
        "rope_attention_scaling": float(model.model.rotary_emb.attention_scaling),
        # Smallest gap, over every router call of the three passes above, between
        # the k-th and (k+1)-th expert's ranking score (no MoE layer: null).
        "router_min_margin": round(min(margins), 6) if margins else None,
        "sequence_logits_file": "sequence_logits.f32",
        "sequence_logits_shape": [N_PROMPT + N_GREEDY, config.vocab_size],
        "oracle": {"transformers": transformers.__version__, "torch": torch.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__,
                   "attn_implementation": "eager"},
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{name}: {size} bytes, router margin {ref['router_min_margin']}, "
          f"greedy {greedy[:8]}... argmax {ref['argmax'][:8]}")


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


def llama_cpp_versions():
    """llama-cpp-python's version and the ggml library version it bundles (the
    SONAME version of lib/libggml.so.X.Y.Z; the wheel records no llama.cpp commit)."""
    import llama_cpp
    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
    ggml = sorted(p.name[len("libggml.so."):] for p in lib.glob("libggml.so.*.*.*"))
    return {"llama_cpp_python": llama_cpp.__version__, "ggml": ggml[-1] if ggml else "unknown"}


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
    import gguf
    reader = gguf.GGUFReader(path)
    ref = {
        "format": "deepinfer-gguf-fixture-1",
        "name": name,
        "file": GGUF[name],
        "file_sha256": h.hexdigest(),
        "n_vocab": llm.n_vocab(),
        "tensors": {t.name: {"type": t.tensor_type.name, "ne": [int(x) for x in t.shape]}
                    for t in reader.tensors},
        "top_k": TOP_K,
        "oracle": {**llama_cpp_versions(),
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


# Tiny GGUFs: random checkpoints converted to GGUF here (our converter, below),
# quantized by llama.cpp's own llama_model_quantize and run by llama.cpp. They
# cover what no complete real model on PyPI does: qwen2 in GGUF and the K-quants.
# Rows are 256 wide so every weight takes the K-quant types (no fallback).
# name: (architecture, llama.cpp ftype name, extra config)
TINY_GGUF = {
    "qwen2-q4_k_m": ("qwen2", "Q4_K_M", dict()),
    "qwen2-q8_0": ("qwen2", "Q8_0", dict(tie_word_embeddings=True)),
    "llama-q5_k_m": ("llama", "Q5_K_M", dict()),
    "llama-q4_0": ("llama", "Q4_0", dict(tie_word_embeddings=True)),
    "llama-q6_k": ("llama", "Q6_K", dict()),
    "qwen2-q5_0": ("qwen2", "Q5_0", dict()),
    "llama-q5_1": ("llama", "Q5_1", dict(tie_word_embeddings=True)),
    # FFN rows of 320: ffn_down is not a K-quant row, so llama.cpp's Q4_K_M mix
    # falls back to Q5_0 (Q4_K) and Q8_0 (Q6_K) for it, as in real files whose
    # intermediate size is not a multiple of 256 (DeepSeek-V2-Lite's 1,408).
    "llama-q4_k_m-fallback": ("llama", "Q4_K_M", dict(intermediate_size=320)),
    # The low-bit and codebook mixes: Q2_K (with Q3_K/Q4_K/Q6_K where llama.cpp
    # keeps more bits), Q3_K_M, IQ4_NL and IQ4_XS (no importance matrix needed).
    "llama-q2_k": ("llama", "Q2_K", dict()),
    "qwen2-q3_k_m": ("qwen2", "Q3_K_M", dict()),
    "llama-iq4_nl": ("llama", "IQ4_NL", dict(tie_word_embeddings=True)),
    "qwen2-iq4_xs": ("qwen2", "IQ4_XS", dict()),
    # The unquantized storage types llama.cpp writes (F16, BF16; its norms stay
    # F32): llama.cpp rounds the activations to f16/bf16 for these products,
    # deepinfer keeps them in f32, so the f32 reference holds both to account.
    "qwen2-f16": ("qwen2", "F16", dict()),
    "llama-bf16": ("llama", "BF16", dict(tie_word_embeddings=True)),
}
GGUF_BASE = dict(vocab_size=384, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=256, max_position_embeddings=256,
                 rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, initializer_range=0.05,
                 tie_word_embeddings=False)


def hf_to_gguf_name(name):
    """Hugging Face Llama/Qwen2 tensor name -> GGUF name (llama.cpp's naming)."""
    top = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    module, suffix = name.rsplit(".", 1)
    if module in top:
        return f"{top[module]}.{suffix}"
    parts = module.split(".", 3)  # model, layers, N, rest
    return f"blk.{parts[2]}.{layer[parts[3]]}.{suffix}"


def rope_pairs_adjacent(w, n_head):
    """Reorder the rows of a Llama Q or K projection so that llama.cpp's NORM RoPE
    (rotating adjacent pairs) computes what transformers' rotate_half computes
    (pairs i and i + d/2 of each head): rows (h, half, i) -> (h, i, half)."""
    out_features = w.shape[0]
    d = out_features // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantized_reference(model, reader, arch, config, tokens):
    """Logits of `tokens` (one forward pass, float32) from `model` with its weights
    replaced by the GGUF's, dequantized; Llama Q/K rows put back in
    transformers' order."""
    import numpy as np
    import torch
    from gguf import quants

    by_name = {t.name: t for t in reader.tensors}
    with torch.no_grad():
        for hf_name, p in model.state_dict().items():
            gname = hf_to_gguf_name(hf_name)
            if gname == "output.weight" and gname not in by_name:
                continue  # tied: lm_head is token_embd
            t = by_name[gname]
            w = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            w = w.reshape(p.shape)
            if arch == "llama" and (".q_proj." in hf_name or ".k_proj." in hf_name):
                heads = (config.num_attention_heads if ".q_proj." in hf_name
                         else config.num_key_value_heads)
                d = w.shape[0] // heads
                w = w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
            p.copy_(torch.from_numpy(np.ascontiguousarray(w)))
        config._attn_implementation = "eager"
        model.eval()
        return model(torch.tensor([tokens])).logits[0].to(torch.float32).numpy()


def llama_cpp_greedy(path, prompt):
    """llama.cpp on the GGUF at path: the prompt in one batch, then N_GREEDY
    greedy tokens one at a time. Returns (logits f32 [len(prompt) + N_GREEDY,
    n_vocab]: the prompt's positions, then one row per decode step; the greedy
    tokens; the settings)."""
    import llama_cpp
    import numpy as np
    settings = dict(LLAMA_SETTINGS, n_ctx=256, n_batch=256, n_ubatch=256)
    llm = llama_cpp.Llama(model_path=str(path), **settings)
    llm.reset()
    llm.eval(prompt)
    greedy = []
    nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    for _ in range(N_GREEDY):
        greedy.append(nxt)
        llm.eval([nxt])
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return np.array(llm.scores[:llm.n_tokens], dtype=np.float32), greedy, settings


def llama_quantize(src, dst, ftype, name):
    """llama.cpp's own quantizer (llama_model_quantize, default parameters, one
    thread) from the GGUF src to dst in llama.cpp's ftype ("Q4_K_M", ...)."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = 1
    # deepseek4's converter writes the routed experts in MXFP4 already, which
    # llama.cpp requantizes only when allowed (llama-quantize --allow-requantize)
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        sys.exit(f"{name}: llama_model_quantize failed ({rc})")


def make_tiny_gguf(name, asset_dir=None):
    import hashlib
    import os
    import tempfile

    import gguf
    import llama_cpp
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    arch, ftype, extra = TINY_GGUF[name]
    seed = sum(name.encode()) * 7919
    torch.manual_seed(seed)
    cfg = dict(GGUF_BASE, **extra)
    config = (Qwen2Config if arch == "qwen2" else LlamaConfig)(**cfg)
    model = (Qwen2ForCausalLM if arch == "qwen2" else LlamaForCausalLM)(config)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif pname.endswith(("o_proj.weight", "down_proj.weight")):
                # Louder attention and MLP outputs: the residual stream is not
                # dominated by the token's own embedding, so greedy decoding does
                # not just repeat a token.
                p.mul_(4.0)
    state = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)

    out = OUT / "gguf-tiny"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        w = gguf.GGUFWriter(f32, arch)
        w.add_name(name)
        w.add_context_length(config.max_position_embeddings)
        w.add_embedding_length(config.hidden_size)
        w.add_block_count(config.num_hidden_layers)
        w.add_feed_forward_length(config.intermediate_size)
        w.add_head_count(config.num_attention_heads)
        w.add_head_count_kv(config.num_key_value_heads)
        w.add_layer_norm_rms_eps(config.rms_norm_eps)
        w.add_rope_freq_base(config.rope_parameters["rope_theta"])
        w.add_vocab_size(config.vocab_size)
        w.add_file_type(0)
        w.add_tokenizer_model("none")
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        for hf_name, t in state.items():
            if arch == "llama" and (".q_proj." in hf_name or ".k_proj." in hf_name):
                heads = (config.num_attention_heads if ".q_proj." in hf_name
                         else config.num_key_value_heads)
                t = rope_pairs_adjacent(t, heads)
            w.add_tensor(hf_to_gguf_name(hf_name), np.ascontiguousarray(t, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        path = out / f"{name}.gguf"
        llama_quantize(f32, path, ftype, name)

    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(3, config.vocab_size, (N_PROMPT,), generator=g).tolist()
    logits, greedy, settings = llama_cpp_greedy(path, prompt)
    logits.astype("<f4").tofile(out / f"{name}.logits.f32")
    reader = gguf.GGUFReader(path)
    # The same sequence through transformers in float32 with the GGUF's weights
    # dequantized by the gguf package: the reference without llama.cpp's
    # quantization of activations (rows as in logits_file).
    f32_logits = dequantized_reference(model, reader, arch, config, prompt + greedy)
    f32_logits.astype("<f4").tofile(out / f"{name}.dequant_f32_logits.f32")
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    ref = {
        "format": "deepinfer-gguf-tiny-fixture-1",
        "name": name,
        "file": f"{name}.gguf",
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "architecture": arch,
        "ftype": ftype,
        "tensor_types": types,
        "tensors": {t.name: {"type": t.tensor_type.name, "ne": [int(x) for x in t.shape]}
                    for t in reader.tensors},
        "seed": seed,
        "config": {k: v for k, v in cfg.items()},
        "prompt": prompt,
        "logits_file": f"{name}.logits.f32",
        "logits_shape": [N_PROMPT + N_GREEDY, config.vocab_size],
        "argmax": np.argmax(logits, axis=1).tolist(),
        "greedy": greedy,
        "dequant_f32_logits_file": f"{name}.dequant_f32_logits.f32",
        "dequant_f32_argmax": np.argmax(f32_logits, axis=1).tolist(),
        "dequant_f32_max_abs_diff": float(np.abs(f32_logits - logits).max()),
        "oracle": {**llama_cpp_versions(), "gguf": "0.19.0",
                   "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(),
                   "settings": {k: v for k, v in settings.items() if k != "verbose"},
                   "quantize": "llama_model_quantize, default params, nthread 1"},
    }
    (out / f"{name}.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"{name}: {path.stat().st_size} bytes, {types}, greedy {greedy[:8]}...")


# DeepSeek-V3 as llama.cpp users get it: name: (the tiny checkpoint it converts,
# convert_hf_to_gguf.py's --outtype[, then llama_model_quantize's ftype]). The
# converter writes llama.cpp's deepseek2 layout: routed experts stacked
# (ffn_*_exps, 3-D), kv_b split into attn_k_b (transposed per head) and attn_v_b,
# key_length = kv_lora_rank + rope with key_length_mla / value_length_mla, no MTP.
# llama.cpp 0.3.36 loads a deepseek2 file without attention.q_lora_rank only when
# it has 27 layers (its "V2-Lite" test): the tiny noqlora file is checked against
# transformers alone.
DSV3_GGUF = {
    "dsv3-qlora-bf16": ("dsv3-qlora-bf16", "bf16"),
    "dsv3-noqlora-yarn-f32": ("dsv3-noqlora-yarn-f32", "f32"),
    "dsv3-qlora-q8_0": ("dsv3-qlora-bf16", "q8_0"),
    # rows of 64 (hidden) and 32 (experts): every K-quant of the mix falls back,
    # to Q5_0 and Q8_0
    "dsv3-qlora-q4_k_m": ("dsv3-qlora-bf16", "bf16", "Q4_K_M"),
}
DSV3_GGUF_NO_LLAMA_CPP = {"dsv3-noqlora-yarn-f32"}
# DeepSeek-V4 as llama.cpp users get it, in the same form: llama.cpp's
# deepseek4 layout (routed experts stacked, in ggml's MXFP4 blocks; tid2eid as
# I32; DeepSeek's release names in, llama.cpp's out). The converter reads only
# the release layout (make_dsv4_fixtures.py dsv4-gguf-release, whose
# non-expert weights are bf16 so the GGUF holds exactly the checkpoint's).
DSV4_GGUF = {
    "dsv4-gguf-bf16": ("dsv4-gguf-release", "bf16"),
    "dsv4-gguf-q8_0": ("dsv4-gguf-release", "bf16", "Q8_0"),
    # rows of 64 and 32: every K-quant of the mix falls back (Q5_0, Q8_0, F16)
    "dsv4-gguf-q4_k_m": ("dsv4-gguf-release", "bf16", "Q4_K_M"),
}
# and its MTP layer as the converter's --mtp writes it: a GGUF of its own
DSV4_MTP_GGUF = "dsv4-gguf-mtp"
LLAMA_CPP_PYTHON = "0.3.36"


def llama_cpp_source():
    """vendor/llama.cpp of the pinned llama-cpp-python source distribution (PyPI),
    extracted once into $DI_CACHE/sdist/ (its converter is not in the wheel)."""
    import os
    import subprocess
    import tarfile
    cache = pathlib.Path(os.environ.get("DI_CACHE") or
                         pathlib.Path(os.environ.get("XDG_CACHE_HOME") or
                                      pathlib.Path.home() / ".cache") / "deepinfer") / "sdist"
    root = cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    if not (root / "vendor/llama.cpp/convert_hf_to_gguf.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        tgz = cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
        if not tgz.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", "--disable-pip-version-check", "-d",
                            str(cache), f"llama-cpp-python=={LLAMA_CPP_PYTHON}"], check=True)
        with tarfile.open(tgz) as t:
            t.extractall(cache, filter="data")
    return root / "vendor" / "llama.cpp"


def convert_dsv3(src, path, outtype):
    """llama.cpp's convert_hf_to_gguf.py on the DeepSeek-V3 checkpoint src.
    scoring_func and topk_method are added as DeepSeek's own config.json has
    them: transformers' DeepseekV3Config drops them, and without scoring_func
    the converter writes no expert_gating_func, which llama.cpp then reads as
    softmax (docs/deepseek-v3.md)."""
    convert_checkpoint(src, path, outtype, dict(scoring_func="sigmoid", topk_method="noaux_tc"))


def stand_in_tokenizer(folder, vocab_size):
    """The tokenizer a converter is given for a checkpoint without one, into
    folder (made when missing): a byte-level BPE of vocab_size tokens (the byte
    alphabet, one merge, then <tN> placeholders; bos <t300>, eos <t301>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    folder.mkdir(exist_ok=True)
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["\u0120t"] = len(vocab)
    for i in range(len(vocab), vocab_size):
        vocab[f"<t{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("\u0120", "t")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<t300>",
         "eos_token": "<t301>"}))


def convert_checkpoint(src, path, outtype, config_update=None, extra_args=()):
    """llama.cpp's convert_hf_to_gguf.py on the checkpoint src (its config.json
    updated with config_update; extra_args after the others, e.g. --mtp). A
    converter needs a tokenizer: stand_in_tokenizer's, of the checkpoint's
    vocabulary size, stands in, named
    "deepseek-v3" (the hash the converter would look up is the real
    tokenizer's)."""
    import shutil
    import subprocess
    import tempfile

    llama = llama_cpp_source()
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp) / src.name  # the converter names the model after its folder
        d.mkdir()
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(config_update or {})
        (d / "config.json").write_text(json.dumps(cfg))
        shutil.copy(src / "model.safetensors", d / "model.safetensors")
        stand_in_tokenizer(d, cfg["vocab_size"])
        # In a fresh interpreter: the converter imports its own gguf-py, not the
        # gguf package this script uses.
        boot = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); "
                "import conversion.base as b; "
                "b.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'deepseek-v3'; "
                "sys.argv = ['convert_hf_to_gguf.py'] + sys.argv[2:]; "
                "runpy.run_path(sys.argv[0] if False else sys.path[0] + '/convert_hf_to_gguf.py', "
                "run_name='__main__')")
        subprocess.run([sys.executable, "-c", boot, str(llama), str(d), "--outfile", str(path),
                        "--outtype", outtype, *extra_args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_dsv3_gguf(name):
    """gguf-dsv3/<name>.gguf and llama.cpp's logits on it, in the gguf-tiny
    fixture format: the checkpoint's reference prompt (one batch), then its
    greedy tokens one at a time (tests/fixtures/model/README.md)."""
    make_deepseek_gguf(name, DSV3_GGUF, "gguf-dsv3", "deepseek2", convert_dsv3)


def make_dsv4_gguf(name):
    """gguf-dsv4/<name>.gguf and llama.cpp's logits on it, as make_dsv3_gguf."""
    if name == DSV4_MTP_GGUF:
        make_dsv4_mtp_gguf()
        return
    make_deepseek_gguf(name, DSV4_GGUF, "gguf-dsv4", "deepseek4", convert_checkpoint)


def make_dsv4_mtp_gguf():
    """gguf-dsv4/dsv4-gguf-mtp.gguf: the MTP layer of dsv4-gguf-release as
    llama.cpp's converter writes it with --mtp (a GGUF of its own, the draft
    beside dsv4-gguf-bf16.gguf, which must be made first), and the MTP logits
    on both files' dequantized weights."""
    import hashlib
    src = ROOT / "tests" / "fixtures" / "model" / "dsv4-gguf-release"
    out = OUT / "gguf-dsv4"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{DSV4_MTP_GGUF}.gguf"
    convert_checkpoint(src, path, "bf16", extra_args=["--mtp"])
    # the reference on the files' weights (the converter writes eh_proj in Q8_0)
    ref = json.loads((src / "reference.json").read_text())
    tokens = ref["prompt"] + ref["greedy"]
    logits, streams = dsv4_mtp_dequantized_reference(src, out / "dsv4-gguf-bf16.gguf", path,
                                                     tokens)
    logits.astype("<f4").tofile(out / f"{DSV4_MTP_GGUF}.mtp_logits.f32")
    # llama.cpp's MTP on the same streams: how far its rounding (eh_proj's
    # Q8_0, activations quantized for it) takes it from that reference, the
    # bar deepinfer's MTP on these files is held to
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import make_dsv4_fixtures as dsv4
    import numpy as np
    theirs = dsv4.llama_cpp_mtp_logits(path, streams, tokens, logits.shape[1])
    span = float(logits.max() - logits.min())
    rows = np.abs(theirs - logits).max(axis=1) / span
    fixture = {"format": "deepinfer-gguf-mtp-fixture-1", "name": DSV4_MTP_GGUF,
               "file": path.name, "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
               "architecture": "deepseek4", "checkpoint": "dsv4-gguf-release",
               "target": "dsv4-gguf-bf16.gguf",
               "convert": f"convert_hf_to_gguf.py --outtype bf16 --mtp (llama-cpp-python "
                          f"{LLAMA_CPP_PYTHON}'s vendored llama.cpp)",
               "mtp_logits_file": f"{DSV4_MTP_GGUF}.mtp_logits.f32",
               "mtp_logits_shape": list(logits.shape),
               "mtp_logits": "transformers' decoder layer as the MTP block (make_dsv4_fixtures."
                             "mtp_run) on both files' weights dequantized by gguf-py, over the "
                             "checkpoint's prompt + greedy sequence",
               # llama.cpp's MTP context on the files and the same streams, against
               # mtp_logits: its largest and median row difference over the range
               "llama_cpp_max_rel_diff": round(float(rows.max()), 6),
               "llama_cpp_median_rel_diff": round(float(np.median(rows)), 6),
               "llama_cpp_argmax_agreement": round(float(
                   (theirs.argmax(axis=1) == logits.argmax(axis=1)).mean()), 6)}
    (out / f"{DSV4_MTP_GGUF}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{DSV4_MTP_GGUF}: {path.stat().st_size} bytes")


# llama.cpp's deepseek4 tensor names back to the names transformers'
# save_pretrained writes ("model.layers.N." + DeepSeek's release suffix; the
# inverse of the converter's DeepseekV4Model._map_dsv4_tensor_name)
DSV4_GGUF_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "head.weight",
                 "output_norm.weight": "model.norm.weight",
                 "output_hc_fn.weight": "model.hc_head.hc_fn",
                 "output_hc_base.weight": "model.hc_head.hc_base",
                 "output_hc_scale.weight": "model.hc_head.hc_scale"}
DSV4_GGUF_LAYER = {
    "attn_sinks.weight": "attn.attn_sink", "attn_q_a.weight": "attn.wq_a.weight",
    "attn_q_b.weight": "attn.wq_b.weight", "attn_q_a_norm.weight": "attn.q_norm.weight",
    "attn_kv.weight": "attn.wkv.weight", "attn_kv_a_norm.weight": "attn.norm.weight",
    "attn_output_a.weight": "attn.wo_a.weight", "attn_output_b.weight": "attn.wo_b.weight",
    "attn_compressor_ape.weight": "attn.compressor.ape",
    "attn_compressor_kv.weight": "attn.compressor.wkv.weight",
    "attn_compressor_gate.weight": "attn.compressor.wgate.weight",
    "attn_compressor_norm.weight": "attn.compressor.norm.weight",
    "indexer.attn_q_b.weight": "attn.indexer.wq_b.weight",
    "indexer.proj.weight": "attn.indexer.weights_proj.weight",
    "indexer_compressor_ape.weight": "attn.indexer.compressor.ape",
    "indexer_compressor_kv.weight": "attn.indexer.compressor.wkv.weight",
    "indexer_compressor_gate.weight": "attn.indexer.compressor.wgate.weight",
    "indexer_compressor_norm.weight": "attn.indexer.compressor.norm.weight",
    "attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "hc_attn_fn.weight": "hc_attn_fn", "hc_attn_base.weight": "hc_attn_base",
    "hc_attn_scale.weight": "hc_attn_scale", "hc_ffn_fn.weight": "hc_ffn_fn",
    "hc_ffn_base.weight": "hc_ffn_base", "hc_ffn_scale.weight": "hc_ffn_scale",
    "ffn_gate_inp.weight": "ffn.gate.weight", "exp_probs_b.bias": "ffn.gate.bias",
    "ffn_gate_tid2eid.weight": "ffn.gate.tid2eid",
    "ffn_gate_shexp.weight": "ffn.shared_experts.w1.weight",
    "ffn_down_shexp.weight": "ffn.shared_experts.w2.weight",
    "ffn_up_shexp.weight": "ffn.shared_experts.w3.weight",
}
DSV4_GGUF_EXPERTS = {"ffn_gate_exps.weight": "w1", "ffn_down_exps.weight": "w2",
                     "ffn_up_exps.weight": "w3"}


def dsv4_gguf_state(reader):
    """The deepseek4 GGUF's tensors dequantized by the gguf package, under the
    names transformers' save_pretrained writes (DSV4_GGUF_*; the stacked
    experts one per expert); the names those tables lack (an MTP GGUF's
    blk.N.nextn.*) as they are."""
    import gguf
    import numpy as np
    import torch
    state = {}
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.I32:  # tid2eid
            a = torch.from_numpy(np.array(t.data, dtype=np.int64))
        else:
            a = torch.from_numpy(np.ascontiguousarray(
                gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
        if t.name in DSV4_GGUF_TOP:
            state[DSV4_GGUF_TOP[t.name]] = a
            continue
        layer, rest = t.name[len("blk."):].split(".", 1)
        if rest in DSV4_GGUF_EXPERTS:
            for e in range(a.shape[0]):
                state[f"model.layers.{layer}.ffn.experts.{e}.{DSV4_GGUF_EXPERTS[rest]}.weight"] = \
                    a[e].contiguous()
        elif rest in DSV4_GGUF_LAYER:
            state[f"model.layers.{layer}.{DSV4_GGUF_LAYER[rest]}"] = a
        else:
            state[t.name] = a
    return state


def dsv4_from_state(src, state, tmp, config_update=None):
    """transformers' DeepseekV4ForCausalLM (float32, eager) on state with the
    checkpoint src's config (updated), saved in the folder tmp."""
    import safetensors.torch
    import torch
    from transformers import DeepseekV4ForCausalLM
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("quantization_config", None)
    cfg.update(config_update or {})
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(cfg))
    safetensors.torch.save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    model = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    return model


def dsv4_dequantized_reference(src, reader, tokens):
    """transformers' DeepseekV4ForCausalLM in float32 on the deepseek4 GGUF's
    weights dequantized by the gguf package (the checkpoint src's config):
    logits [len(tokens), vocab] of tokens in one pass."""
    import tempfile
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        model = dsv4_from_state(src, dsv4_gguf_state(reader), pathlib.Path(tmp))
        with torch.no_grad():
            return model(torch.tensor([tokens]), use_cache=False).logits[0].numpy()


def dsv4_mtp_dequantized_reference(src, target, mtp, tokens):
    """The MTP layer of the GGUF mtp (llama.cpp's --mtp output) on the main
    model of the GGUF target, both dequantized by the gguf package, computed as
    make_dsv4_fixtures.mtp_run does: the block is transformers' decoder layer
    L of a model one layer longer, e_proj and h_proj the halves of the file's
    eh_proj, the MTP's mHC head the file's output_hc_*. Logits [len - 1, vocab]
    (row i: the streams of tokens[i] and tokens[i + 1]) and the main model's
    streams [len, hc, n_embd]."""
    import tempfile
    import gguf
    import torch
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import make_dsv4_fixtures as dsv4
    main = dsv4_gguf_state(gguf.GGUFReader(target))
    extra = dsv4_gguf_state(gguf.GGUFReader(mtp))
    cfg = json.loads((src / "config.json").read_text())
    L = cfg["num_hidden_layers"]
    block = {k: v for k, v in extra.items() if k.startswith(f"model.layers.{L}.")}
    with tempfile.TemporaryDirectory() as tmp:
        model = dsv4_from_state(src, main, pathlib.Path(tmp) / "main")
        big = dsv4_from_state(src, dict(main, **block), pathlib.Path(tmp) / "big",
                              {"num_hidden_layers": L + 1,
                               "layer_types": cfg["layer_types"] + ["sliding_attention"],
                               "mlp_layer_types": cfg["mlp_layer_types"] + ["moe"]})
    E = cfg["hidden_size"]
    parts = dsv4.mtp_parts(model.config, torch)
    eh = extra[f"blk.{L}.nextn.eh_proj.weight"]  # [E, 2 E]: [e; h] in
    with torch.no_grad():
        parts["enorm"].weight.copy_(extra[f"blk.{L}.nextn.enorm.weight"])
        parts["hnorm"].weight.copy_(extra[f"blk.{L}.nextn.hnorm.weight"])
        parts["norm"].weight.copy_(extra[f"blk.{L}.nextn.shared_head_norm.weight"])
        parts["e_proj"].weight.copy_(eh[:, :E])
        parts["h_proj"].weight.copy_(eh[:, E:])
        for k in ("fn", "base", "scale"):
            getattr(parts["hc_head"], f"hc_{k}").copy_(
                extra[f"model.hc_head.hc_{k}"].reshape(getattr(parts["hc_head"], f"hc_{k}").shape))
    streams = dsv4.last_streams(model, torch.tensor([tokens]), torch)
    return dsv4.mtp_run(model, big, parts, streams[:-1], tokens[1:], torch)[0].numpy(), streams


def make_deepseek_gguf(name, table, folder, architecture, convert):
    """<folder>/<name>.gguf, converted from table[name]'s checkpoint by convert
    (then quantized when the entry says), and llama.cpp's logits on it."""
    import hashlib
    import logging

    import gguf
    import llama_cpp
    import numpy as np
    logging.disable(logging.INFO)
    import tempfile
    src_name, outtype, *quantize = table[name]
    src = ROOT / "tests" / "fixtures" / "model" / src_name
    out = OUT / folder
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.gguf"
    if quantize:
        with tempfile.TemporaryDirectory() as tmp:
            converted = pathlib.Path(tmp) / "converted.gguf"
            convert(src, converted, outtype)
            llama_quantize(converted, path, quantize[0], name)
    else:
        convert(src, path, outtype)
    if name in DSV3_GGUF_NO_LLAMA_CPP:
        print(f"{name}: {path.stat().st_size} bytes (llama.cpp cannot load it)")
        return
    ref = json.loads((src / "reference.json").read_text())
    prompt = ref["prompt"]
    logits, greedy, settings = llama_cpp_greedy(path, prompt)
    logits.astype("<f4").tofile(out / f"{name}.logits.f32")
    reader = gguf.GGUFReader(path)
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    same = next((i for i, (a, b) in enumerate(zip(greedy, ref["greedy"])) if a != b),
                len(greedy))
    dequant = {}
    if architecture == "deepseek4":
        # transformers in float32 on the GGUF's weights dequantized: the
        # reference without llama.cpp's quantization of activations (rows as
        # in logits_file), as the gguf-tiny fixtures have it
        f32_logits = dsv4_dequantized_reference(src, reader, prompt + greedy)
        f32_logits.astype("<f4").tofile(out / f"{name}.dequant_f32_logits.f32")
        dequant = {"dequant_f32_logits_file": f"{name}.dequant_f32_logits.f32",
                   "dequant_f32_argmax": np.argmax(f32_logits, axis=1).tolist(),
                   "dequant_f32_max_abs_diff": float(np.abs(f32_logits - logits).max())}
    fixture = {
        "format": "deepinfer-gguf-tiny-fixture-1",
        "name": name,
        "file": f"{name}.gguf",
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "architecture": architecture,
        "checkpoint": src_name,
        "outtype": outtype,
        "tensor_types": types,
        "tensors": {t.name: {"type": t.tensor_type.name, "ne": [int(x) for x in t.shape]}
                    for t in reader.tensors},
        "prompt": prompt,
        "logits_file": f"{name}.logits.f32",
        "logits_shape": [len(prompt) + N_GREEDY, int(logits.shape[1])],
        "argmax": np.argmax(logits, axis=1).tolist(),
        "greedy": greedy,
        "greedy_same_as_transformers": same,
        **dequant,
        "oracle": {**llama_cpp_versions(),
                   "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(),
                   "settings": {k: v for k, v in settings.items() if k != "verbose"},
                   "convert": f"convert_hf_to_gguf.py --outtype {outtype} (llama-cpp-python "
                              f"{LLAMA_CPP_PYTHON} sdist)"
                              + (f", then llama_model_quantize {quantize[0]}" if quantize else "")},
    }
    (out / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{name}: {path.stat().st_size} bytes, {types}, llama.cpp greedy = transformers' "
          f"for {same} of {len(greedy)}")


def json_differs(a, b, tol, where="$"):
    """The path of the first difference between two JSON values (None when
    equal): floats within tol, everything else exactly."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol
        return None if ok else where
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where} (keys)"
        for k in a:
            w = json_differs(a[k], b[k], tol, f"{where}.{k}")
            if w:
                return w
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where} (length)"
        for i, (x, y) in enumerate(zip(a, b)):
            w = json_differs(x, y, tol, f"{where}[{i}]")
            if w:
                return w
        return None
    return None if a == b else where


def compare(committed, live):
    """Differences between two fixture trees: weight files must be identical; JSON
    token lists equal; float32 logits within tolerance (another CPU may pick other
    SIMD paths in torch or llama.cpp, which moves the last bits)."""
    import numpy as np

    problems = []
    for path in sorted(live.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(live)
        ref = committed / rel
        if not ref.exists():
            problems.append(f"{rel}: not committed")
        elif path.suffix == ".f32":
            a = np.fromfile(ref, "<f4")
            b = np.fromfile(path, "<f4")
            tol = 2e-2 if "gguf" in str(rel) else 1e-4
            if a.shape != b.shape or not np.allclose(a, b, rtol=0, atol=tol):
                err = np.abs(a - b).max() if a.shape == b.shape else "shape"
                problems.append(f"{rel}: logits differ (max abs {err}, tolerance {tol})")
        elif path.suffix == ".json":
            a, b = json.loads(ref.read_text()), json.loads(path.read_text())
            for d in (a, b):
                d.pop("oracle", None)
                for case in d.get("cases", []):
                    for pos in case.get("positions", []):
                        pos.pop("top_logits")
            # Token ids, counts and config exactly; a float summary (such as
            # dequant_f32_max_abs_diff, computed from the logits compared above)
            # within the logits' tolerance.
            tol = 2e-2 if "gguf" in str(rel) else 1e-4
            where = json_differs(a, b, tol)
            if where:
                problems.append(f"{rel}: differs at {where} (tokens, ids or config)")
        elif path.read_bytes() != ref.read_bytes():
            problems.append(f"{rel}: bytes differ")
    return problems


def fixtures_main(argv, table, make, what):
    """The main of a fixture family's script (make_dsv4_fixtures.py,
    make_dsv41_fixtures.py): [--check] [NAME ...] makes each named fixture of table
    (all without names) with make(name) into OUT, or with --check into a scratch
    folder compared with the committed ones (exit 1 on a difference)."""
    global OUT
    check = None
    if argv[:1] == ["--check"]:
        import tempfile
        check = tempfile.TemporaryDirectory()
        OUT = pathlib.Path(check.name)
        argv = argv[1:]
    for name in argv or list(table):
        if name not in table:
            sys.exit(f"unknown fixture {name!r} (one of {', '.join(table)})")
        make(name)
    if check:
        problems = compare(ROOT / "tests" / "fixtures" / "model", OUT)
        for p in problems:
            print("FAIL:", p)
        if problems:
            sys.exit(1)
        print(f"ok: the live oracle reproduces the committed {what} fixtures")


def main(argv):
    global OUT
    check = None
    if argv[:1] == ["--check"]:
        # Regenerate into a scratch folder and compare with the committed files.
        import tempfile
        check = tempfile.TemporaryDirectory()
        OUT = pathlib.Path(check.name)
        argv = argv[1:]
    if argv[:1] == ["tiny"]:
        for name in argv[1:] or list(TINY):
            make_tiny(name)
    elif argv[:1] == ["dsv3"]:
        for name in argv[1:] or list(DSV3):
            make_dsv3(name)
    elif argv[:1] == ["dsv3-gguf"]:
        for name in argv[1:] or list(DSV3_GGUF):
            make_dsv3_gguf(name)
    elif argv[:1] == ["dsv4-gguf"]:
        for name in argv[1:] or list(DSV4_GGUF) + [DSV4_MTP_GGUF]:
            make_dsv4_gguf(name)
    elif argv[:1] == ["tiny-gguf"]:
        for name in argv[1:] or list(TINY_GGUF):
            make_tiny_gguf(name)
    elif argv[:1] == ["gguf"] and len(argv) >= 2:
        for name in argv[2:] or list(GGUF):
            if not argv[2:] and not (pathlib.Path(argv[1]) / GGUF[name]).exists():
                # R1-Distill-Qwen-7B cannot be assembled from PyPI today (docs/models.md).
                print(f"{name}: skipped, {GGUF[name]} is not in {argv[1]}", file=sys.stderr)
                continue
            make_gguf(argv[1], name)
    else:
        sys.exit(__doc__)
    if check:
        problems = compare(ROOT / "tests" / "fixtures" / "model", OUT)
        for p in problems:
            print("FAIL:", p)
        if problems:
            sys.exit(1)
        print("ok: the live oracle reproduces the committed fixtures")


if __name__ == "__main__":
    main(sys.argv[1:])
