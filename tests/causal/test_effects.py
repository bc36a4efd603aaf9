"""interp.effects: direct effect = the ledger (identity 1), and against hooked bridge runs.

* Identity 1 (decoders): direct(n) for a logit difference equals the difference of n's
  ``attribute_logits`` term between the clean run and the corrupt run rescaled to the clean final
  scale (term ∝ 1/σ, so the run with only n replaced and σ frozen has term_k · σ_k / σ_c) — ≤ 1e-5
  relative in float32, ≤ 1e-10 in float64, on the tiny decoders and smollm2.
* Every family (BERT with a direction metric): direct(n) equals a hooked bridge run of the clean input
  where n's output is the corrupt one, every other head's z and MLP output is frozen at its clean
  value and every norm's scale is frozen at the clean run's (``hook_scale``).
* total(n) is the noising patch: ``patch(direction="noise")`` minus the clean metric.
"""

from __future__ import annotations

import re

import pytest
import torch

import interp
from interp.causal import Direction, LogitDiff, effects, patch
from interp.models import Batch
from bridge_capture import capture
from tiny_models import FAMILIES, LINEAR_LOGITS, MORE_FAMILIES, fp64_tol, tiny_model

CLEAN = torch.tensor([[1, 5, 6, 7, 8, 9, 10], [1, 15, 16, 17, 18, 19, 20]])
CORRUPT = torch.tensor([[1, 5, 26, 7, 8, 29, 10], [1, 15, 36, 17, 18, 39, 20]])
A, W = 11, 12
_HEAD = re.compile(r"L(\d+)\.H(\d+)$")
_MLP = re.compile(r"L(\d+)\.mlp$")


def _scale(m, ids, norm="ln_final"):
    """The σ of norm ``norm`` at the last position, read off the bridge's hook."""
    st, _ = capture(m, Batch(ids, torch.ones_like(ids)), [f"{norm}.hook_scale"])
    return st[f"{norm}.hook_scale"][:, -1, 0]


def _final_scale(m, ids):
    return _scale(m, ids)


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", *LINEAR_LOGITS])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_direct_effect_is_the_ledger(family, dtype, tol):
    tol = fp64_tol(family, tol) if dtype == torch.float64 else tol
    m = tiny_model(family, dtype=dtype)
    e = effects(m, CLEAN, CORRUPT, metric=LogitDiff(A, W), progress=False)
    ac = interp.attribute_logits(m, CLEAN, answer=A, wrong=W)
    ak = interp.attribute_logits(m, CORRUPT, answer=A, wrong=W)
    ratio = _final_scale(m, CORRUPT) / _final_scale(m, CLEAN)
    scale = ac.values.abs().max()
    checked = 0
    for i, lab in enumerate(e.labels):
        j = ac.labels.index(lab)
        r = ratio
        head = _HEAD.match(lab)
        if m.arch.sandwich_norms and head:  # a head's term also carries 1/σ' of its layer's sandwich norm
            r = r * _scale(m, CORRUPT, f"blocks.{head[1]}.ln1_post") / _scale(m, CLEAN, f"blocks.{head[1]}.ln1_post")
        ref = ak.values[j] * r - ac.values[j]
        assert (e.per_prompt[1, i] - ref).abs().max() <= tol * scale, lab
        checked += 1
    assert checked == len(e.labels) and checked > m.arch.n_layers * m.arch.n_heads


