#!/usr/bin/env python3
"""Chained MTP drafts of the dsv3-mtp-f32 fixture, by transformers (the oracle of
test_mtp_drafter_first_draft_matches_transformers in tests/unit/test_model_deepseek.c).

    make_mtp_chain_fixture.py          write tests/fixtures/model/dsv3-mtp-f32/mtp_chain.json
    make_mtp_chain_fixture.py --check  recompute and compare with the committed file

For each P of PREFIXES, over the fixture's prompt + greedy sequence x: the main
model's final normed hidden states h_0 .. h_{P-1} of x_0 .. x_{P-1}; transformers'
MtpLayer (DeepseekV3DecoderLayer, the fixture's MTP tensors, model.layers.3) over
the pairs (h_i, x_{i+1}) at positions i + 1, no cache, a causal mask; draft 0 is
the argmax of shared_head (post_norm, the LM head) over the last pair's output g_0;
draft j the argmax over the output g_j of the module run again with the pair
(g_{j-1}, draft j - 1) appended at the next position — chaining the module's own
output before its norm, as vLLM's DeepSeekMTP proposer and llama.cpp's NextN
drafting feed it back (DeepSeek-V3 §2.2 gives only the first depth). "margins"
holds each draft's gap between its top two logits (none is a near-tie).

Run with the model oracle venv: scripts/oracle-venv.sh --model.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DIR = ROOT / "tests" / "fixtures" / "model" / "dsv3-mtp-f32"
PREFIXES = [3, 8, 16, 25, 37, 46]
N_DRAFTS = 4


def load_mtp(model, config, state):
    """transformers' MtpLayer with the fixture's model.layers.<L>.* tensors (experts
    stored one per expert, as checkpoints do, fused back as transformers 5 holds them)."""
    import torch
    from transformers.modeling_layers import MtpLayer
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3DecoderLayer,
                                                                      DeepseekV3RMSNorm)
    L = config.num_hidden_layers
    mtp = MtpLayer(config, DeepseekV3DecoderLayer, DeepseekV3RMSNorm, L).to(torch.float32).eval()
    pre = f"model.layers.{L}."
    names = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight",
             "eh_proj.weight": "eh_proj.weight", "post_norm.weight": "shared_head.norm.weight"}
    with torch.no_grad():
        for mine, theirs in names.items():
            dict(mtp.named_parameters())[mine].copy_(state[pre + theirs])
        block = mtp.mtp_block.state_dict()
        for k, v in block.items():
            if k.endswith("mlp.experts.gate_up_proj"):
                base = pre + k[:-len("gate_up_proj")]
                v.copy_(torch.stack([torch.cat([state[f"{base}{e}.gate_proj.weight"],
                                                state[f"{base}{e}.up_proj.weight"]])
                                     for e in range(v.shape[0])]))
            elif k.endswith("mlp.experts.down_proj"):
                base = pre + k[:-len("down_proj")]
                v.copy_(torch.stack([state[f"{base}{e}.down_proj.weight"]
                                     for e in range(v.shape[0])]))
            else:
                v.copy_(state[pre + k])
        mtp.mtp_block.load_state_dict(block)
    return mtp


def chain(model, mtp, seq, P):
    import torch
    with torch.no_grad():
        ids = torch.tensor([seq[:P]])
        hidden = model(ids, output_hidden_states=True).hidden_states[-1]  # [1, P, E], normed
        toks = list(seq[1:P + 1])
        drafts, margins = [], []
        for _ in range(N_DRAFTS):
            n = len(toks)
            pos = torch.arange(1, n + 1)[None]
            emb = model.model.embed_tokens(torch.tensor([toks]))
            x = mtp.eh_proj(torch.cat([mtp.enorm(emb), mtp.hnorm(hidden)], dim=-1))
            cos_sin = model.model.rotary_emb(x, pos)
            mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
            out = mtp.mtp_block(x, attention_mask=mask, position_embeddings=cos_sin,
                                position_ids=pos)
            g = out[:, -1:]
            logits = model.lm_head(mtp.post_norm(g))[0, 0]
            top = torch.topk(logits, 2)
            d = int(top.indices[0])
            drafts.append(d)
            margins.append(float(top.values[0] - top.values[1]))
            hidden = torch.cat([hidden, g], dim=1)  # the module's own output, before its norm
            toks.append(d)
    return drafts, margins


def main(argv):
    import safetensors.torch
    import torch
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(0)
    ref = json.loads((DIR / "reference.json").read_text())
    seq = ref["prompt"] + ref["greedy"]
    model = DeepseekV3ForCausalLM.from_pretrained(DIR, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    state = safetensors.torch.load_file(DIR / "model.safetensors")
    mtp = load_mtp(model, model.config, state)
    # the first draft must be the committed mtp_logits' argmax (the same module)
    import numpy as np
    want = np.fromfile(DIR / "mtp_logits.f32", dtype="<f4").reshape(len(seq) - 1, -1)
    out = {"prefixes": PREFIXES, "n_drafts": N_DRAFTS, "drafts": [], "margins": [],
           "oracle": "transformers' MtpLayer chained on its own output (see the script)"}
    for P in PREFIXES:
        d, m = chain(model, mtp, seq, P)
        assert d[0] == int(want[P - 1].argmax()), (P, d[0], int(want[P - 1].argmax()))
        out["drafts"].append(d)
        out["margins"].append([round(v, 6) for v in m])
    text = json.dumps(out, indent=1) + "\n"
    path = DIR / "mtp_chain.json"
    if argv[:1] == ["--check"]:
        old = json.loads(path.read_text())
        if old["drafts"] != out["drafts"]:
            print(f"mtp_chain.json differs: {old['drafts']} != {out['drafts']}")
            return 1
        print("ok: mtp_chain.json")
        return 0
    path.write_text(text)
    print(f"wrote {path}: {out['drafts']}, smallest margin {min(min(m) for m in out['margins'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
