#!/usr/bin/env python3
"""Hold dsv41_reference.py's parts to the public PyTorch references of DeepSeek's
own V4.1 kernels, on random inputs, and its whole model to causality (and
dsv41_dspark_reference.py's DSpark head to DeepInfer's references of its parts):

  tile-kernels 2.1.0 (PyPI wheel)      tile_kernels/torch: mhc_pre_norm_fn_ref,
                                       mhc_pre_split_mixes_ref, sinkhorn_normalize_ref,
                                       mhc_post_ref, moe_topk_gate_forward, swiglu_forward,
                                       rotary_embedding_ref
  deepinfer-gemm 2.8.2 (PyPI sdist)    tests/test_mega_mhc.py mhc_reference (the shifted
                                       single-pass mHC step), tests/test_attention.py
                                       ref_mqa_logits (the indexer's logits)
  deepinfer 0.1.0 (PyPI sdist)         compress_and_update_state_prefill_ref (ratio-2
                                       compression), prepare_v4_decode_metadata_ref
                                       (what a query sees: window, entries, positions_c),
                                       the YaRN inverse frequencies of
                                       layers/rotary_embedding.py; for the DSpark head
                                       (dsv41_dspark_reference.py):
                                       get_fused_dflash_get_input_ref (the block's
                                       positions and the keys each row sees),
                                       dflash_input_store_ref (the features),
                                       confidence_head_fused_ref; for the candidate-block
                                       top-k: candidate_block_max_ref,
                                       get_candidate_compact_lens_ref,
                                       restore_candidate_indices_inplace_ref

The packages need GPUs to import, so each reference function is read out of its
file (its source, not the package: the kernels' modules are never imported) with
device="cuda" replaced by the CPU. The sdists and the wheel are downloaded once into
$DI_CACHE/sdist (from PyPI, sha256-checked). Exit 0 when every check holds; each line says what
was compared and the largest difference.

    check_dsv41_ops.py [--keep DIR]   (model oracle venv: scripts/oracle-venv.sh --model)
"""
import ast
import importlib.util
import json
import os
import pathlib
import sys
import tarfile
import tempfile
import types
import zipfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv41_dspark_reference as dref  # noqa: E402
import dsv41_reference as ref  # noqa: E402

PINS = {"tile-kernels": "2.1.0", "deepinfer-gemm": "2.8.2", "deepinfer": "0.1.0"}


