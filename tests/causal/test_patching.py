"""interp.patch against independent computations.

* transformer-lens 4.3's own sweeps (``transformer_lens.patching.get_act_patch_*``) run on the same bridge
  with the same metric — heads (all positions and by position), MLP outputs and resid points by
  position, q/k/v and patterns — on the tiny causal families and on smollm2's IOI pair (identity 3);
* hooked bridge runs written here (zero / mean / resample ablations, an encoder with a direction
  metric, padded batches);
* the identities: a node patched with its own value changes nothing; patching a resid point with the
  corrupt run's value gives the corrupt run (identity 2).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformer_lens import patching

from interp.causal import KL, Direction, LogitDiff, patch
from interp.models import tokenize
from tiny_models import MORE_FAMILIES, tiny_model

CLEAN = torch.tensor([[1, 5, 6, 7, 8, 9, 10], [1, 15, 16, 17, 18, 19, 20]])
CORRUPT = torch.tensor([[1, 5, 26, 7, 8, 29, 10], [1, 15, 36, 17, 18, 39, 20]])
A, W = 11, 12
CAUSAL = ("gpt2", "llama", "neox", *MORE_FAMILIES)


def tl_metric(logits):
    return (logits[:, -1, A] - logits[:, -1, W]).mean()


def _grid(res, rows, cols, key):
    """A PatchResult's values as a [rows, cols, ...] grid via key(label) -> (row, col)."""
    g = torch.full((rows, cols, *res.values.shape[1:]), float("nan"), dtype=torch.float64)
    for lab, v in zip(res.labels, res.values):
        k = key(lab)
        if k is not None:
            g[k] = v.double()
    return g


@pytest.fixture(scope="module", params=CAUSAL)
def causal_model(request):
    return tiny_model(request.param, n_layers=3)


def test_heads_all_positions_equal_transformer_lens(causal_model):
    m = causal_model
    _, cache = m.bridge.run_with_cache(CLEAN)
    tl = patching.get_act_patch_attn_head_out_all_pos(m.bridge, CORRUPT, cache, tl_metric)
    r = patch(m, CLEAN, CORRUPT, metric=LogitDiff(A, W), progress=False)
    assert r.head_matrix().shape == tl.shape
    assert torch.allclose(r.head_matrix(), tl.double(), rtol=0, atol=1e-6)
    assert r.clean == pytest.approx(tl_metric(m.bridge(CLEAN)).item(), abs=1e-6)
    assert r.corrupt == pytest.approx(tl_metric(m.bridge(CORRUPT)).item(), abs=1e-6)