def _hooked_direct(m, node, clean, corrupt, read):
    """M(clean with node ← corrupt, every other write and every norm scale frozen at clean) − M(clean)."""
    names = [
        k
        for k in m.bridge.hook_dict
        if k.endswith(("attn.hook_z", "hook_mlp_out", "hook_scale"))
        or k in ("embed.hook_out", "pos_embed.hook_out", "token_type_embed.hook_out")
    ]
    if not m.arch.has_logits:
        names = [k for k in names if not k.startswith("ln_final")]  # BERT's is in the MLM head
    _, cc = m.bridge.run_with_cache(clean, names_filter=lambda k: k in names)
    _, kc = m.bridge.run_with_cache(corrupt, names_filter=lambda k: k in names)
    hooks = []
    for k in names:
        mh, mm = _HEAD.match(node), _MLP.match(node)
        if mh and k == f"blocks.{mh[1]}.attn.hook_z":
            h = int(mh[2])

            def f(z, hook=None, k=k, h=h):
                z = cc[k].clone()
                z[:, :, h] = kc[k][:, :, h]
                return z
        elif (mm and k == f"blocks.{mm[1]}.hook_mlp_out") or k == {
            "embed": "embed.hook_out",
            "pos_embed": "pos_embed.hook_out",
            "type_embed": "token_type_embed.hook_out",
        }.get(node):

            def f(x, hook=None, k=k):
                return kc[k]
        else:

            def f(x, hook=None, k=k):
                return cc[k]

        hooks.append((k, f))
    last = f"blocks.{m.arch.n_layers - 1}.hook_resid_post"
    store = {}

    def grab(x, hook=None):
        store["x"] = x
        return x

    with torch.no_grad(), m.bridge.hooks(fwd_hooks=hooks + [(last, grab)]):
        out = m.bridge(clean)
    patched = read(out, store["x"])
    with torch.no_grad(), m.bridge.hooks(fwd_hooks=[(last, grab)]):
        out = m.bridge(clean)
    return patched - read(out, store["x"])


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_direct_effect_equals_frozen_hooked_run(family):
    m = tiny_model(family)
    if family == "bert":
        u = torch.linspace(-1, 1, m.arch.d_model)
        met = Direction(u)

        def read(out, x):
            return x.mean(1) @ u
    else:
        met = LogitDiff(A, W)

        def read(out, x):
            lg = out if isinstance(out, torch.Tensor) else out.logits
            return lg[:, -1, A] - lg[:, -1, W]

    e = effects(m, CLEAN, CORRUPT, metric=met, progress=False)
    for node in ["embed", "L0.H1", "L0.mlp", "L1.H3", "L1.mlp"]:
        ref = _hooked_direct(m, node, CLEAN, CORRUPT, read)
        got = e.per_prompt[1, e.labels.index(node)]
        assert torch.allclose(got, ref, rtol=0, atol=1e-5 * max(1.0, ref.abs().max())), (node, got, ref)


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_total_is_the_noising_patch_and_indirect_the_rest(family):
    m = tiny_model(family)
    met = Direction(torch.linspace(-1, 1, m.arch.d_model)) if family == "bert" else LogitDiff(A, W)
    e = effects(m, CLEAN, CORRUPT, metric=met, progress=False)
    p = patch(m, CLEAN, CORRUPT, metric=met, nodes="components", direction="noise", progress=False)
    assert p.labels == e.labels
    assert torch.allclose(e.total, p.values - p.clean, rtol=0, atol=1e-6)
    assert torch.allclose(e.indirect, e.total - e.direct, rtol=0, atol=1e-7)
    df = e.to_dataframe()
    assert list(df.columns[:5]) == ["node", "layer", "total", "direct", "indirect"]
    assert torch.equal(
        e["L1.H0"],
        torch.stack(
            [e.total[e.labels.index("L1.H0")], e.direct[e.labels.index("L1.H0")], e.indirect[e.labels.index("L1.H0")]]
        ),
    )


def test_zero_ablation_direct_effect_is_minus_the_term():
    """With zero ablation the replaced write is 0, so direct(n) = −(n's DLA term) for a logit difference."""
    m = tiny_model("llama", dtype=torch.float64)
    e = effects(m, CLEAN, metric=LogitDiff(A, W), ablation="zero", nodes="heads", progress=False)
    ac = interp.attribute_logits(m, CLEAN, answer=A, wrong=W)
    for i, lab in enumerate(e.labels):
        assert torch.allclose(e.per_prompt[1, i], -ac.values[ac.labels.index(lab)], rtol=0, atol=1e-12)


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_direct_effect_is_the_ledger(smollm2):
    clean = "When John and Mary went to the shops, John gave the bag to"
    corrupt = "When Alice and Bob went to the shops, Alice gave the bag to"
    ids_c, ids_k = smollm2.to_tokens(clean), smollm2.to_tokens(corrupt)
    met = LogitDiff(" Mary", " John")
    e = effects(smollm2, ids_c, ids_k, metric=met, progress=False)
    ac = interp.attribute_logits(smollm2, ids_c, answer=" Mary", wrong=" John")
    ak = interp.attribute_logits(smollm2, ids_k, answer=" Mary", wrong=" John")
    ratio = _final_scale(smollm2, ids_k) / _final_scale(smollm2, ids_c)
    scale = ac.values.abs().max()
    for i, lab in enumerate(e.labels):
        j = ac.labels.index(lab)
        assert (e.per_prompt[1, i] - (ak.values[j] * ratio - ac.values[j])).abs().max() <= 1e-5 * scale, lab