def cache_dir():
    base = os.environ.get("DI_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "deepinfer")
    d = pathlib.Path(base) / "sdist"
    d.mkdir(parents=True, exist_ok=True)
    return d


def fetch(name):
    """The extracted distribution of a pinned package: its sdist (tile-kernels: its
    pure-Python wheel), fetched by the URL and sha256 PyPI's JSON API gives (pip
    download would run the sdists' GPU builds to read their metadata)."""
    import hashlib
    import urllib.parse
    import urllib.request
    version, cache = PINS[name], cache_dir()
    stem = f"{name.replace('-', '_')}-{version}"
    root = cache / stem
    if root.exists():
        return root
    wheel = name == "tile-kernels"
    index = f"https://pypi.org/pypi/{name}/json"
    with urllib.request.urlopen(index, timeout=60) as r:
        files = json.load(r)["releases"][version]
    want = next(f for f in files if f["packagetype"] == ("bdist_wheel" if wheel else "sdist"))
    archive = cache / want["filename"]
    if not archive.exists():
        # (a mirror may give the URL relative to the index)
        with urllib.request.urlopen(urllib.parse.urljoin(index, want["url"]), timeout=300) as r:
            data = r.read()
        if hashlib.sha256(data).hexdigest() != want["digests"]["sha256"]:
            raise SystemExit(f"{want['filename']}: sha256 differs from PyPI's")
        archive.write_bytes(data)
    if wheel:
        with zipfile.ZipFile(archive) as z:
            z.extractall(root)
    else:
        with tarfile.open(archive) as t:
            t.extractall(cache, filter="data")
    return root


def functions(path, names, extra=None):
    """The named top-level functions of a source file, executed alone in a namespace
    with torch, math and extra (their module's other imports are not run)."""
    text = pathlib.Path(path).read_text()
    ns = {"torch": torch, "math": __import__("math"), "Optional": __import__("typing").Optional,
          "Tuple": __import__("typing").Tuple}
    ns.update(extra or {})
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            src = ast.get_source_segment(text, node)
            src = src.replace("device='cuda'", "device='cpu'").replace('device="cuda"',
                                                                         'device="cpu"')
            exec(compile(src, f"{path}:{node.name}", "exec"), ns)
    missing = [n for n in names if n not in ns]
    if missing:
        raise SystemExit(f"{path}: no {missing}")
    return ns


def tile_kernels_torch():
    """tile_kernels/torch/*.py imported as modules, with tile_kernels.config (which
    imports tilelang) replaced by the two functions they use."""
    root = fetch("tile-kernels") / "tile_kernels"
    pkg = types.ModuleType("tile_kernels")
    pkg.__path__ = [str(root)]
    config = types.ModuleType("tile_kernels.config")
    config.is_ascend = lambda: False
    config.get_token_alignment = lambda: 128
    sys.modules.update({"tile_kernels": pkg, "tile_kernels.config": config})
    mods = {}
    for name in ("utils", "torch.mhc", "torch.topk", "torch.swiglu", "torch.rope"):
        spec = importlib.util.spec_from_file_location(f"tile_kernels.{name}",
                                                      root / (name.replace(".", "/") + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mods[name] = mod
    return mods


FAILED, CHECKED = [], []


def report(what, got, want, tol):
    err = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    ok = err <= tol
    CHECKED.append(what)
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max |difference| {err:.3g} (allowed {tol:g})")
    if not ok:
        FAILED.append(what)


def check_mhc(tk, gemm):
    g = torch.Generator().manual_seed(1)
    T, m, h = 5, 4, 64
    residual = torch.randn(T, m, h, generator=g)
    fn = torch.randn((2 + m) * m, m * h, generator=g) * 0.05
    scale = torch.rand(3, generator=g) + 0.5
    base = torch.randn((2 + m) * m, generator=g) * 0.5
    pre, post, comb = ref.hc_mixes(residual, fn, scale, base, m, 1e-6, 1e-6, 2.0, 20)
    mixes = tk["torch.mhc"].mhc_pre_norm_fn_ref(residual[None], fn, None, 1e-6)
    want_pre, want_post, want_comb = tk["torch.mhc"].mhc_pre_split_mixes_ref(
        mixes, scale, base, m, 2.0, 1e-6)
    want_comb = tk["torch.mhc"].sinkhorn_normalize_ref(want_comb, 20, 1e-6)
    report("mHC pre mix vs mhc_pre_norm_fn_ref + mhc_pre_split_mixes_ref", pre,
           want_pre[0, :, :, 0], 1e-5)
    report("mHC post mix vs mhc_pre_split_mixes_ref", post, want_post[0, :, :, 0], 1e-5)
    report("mHC combination vs sinkhorn_normalize_ref", comb, want_comb[0], 1e-5)
    x = torch.randn(T, h, generator=g)
    report("mHC post vs mhc_post_ref (bf16 out)", ref.hc_post(x, residual, post, comb),
           tk["torch.mhc"].mhc_post_ref(x[None], residual[None], post[None, :, :, None],
                                        comb[None])[0].float(), 0.08)
    # the whole shifted step (post, the previous sub-layer's pre mix applied, the
    # new mixes, the norm) against deepinfer-gemm's mhc_reference; it rounds the
    # residual, the input and the output to bf16, so the inputs are made bf16-exact
    # and the check allows bf16's rounding
    prev_pre = torch.rand(T, m, generator=g) + 0.1
    rms_w = torch.rand(h, generator=g) + 0.5
    out = gemm["mhc_reference"](x.bfloat16(), residual.bfloat16(), post[:, :, None],
                                comb, fn, scale, base, rms_w, m, 1e-6, 1e-6, 2.0, 1e-6, 20,
                                1e-6, 1.0, shifted_prev_mix=prev_pre[:, :, None])
    new_res = ref.hc_post(x.bfloat16().float(), residual.bfloat16().float(), post, comb)
    report("shifted mHC residual vs mhc_reference", new_res, out["new_residual"].float(), 0.05)
    pre2, post2, comb2 = ref.hc_mixes(out["new_residual"].float(), fn, scale, base, m, 1e-6,
                                      1e-6, 2.0, 20)
    report("shifted mHC next pre mix vs mhc_reference", pre2, out["new_prev_mix"][:, :, 0], 1e-4)
    report("shifted mHC next post mix vs mhc_reference", post2, out["new_post_mix"][:, :, 0], 1e-4)
    report("shifted mHC next combination vs mhc_reference", comb2, out["new_comb_res_mix"], 1e-4)
    layer_in = (out["new_residual"].float() * prev_pre[:, :, None]).sum(1)
    report("shifted mHC layer input (the previous pre mix) vs mhc_reference",
           ref.rms_norm(layer_in, rms_w, 1e-6), out["y_bf16"].float(), 0.05)


def check_moe(tk):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(40, 16, generator=g)
    logits[3, 5] = logits[3, 7]  # a tie: the lower expert first
    bias = torch.randn(16, generator=g) * 0.1
    idx, w = ref.moe_gate(logits, bias, 4, 2.5)
    want_idx, want_w = tk["torch.topk"].moe_topk_gate_forward(logits, 4, False, 0, 2.5, 0,
                                                              "sqrtsoftplus", bias=bias)
    report("MoE routes vs moe_topk_gate_forward", idx.float(), want_idx.float(), 0)
    report("MoE weights vs moe_topk_gate_forward", w, want_w, 1e-6)
    x = torch.randn(6, 32, generator=g)
    w1, w3, w2 = (torch.randn(24, 32, generator=g), torch.randn(24, 32, generator=g),
                  torch.randn(32, 24, generator=g))
    gu = torch.cat([x @ w1.t(), x @ w3.t()], 1).contiguous()
    want = tk["torch.swiglu"].swiglu_forward(gu, clamp_value=1.5) @ w2.t()
    report("clamped SwiGLU vs swiglu_forward", ref.swiglu(x, w1, w3, w2, 1.5), want, 1e-4)


def check_rope(tk, di):
    g = torch.Generator().manual_seed(3)
    T, H, d, r = 7, 3, 96, 64
    x = torch.randn(T, H, d, generator=g)
    pos = torch.arange(T) * 5
    for scaling in (None, {"factor": 4.0, "original_max_position_embeddings": 32,
                           "beta_fast": 32, "beta_slow": 1}):
        cos, sin = ref.rope_cos_sin(160000.0, r, pos, scaling)
        got = ref.rope(x, cos, sin)
        # rotary_embedding_ref rotates the leading dims: hand it the trailing ones
        want = tk["torch.rope"].rotary_embedding_ref(x[..., d - r:][None], cos, sin, positions=None,
                                                     interleaved=True)[0]
        what = "YaRN" if scaling else "base"
        report(f"RoPE ({what}, interleaved, trailing {r}) vs rotary_embedding_ref",
               got[..., d - r:], want, 1e-5)
        report(f"RoPE ({what}) leaves the leading dims", got[..., :d - r], x[..., :d - r], 0)
        back = ref.rope(got, cos, sin, conjugate=True)
        report(f"RoPE ({what}) conjugate undoes it", back, x, 1e-5)
    # YaRN's inverse frequencies against DeepInfer's own construction
    ns = di["rope"]
    base, factor, orig = 160000.0, 4.0, 32
    pos_freqs = base ** (torch.arange(0, r, 2, dtype=torch.float) / r)
    low, high = ns["_yarn_find_correction_range"](32, 1, r, base, orig)
    mask = 1 - ns["_yarn_linear_ramp_mask"](low, high, r // 2, dtype=torch.float, device="cpu")
    want_inv = (1.0 / (factor * pos_freqs)) * (1 - mask) + (1.0 / pos_freqs) * mask
    cos, sin = ref.rope_cos_sin(base, r, torch.tensor([1]), {"factor": factor,
                                                             "original_max_position_embeddings": orig,
                                                             "beta_fast": 32, "beta_slow": 1})
    report("YaRN inverse frequencies vs YaRNScalingRotaryEmbedding._compute_inv_freq",
           torch.atan2(sin[0], cos[0]), want_inv, 1e-6)


def check_compress(di):
    g = torch.Generator().manual_seed(4)
    T, d = 11, 16
    score, latent = torch.randn(T, d, generator=g), torch.randn(T, d, generator=g)
    got = ref.compress(score, latent, 2)
    state = torch.zeros(1, 4, 2, d)
    cu = torch.tensor([0, T])
    want = di["compress"]["compress_and_update_state_prefill_ref"](
        score, latent, state, torch.tensor([0]), torch.zeros(T // 2, dtype=torch.int32), cu, cu,
        torch.tensor([0, T // 2]), 2)
    report("ratio-2 compression vs compress_and_update_state_prefill_ref (bf16 out)", got,
           want.float(), 0.02)


def check_visibility(di):
    """What a decode query at each position sees, by DeepInfer's decode metadata:
    the window [pos - len + 1, pos], the (pos + 1) // r visible entries of ratio r,
    an entry's RoPE position (its first token) when pos completes it."""
    T, W, bs = 40, 8, 16
    for ratio in (1, 2):
        n = T
        seqlens = torch.tensor([n], dtype=torch.int32)
        out = {k: torch.zeros(n, dtype=torch.int32) for k in
               ("positions", "context_lens", "slot", "query", "state")}
        klen = torch.zeros(1, n, dtype=torch.int32)
        ca = torch.zeros(1, n, 2, dtype=torch.int32)
        swa = torch.zeros(n, 2, dtype=torch.int32)
        pos_c = torch.zeros(1, n, dtype=torch.int32)
        slot_c = torch.zeros(1, n, dtype=torch.int32)
        bt_out = torch.zeros(n, 8, dtype=torch.int32)
        di["meta"]["prepare_v4_decode_metadata_ref"](
            seqlens, seqlens, seqlens.clone(), torch.arange(8, dtype=torch.int32),
            torch.tensor([0, 8], dtype=torch.int32), torch.tensor([0], dtype=torch.int32),
            torch.tensor([False]), out["positions"], torch.zeros(n, dtype=torch.bool),
            torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool),
            out["context_lens"], klen, ca, swa, out["slot"], out["query"], out["state"], bt_out,
            pos_c, slot_c, max_seqlen_q=n, max_num_blocks=8, window_size=W, swa_block_size=bs,
            block_size=bs, ca_ratios=(ratio,), dense_ratios=(ratio,), sparse_ratios=(ratio,))
        pos = out["positions"]
        report(f"ratio {ratio}: visible entries (pos + 1) // r vs the decode metadata",
               torch.tensor([(p + 1) // ratio for p in pos.tolist()]).float(), klen[0].float(), 0)
        report(f"ratio {ratio}: window length min(pos + 1, W) vs the decode metadata",
               torch.tensor([min(p + 1, W) for p in pos.tolist()]).float(), swa[:, 1].float(), 0)
        done = [(p + 1) % ratio == 0 for p in pos.tolist()]
        want = torch.tensor([((p + 1) // ratio - 1) * ratio if d else 0
                             for p, d in zip(pos.tolist(), done)])
        report(f"ratio {ratio}: a completed entry's RoPE position (its first token)",
               want.float(), pos_c[0].float(), 0)


def check_indexer(gemm):
    g = torch.Generator().manual_seed(5)
    T, n, H, d = 6, 9, 4, 32
    q, k, w = torch.randn(T, H, d, generator=g), torch.randn(n, d, generator=g), \
        torch.randn(T, H, generator=g)
    want, _ = gemm["ref_mqa_logits"](q, k, w, torch.zeros(T, dtype=torch.long),
                                     torch.full((T,), n, dtype=torch.long))
    report("indexer logits vs ref_mqa_logits", ref.indexer_logits(q, k, w), want, 1e-4)


def check_sink_attention():
    g = torch.Generator().manual_seed(6)
    H, n, d = 4, 7, 32
    q, keys, sink = torch.randn(H, d, generator=g), torch.randn(n, d, generator=g), \
        torch.randn(H, generator=g)
    logits = torch.cat([(q @ keys.t()) * d ** -0.5, sink[:, None]], 1)
    want = logits.softmax(-1)[:, :n] @ keys  # the sink as one more logit with no value
    report("sink attention vs the softmax with the sink as a valueless logit",
           ref.sink_attention(q, keys, sink, d ** -0.5), want, 1e-5)


def check_engram():
    """The reference's Engram gate against tile-kernels' engram_gate_ref (bf16 inputs
    and output there: the tolerance is bf16's rounding of outputs near 4); a dot of
    exactly 0 gives the gate 1/2 in both."""
    tk = functions(fetch("tile-kernels") / "tile_kernels" / "torch" / "engram.py",
                   ["engram_gate_ref"])
    g = torch.Generator().manual_seed(9)
    T, m, h = 6, 4, 64
    x = torch.randn(T, m, h, generator=g).bfloat16()
    kv = torch.randn(T, m + 1, h, generator=g).bfloat16()
    kv[0, :m] = 0  # dot 0: sign 0, gate sigmoid(0)
    wh = (1 + 0.1 * torch.randn(m, h, generator=g)).bfloat16()
    we = (1 + 0.1 * torch.randn(m, h, generator=g)).bfloat16()
    want = tk["engram_gate_ref"](x, kv, wh, we, 1e-6, 1e-6)
    got = ref.engram_gate(x.float(), kv[:, :m].float(), kv[:, m].float(), wh.float(), we.float(),
                          1e-6)
    report("engram gate vs engram_gate_ref", got.bfloat16().float(), want.float(), 3.2e-2)


def _padded(rows, width):
    """Lists of indices -> int32 [len(rows), width], -1 after each row's."""
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.int32)


def _compact_topk(cb, logits, visible, blocks, block_size, k, width):
    """The consumer's top-k as DeepInfer's index_attn.py composes it: the logits of the
    candidate blocks' entries compacted (slot i * block_size + j: entry blocks[i] *
    block_size + j; DeepGEMM's sparse MQA, whose slots past a row's entries hold
    whatever: here 1e9, so that a slot read past the length shows), the row's length
    get_candidate_compact_lens_ref, the top-k over that prefix (torch.topk, ascending
    index as deep_select's sorted_index, -1 after), restore_candidate_indices_inplace_ref
    back to entries. blocks: int32 [R, NB], ascending, -1 after the chosen."""
    R, NB = blocks.shape
    lens = cb["get_candidate_compact_lens_ref"](blocks, torch.tensor(visible, dtype=torch.int32),
                                                block_size)
    entry = (blocks.long()[:, :, None] * block_size + torch.arange(block_size)).reshape(R, -1)
    ok = (blocks.long()[:, :, None] >= 0).expand(R, NB, block_size).reshape(R, -1) & \
        (entry < torch.tensor(visible)[:, None])
    compact = torch.where(ok, logits.gather(1, entry.clamp(0, logits.shape[1] - 1)),
                          torch.full_like(entry, 1e9, dtype=torch.float32))
    rows = []
    for r in range(R):
        n = int(lens[r])
        rows.append(sorted(compact[r, :n].topk(min(k, n)).indices.tolist()))
    idx = _padded(rows, width)
    cb["restore_candidate_indices_inplace_ref"](idx, blocks, block_size)
    return idx, lens, ok.sum(1)


def check_candidate(cb):
    """The candidate-block top-k's parts against DeepInfer's candidate_blocks.py refs on
    random rows: block scores and valid counts (candidate_block_max_ref; the logits
    bf16-exact, as its input is bf16, one row holding a +inf logit for the cap), the
    chosen blocks against torch.topk over the valid ones, and the consumer's top-k
    restricted to the blocks' visible entries against DeepInfer's compact path, with
    rows of no entry, rows with fewer valid blocks than candidate_topk_blocks and
    rows with fewer candidate entries than the top-k."""
    g = torch.Generator().manual_seed(10)
    R, n, NB, k = 64, 300, 8, 6
    for bs in (8, 16):
        src = torch.randn(R, n, generator=g).bfloat16().float()
        src[5, 17] = torch.inf
        visible = torch.randint(0, n + 1, (R,), generator=g)
        visible[:4] = torch.tensor([0, 1, bs, bs * NB + 1])  # none, one, a full block, NB + 1
        visible[5] = 40
        visible = visible.tolist()
        got, valid = ref.candidate_block_scores(src, visible, bs)
        lens = torch.tensor(visible, dtype=torch.int32)
        want, want_valid = cb["candidate_block_max_ref"](src.bfloat16(), lens, bs)
        want = want.float()
        mask = torch.arange(got.shape[1])[None, :] < torch.tensor(valid)[:, None]
        report(f"candidate blocks of {bs}: valid counts vs candidate_block_max_ref",
               torch.tensor(valid).float(), want_valid.float(), 0)
        report(f"candidate blocks of {bs}: +inf on the last valid block vs "
               "candidate_block_max_ref", (got[mask] == torch.inf).float(),
               (want[mask] == torch.inf).float(), 0)
        fin = mask & torch.isfinite(want)
        report(f"candidate blocks of {bs}: block maxima (capped at bf16's largest) vs "
               "candidate_block_max_ref", got[fin], want[fin], 0)
        chosen = [ref.candidate_blocks(got[r], valid[r], NB) for r in range(R)]
        # (bf16 maxima tie: the lower block first, a stable sort's order)
        topk_rows = [sorted(torch.sort(want[r, :valid[r]], descending=True,
                                       stable=True).indices[:NB].tolist()) for r in range(R)]
        report(f"candidate blocks of {bs}: the top {NB} (the last always, -1 after) vs "
               "a stable sort of candidate_block_max_ref's valid blocks",
               _padded(chosen, NB).float(), _padded(topk_rows, NB).float(), 0)
        fewer = sum(v < NB for v in valid)
        # a consumer's logits; its top-k restricted to the candidate entries
        logits = torch.randn(R, n, generator=g)
        want_idx = [ref.top_k_within(logits[r], ref.candidate_entries(chosen[r], visible[r], bs), k)
                    for r in range(R)]
        blocks = _padded(chosen, NB)
        idx, lens, n_ok = _compact_topk(cb, logits, visible, blocks, bs, k, k)
        report(f"candidate blocks of {bs}: compact lengths vs get_candidate_compact_lens_ref",
               n_ok.float(), lens.float(), 0)
        report(f"candidate blocks of {bs}: restricted top-{k} vs the compact path "
               f"(get_candidate_compact_lens_ref, restore_candidate_indices_inplace_ref; "
               f"{fewer} of {R} rows with fewer than {NB} valid blocks)", idx.float(),
               _padded(want_idx, k).float(), 0)


def check_candidate_model(cb, folder):
    """The candidate fixture's checkpoint (make_dsv41_fixtures.py dsv41-candidate-f32)
    on 544 tokens: the source's (layer 2's) block scores against candidate_block_max_ref
    on its logits rounded to bf16 (within that rounding), and the consumer's (layer
    4's) top-k against DeepInfer's compact path on its logits and the source's blocks;
    its rows past 512 entries have more blocks than the 64 kept."""
    import make_dsv41_fixtures as fixtures
    model, _ = fixtures.build("dsv41-candidate-f32", pathlib.Path(folder))
    c = model.cfg
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(3, c.vocab, (544,), generator=g).tolist()
    trace = []
    with torch.no_grad():
        model.forward(ids, trace)
    (_, S, scores, valid, chosen), = [e for e in trace if e[0] == "candidate"]
    src_logits = next(e[2] for e in trace if e[0] == "index" and e[1] == S)
    bs, NB, k = c.candidate_block_size, c.candidate_topk_blocks, c.index_topk
    visible = [(t + 1) // c.ratios[S] for t in range(len(ids))]
    want, want_valid = cb["candidate_block_max_ref"](src_logits.bfloat16(),
                                                     torch.tensor(visible, dtype=torch.int32), bs)
    want = want.float()
    mask = torch.arange(scores.shape[1])[None, :] < torch.tensor(valid)[:, None]
    fin = mask & torch.isfinite(want)
    report(f"model layer {S}: valid blocks vs candidate_block_max_ref",
           torch.tensor(valid).float(), want_valid.float(), 0)
    report(f"model layer {S}: +inf on the last valid block vs candidate_block_max_ref",
           (scores[mask] == torch.inf).float(), (want[mask] == torch.inf).float(), 0)
    report(f"model layer {S}: block maxima vs candidate_block_max_ref (its bf16 rounding)",
           scores[fin], want[fin], float(scores[fin].abs().max()) * 2 ** -8)
    consumers = [e for e in trace if e[0] == "index" and len(e) == 5]
    for _, L, logits, vis, allowed in consumers:
        got = [ref.top_k_within(logits[t], allowed[t], k) for t in range(len(ids))]
        idx, _, _ = _compact_topk(cb, logits, vis, _padded(chosen, NB), bs, k, k)
        restricted = sum(v > NB for v in valid)
        differ = sum(got[t] != ref.top_k(logits[t], vis[t], k) for t in range(len(ids)))
        report(f"model layer {L}: top-{k} among layer {S}'s {NB} blocks of {bs} vs the "
               f"compact path ({restricted} rows restricted, {differ} differing from the "
               f"dense top-{k})", _padded(got, k).float(), idx.float(), 0)
    report("the candidate consumers are layer 4 alone",
           torch.tensor([e[1] for e in consumers]).float(), torch.tensor([4.0]), 0)
    # what DeepInfer refuses (cross_layer.py _validate_candidate_config, index_attn.py
    # MQA.__init__), refused naming the field
    hf = json.loads((pathlib.Path(folder) / "config.json").read_text())
    for field, value, named in (
            ("candidate_source_layer_id", 5, "candidate_source_layer_id"),
            ("candidate_source_layer_id", 0, "candidate_source_layer_id"),   # sliding window
            ("candidate_source_layer_id", 1, "candidate_source_layer_id"),   # ratio 2, then 1
            ("candidate_source_layer_id", 3, "candidate_source_layer_id"),   # layer 2's top-k
            ("candidate_topk_blocks", 12, "candidate_topk_blocks"),          # not 8k
            ("candidate_topk_blocks", 4104, "candidate_topk_blocks"),        # past 4096
            ("candidate_topk_blocks", 8, "candidate_topk_blocks"),           # 64 entries, not 512k
            ("candidate_topk_blocks", None, "candidate_topk_blocks"),
            ("candidate_block_size", 12, "candidate_block_size"),
            ("candidate_block_size", 32, "candidate_block_size"),
            ("index_topk", 513, "candidate_topk_blocks"),                    # 64 x 8 < 513
            ("compress_ratios", [0, 2, 1, 1, 0], "candidate_source_layer_id")):
        expect_refused(hf, {field: value}, named)


def expect_refused(hf, edits, named):
    """V41Config refuses the config.json hf with edits in its text_config, its
    message starting with the field named."""
    bad = json.loads(json.dumps(hf))
    bad["text_config"].update(edits)
    try:
        ref.V41Config(bad)
        FAILED.append(f"{edits} was not refused")
        print(f"FAIL {edits} was not refused")
    except ref.Unsupported as e:
        ok = str(e).startswith(named)
        print(f"{'ok  ' if ok else 'FAIL'} refused, naming {named}: {e}")
        if not ok:
            FAILED.append(f"{edits}: the message does not name {named}")


def check_model(folder):
    """The fixtures' first checkpoint (make_dsv41_fixtures.py): finite, causal (a
    prefix alone gives the prefix's logits), the indexer on the index sources only,
    and configs this reference cannot run refused with the field named."""
    import make_dsv41_fixtures as fixtures
    model, _ = fixtures.build("dsv41-f32", pathlib.Path(folder))
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(3, model.cfg.vocab, (30,), generator=g).tolist()
    trace = []
    full = model.forward(ids, trace)
    report("logits finite", torch.isfinite(full).all().float(), torch.tensor(1.0), 0)
    for n in (1, 2, 7, 13, 29):
        report(f"causal: the first {n} tokens alone give the same logits",
               model.forward(ids[:n]), full[:n], 2e-5)
    layers = sorted({L for kind, L, *_ in trace if kind == "index"})
    report("the indexer ran on the index source layers (1, 3, 4)",
           torch.tensor(layers).float(), torch.tensor([1.0, 3.0, 4.0]), 0)
    hf = json.loads((pathlib.Path(folder) / "config.json").read_text())
    for field, value in (("engram_max_ngram_size", None), ("candidate_source_layer_id", 1),
                         ("compress_ratios", [0, 4, 2, 1, 1]), ("scoring_func", "sigmoid"),
                         ("index_source_layer_ids", [1, 2, 4])):
        edits = {field: value}
        if field == "engram_max_ngram_size":
            edits["engram_layer_ids"] = [1]
        expect_refused(hf, edits, field)


def check_dspark(di, folder):
    """The DSpark head's reference (dsv41_dspark_reference.py) on the DSpark fixture's
    checkpoint (make_dsv41_dspark_fixtures.py) against DeepInfer's own references:
    get_fused_dflash_get_input_ref (the block's positions, where its keys go and the
    keys each row sees; a ring of window + block + 1 slots a request, as DeepInfer's
    swa ring of window + DEEPINFER_MAX_BACKTRACKING_TOKENS), dflash_input_store_ref
    (the features from the attention-input streams), confidence_head_fused_ref."""
    import make_dsv41_dspark_fixtures as fixtures
    model, seed = fixtures.build(fixtures.SALT, pathlib.Path(folder))
    c, d = model.cfg, model.dcfg
    W, B = c.window, d.block
    bs = W + B + 1
    # one decode step's batch: request r's tokens at p0 .. p0 + B (the previous
    # anchor and its B drafts), v of the drafts kept: the last accepted position
    # a = p0 + v = n - 1, the block at n
    ns = [1, 2] + fixtures.CASES + [40]
    positions, slots, ftp, offset = [], [], [], []
    for r, n in enumerate(ns):
        v = min(r % (B + 1), n - 1)
        p0 = n - 1 - v
        ftp.append(len(positions))
        offset.append(v)
        for p in range(p0, p0 + B + 1):
            positions.append(p)
            slots.append(r * bs + p % bs)
    ns_ = di["dspark_index"]["get_fused_dflash_get_input_ref"]
    newx, pos_out, _, _, _, kv_index = ns_(
        torch.tensor(slots, dtype=torch.int32), torch.tensor(positions, dtype=torch.int32),
        torch.tensor(ftp, dtype=torch.int32), torch.tensor(offset, dtype=torch.int32), bs, B, W)
    pos_out, newx = pos_out.view(len(ns), B), newx.view(len(ns), B)
    kv_index = kv_index.view(len(ns), B, -1)
    want_pos, got_seen, want_seen, got_slot, want_slot = [], [], [], [], []
    width = W + B
    for r, n in enumerate(ns):
        want_pos.append(model.positions(n))
        want_slot.append([r * bs + p % bs for p in model.positions(n)])
        lo = n - W  # the window's first position: a slot back to its position
        for i, seen in enumerate(model.kv_positions(n)):
            row = [lo + (int(s) - r * bs - lo) % bs for s in kv_index[r, i] if s >= 0]
            got_seen.append(row + [-1] * (width - len(row)))
            want_seen.append(seen + [-1] * (width - len(seen)))
    report("DSpark block positions n .. n + B - 1 vs get_fused_dflash_get_input_ref",
           pos_out.float(), torch.tensor(want_pos).float(), 0)
    report("DSpark block keys' slots (written at n + i) vs get_fused_dflash_get_input_ref",
           newx.float(), torch.tensor(want_slot).float(), 0)
    report("DSpark keys each row sees (n - W .. n + B - 1 from 0, every row) vs "
           "get_fused_dflash_get_input_ref", torch.tensor(got_seen).float(),
           torch.tensor(want_seen).float(), 0)
    # the features: each target layer's attention-input streams through DeepInfer's store
    g = torch.Generator().manual_seed(seed + 1)
    seq = torch.randint(3, c.vocab, (fixtures.N_SEQ,), generator=g).tolist()
    streams = {}
    model.main.forward(seq, None, streams)
    _, feats = model.features(seq)
    E = c.hidden
    for k, j in enumerate(d.targets):
        out = torch.empty(len(seq), E)
        di["dspark"]["dflash_input_store_ref"](streams[j], out)
        report(f"DSpark features of target layer {j} vs dflash_input_store_ref",
               feats[:, k * E:(k + 1) * E], out, 1e-6)
    # the confidence of every case's rows, and random rows at another temperature with
    # the clamp engaged
    caches, done, got, want = model.new_caches(), 0, [], []
    proj = model._t(f"mtp.{d.stages - 1}.confidence_head.proj.weight")
    for n in fixtures.CASES:
        model.inject(caches, feats[done:n], range(done, n))
        done = n
        b = model.block(caches, n, seq[n])
        got.append(b["confidence"])
        want.append(di["dspark"]["confidence_head_fused_ref"](b["h"], proj.t().contiguous(), 1.0,
                                                              b["markov_emb"]))
    report("DSpark confidence (T = 1) vs confidence_head_fused_ref", torch.cat(got),
           torch.cat(want), 1e-6)
    h, e = torch.randn(16, E, generator=g) * 40, torch.randn(16, d.rank, generator=g)
    want = di["dspark"]["confidence_head_fused_ref"](h, proj.t().contiguous(), 0.5, e)
    report("DSpark confidence (T = 0.5, |z / T| up to 140: past the +-60 clamp) vs "
           "confidence_head_fused_ref",
           dref.confidence(h, e, proj, 0.5), want, 1e-6)


def main(argv):
    keep = argv[argv.index("--keep") + 1] if "--keep" in argv else None
    tk = tile_kernels_torch()
    gemm_root, di_root = fetch("deepinfer-gemm"), fetch("deepinfer")
    gemm = functions(gemm_root / "tests" / "test_mega_mhc.py",
                     ["mhc_reference", "_sinkhorn_reference"])
    gemm.update(functions(gemm_root / "tests" / "test_attention.py", ["ref_mqa_logits"]))
    ops = di_root / "deepinfer" / "model_executor" / "layers"
    di = {"compress": functions(ops / "tilelang_ops" / "compress.py",
                                ["compress_and_update_state_prefill_ref"]),
          "meta": functions(ops / "tilelang_ops" / "prepare_v4_decode_metadata.py",
                            ["prepare_v4_decode_metadata_ref"]),
          "rope": functions(ops / "rotary_embedding.py",
                            ["_yarn_find_correction_dim", "_yarn_find_correction_range",
                             "_yarn_linear_ramp_mask"]),
          "dspark_index": functions(ops / "tilelang_ops" / "get_kv_index.py",
                                    ["get_fused_dflash_get_input_ref"]),
          "dspark": functions(ops / "tilelang_ops" / "dflash.py",
                              ["_sigmoid_with_temperature", "confidence_head_fused_ref",
                               "dflash_input_store_ref"])}
    check_mhc(tk, gemm)
    check_moe(tk)
    check_rope(tk, di)
    check_compress(di)
    check_visibility(di)
    check_indexer(gemm)
    check_sink_attention()
    check_engram()
    cb = functions(ops / "tilelang_ops" / "candidate_blocks.py",
                   ["_check_inputs", "candidate_block_max_ref", "get_candidate_compact_lens_ref",
                    "restore_candidate_indices_inplace_ref"])
    check_candidate(cb)
    with tempfile.TemporaryDirectory() as tmp:
        check_model(keep or tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_candidate_model(cb, tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_dspark(di, tmp)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    print(f"ok: DeepSeek-V4.1's reference holds to DeepSeek's kernel references "
          f"({len(CHECKED)} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