@pytest.mark.slow
def test_by_position_sweeps_equal_transformer_lens(causal_model):
    m = causal_model
    _, cache = m.bridge.run_with_cache(CLEAN)
    met = LogitDiff(A, W)
    heads = patch(m, CLEAN, CORRUPT, metric=met, positions="each", progress=False)
    tl = patching.get_act_patch_attn_head_out_by_pos(m.bridge, CORRUPT, cache, tl_metric)  # [layer, pos, head]
    assert torch.allclose(heads.head_matrix().permute(0, 2, 1), tl.double(), rtol=0, atol=1e-6)
    mlps = patch(m, CLEAN, CORRUPT, metric=met, nodes="mlps", positions="each", progress=False)
    tl = patching.get_act_patch_mlp_out(m.bridge, CORRUPT, cache, tl_metric)  # [layer, pos]
    assert torch.allclose(mlps.values.double(), tl.double(), rtol=0, atol=1e-6)
    resid = patch(
        m,
        CLEAN,
        CORRUPT,
        metric=met,
        nodes=[f"blocks.{l}.hook_resid_pre" for l in range(3)],
        positions="each",
        progress=False,
    )
    tl = patching.get_act_patch_resid_pre(m.bridge, CORRUPT, cache, tl_metric)
    assert torch.allclose(resid.values.double(), tl.double(), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_head_inputs_and_patterns_equal_transformer_lens(causal_model):
    m = causal_model
    a = m.arch
    _, cache = m.bridge.run_with_cache(CLEAN)
    met = LogitDiff(A, W)
    r = patch(m, CLEAN, CORRUPT, metric=met, nodes="head_inputs", progress=False)
    for which, fn in (
        ("q", patching.get_act_patch_attn_head_q_all_pos),
        ("k", patching.get_act_patch_attn_head_k_all_pos),
        ("v", patching.get_act_patch_attn_head_v_all_pos),
    ):
        tl = fn(m.bridge, CORRUPT, cache, tl_metric)
        n = a.n_heads if which == "q" else a.n_kv_heads
        mine = _grid(
            r,
            a.n_layers,
            n,
            lambda lab: (int(lab[1]), int(lab.split("[H")[1][:-1])) if f".attn.{which}[" in lab else None,
        )
        assert torch.allclose(mine, tl.double()[:, :n], rtol=0, atol=1e-6), which
    pat = patch(m, CLEAN, CORRUPT, metric=met, nodes="patterns", progress=False)
    tl = patching.get_act_patch_attn_head_pattern_all_pos(m.bridge, CORRUPT, cache, tl_metric)
    if m.arch.family == "gptj":
        # transformer-lens's GPT-J bridge fires hook_pattern after the attention output is computed, so
        # its pattern sweep changes nothing: every entry is the corrupt run (asserted), not a reference
        assert torch.allclose(tl.double(), torch.full_like(tl.double(), pat.corrupt), rtol=0, atol=1e-7)
        return
    assert torch.allclose(pat.head_matrix(), tl.double(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", CAUSAL)
def test_own_value_changes_nothing(family):
    """Identity 2: a node patched with its own value (resampled from a reference that is the clean prompt)
    gives the clean metric, for every node kind."""
    m = tiny_model(family, dtype=torch.float64)
    clean = CLEAN[:1]
    for nodes in ("components", "head_inputs", "patterns", "resid"):
        r = patch(
            m,
            clean,
            metric=LogitDiff(A, W),
            nodes=nodes,
            direction="noise",
            ablation="resample",
            reference=clean,
            progress=False,
        )
        assert (r.values - r.clean).abs().max() <= 1e-12, nodes


@pytest.mark.parametrize("family", CAUSAL + ("bert",))
def test_resid_patch_is_the_corrupt_run(family):
    """Identity 2: noising a whole resid point with the corrupt run's value gives the corrupt run's metric
    (the layer's input is all that the rest of the model sees)."""
    m = tiny_model(family, dtype=torch.float64)
    met = Direction(torch.linspace(-1, 1, m.arch.d_model, dtype=torch.float64)) if family == "bert" else LogitDiff(A, W)
    r = patch(m, CLEAN, CORRUPT, metric=met, nodes="resid", direction="noise", progress=False)
    pre = [i for i, lab in enumerate(r.labels) if lab.endswith("resid_pre")]
    assert torch.allclose(r.values[pre], torch.full((len(pre),), r.corrupt, dtype=r.values.dtype), rtol=0, atol=1e-12)
    d = patch(m, CLEAN, CORRUPT, metric=met, nodes="resid", direction="denoise", progress=False)
    assert torch.allclose(d.values[pre], torch.full((len(pre),), d.clean, dtype=d.values.dtype), rtol=0, atol=1e-12)


def _hooked_metric(m, tokens, hooks, read):
    with torch.no_grad(), m.bridge.hooks(fwd_hooks=hooks):
        out = m.bridge(tokens)
    return read(out)


def _set_head(layer_values, head):
    def hook(z, hook=None):
        z = z.clone()
        z[:, :, head] = layer_values[:, :, head]
        return z

    return hook


@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_noising_ablations_equal_hooked_bridge_runs(ablation):
    m = tiny_model("llama", n_layers=2)
    ref = torch.tensor([[1, 40, 41, 42, 43, 44, 45], [1, 50, 51, 52, 53, 54, 55], [1, 60, 61, 62, 63, 64, 65]])
    kw = {} if ablation == "zero" else {"reference": ref}
    r = patch(m, CLEAN, metric=LogitDiff(A, W), direction="noise", ablation=ablation, progress=False, seed=3, **kw)
    _, rc = m.bridge.run_with_cache(ref)

    def read(out):
        lg = out if isinstance(out, torch.Tensor) else out.logits
        return lg[:, -1, A] - lg[:, -1, W]

    pick = torch.randint(0, 3, (2,), generator=torch.Generator().manual_seed(3))
    for l, h in [(0, 1), (1, 3)]:
        name = f"blocks.{l}.attn.hook_z"
        z = rc[name]
        if ablation == "zero":
            src = torch.zeros_like(z[:2])
        elif ablation == "mean":
            src = z.mean(0, keepdim=True).expand(2, *z.shape[1:])
        else:
            src = z[pick]
        ref_vals = _hooked_metric(m, CLEAN, [(name, _set_head(src, h))], read)
        assert torch.allclose(r.per_prompt[r.labels.index(f"L{l}.H{h}")], ref_vals, rtol=0, atol=1e-6)


def test_encoder_with_a_direction_metric_equals_hooked_bridge_runs():
    m = tiny_model("bert")
    u = torch.linspace(-1, 1, m.arch.d_model)
    texts_c, texts_k = ["w1 w2 w3 w4", "w5 w6 w7"], ["w1 w9 w3 w8", "w5 w10 w7"]
    r = patch(m, texts_c, texts_k, metric=Direction(u), progress=False)
    bc, bk = tokenize(m, texts_c), tokenize(m, texts_k)
    last = f"blocks.{m.arch.n_layers - 1}.hook_resid_post"
    store = {}

    def grab(x, hook=None):
        store["h"] = x
        return x

    _, cache = m.bridge.run_with_cache(bc.tokens, attention_mask=bc.attention_mask)
    mask = bc.attention_mask.float()
    for l, h in [(0, 0), (1, 2)]:
        name = f"blocks.{l}.attn.hook_z"
        with torch.no_grad(), m.bridge.hooks(fwd_hooks=[(name, _set_head(cache[name], h)), (last, grab)]):
            m.bridge(bk.tokens, attention_mask=bk.attention_mask)
        pooled = (store["h"] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        assert torch.allclose(r.per_prompt[r.labels.index(f"L{l}.H{h}")], pooled @ u, rtol=0, atol=1e-5)


def test_padded_batch_equals_prompt_by_prompt():
    m = tiny_model("gpt2")
    clean, corrupt = ["w1 w2 w3 w4 w5", "w6 w7 w8"], ["w1 w9 w3 w10 w5", "w6 w11 w8"]
    met = LogitDiff("w12", "w13")
    both = patch(m, clean, corrupt, metric=met, nodes="components", progress=False)
    for i in range(2):
        one = patch(m, clean[i], corrupt[i], metric=met, nodes="components", progress=False)
        assert torch.allclose(both.per_prompt[:, i], one.per_prompt[:, 0], rtol=0, atol=1e-6)
    each = patch(m, clean, corrupt, metric=met, nodes="heads", positions="each", progress=False)
    one = patch(m, clean[1], corrupt[1], metric=met, nodes="heads", positions="each", progress=False)
    n1 = one.per_prompt.shape[1]
    assert torch.allclose(each.per_prompt[:, :n1, 1], one.per_prompt[:, :, 0], rtol=0, atol=1e-6)
    assert bool(torch.isnan(each.per_prompt[:, n1:, 1]).all())  # its padding: no token to patch (NaN)


def test_kl_metric_zero_at_clean_and_matches_hooked_run():
    m = tiny_model("neox")
    r = patch(m, CLEAN, CORRUPT, metric=KL(), nodes=["L0.H1", "L1.mlp"], progress=False)
    assert r.clean == 0.0
    _, cache = m.bridge.run_with_cache(CLEAN)
    lc = torch.log_softmax(m.bridge(CLEAN)[:, -1], -1)

    def read(out):
        lp = torch.log_softmax(out[:, -1], -1)
        return (lc.exp() * (lc - lp)).sum(-1)

    z = _hooked_metric(m, CORRUPT, [("blocks.0.attn.hook_z", _set_head(cache["blocks.0.attn.hook_z"], 1))], read)
    assert torch.allclose(r.per_prompt[0], z, rtol=0, atol=1e-6)
    mlp = _hooked_metric(
        m, CORRUPT, [("blocks.1.hook_mlp_out", lambda x, hook=None: cache["blocks.1.hook_mlp_out"])], read
    )
    assert torch.allclose(r.per_prompt[1], mlp, rtol=0, atol=1e-6)


def test_result_contract():
    m = tiny_model("llama")
    r = patch(m, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="components", progress=False)
    assert r.labels[0] == "embed" and "L1.mlp" in r.labels
    assert torch.equal(r["L1.H2"], r.values[r.labels.index("L1.H2")])
    df = r.to_dataframe()
    assert list(df["node"]) == r.labels and {"value", "effect", "normalized"} <= set(df.columns)
    nz = (r.values - r.corrupt) / (r.clean - r.corrupt)
    assert torch.allclose(r.normalized, nz)
    assert r.top(3)["effect"].abs().is_monotonic_decreasing


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_ioi_heads_equal_transformer_lens(smollm2):
    clean = "When John and Mary went to the shops, John gave the bag to"
    corrupt = "When Alice and Bob went to the shops, Alice gave the bag to"
    ids_c, ids_k = smollm2.to_tokens(clean), smollm2.to_tokens(corrupt)
    a, w = smollm2.to_tokens(" Mary")[0, -1], smollm2.to_tokens(" John")[0, -1]
    r = patch(smollm2, ids_c, ids_k, metric=LogitDiff(" Mary", " John"), progress=False)

    def metric(logits):
        return (logits[:, -1, a] - logits[:, -1, w]).mean()

    _, cache = smollm2.bridge.run_with_cache(ids_c)
    # transformer-lens's sweep on 16 of the 270 heads (its own loop costs a hooked forward per head: 3 minutes for all
    # of them here): the six interp ranks first and ten drawn at random
    mine = r.head_matrix()
    top = mine.abs().flatten().topk(6).indices
    rest = torch.randperm(mine.numel(), generator=torch.Generator().manual_seed(0))
    cells = torch.cat([top, rest[~torch.isin(rest, top)][:10]])
    H = mine.shape[1]
    idx = pd.DataFrame({"layer": (cells // H).tolist(), "head": (cells % H).tolist()})
    tl = patching.generic_activation_patch(  # get_act_patch_attn_head_out_all_pos, on the cells of idx
        smollm2.bridge, ids_k, cache, metric, patching.layer_head_vector_patch_setter, "z", index_df=idx
    )
    assert r.clean == pytest.approx(4.616, abs=2e-3)
    assert tl.shape == (16,) and mine[0].numel() == H
    assert torch.allclose(mine.flatten()[cells], tl.double(), rtol=0, atol=1e-4)
