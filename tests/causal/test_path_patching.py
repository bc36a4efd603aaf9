"""interp.path_patch against transformer-lens's direct path patching and hooked bridge runs.

transformer-lens's ``get_act_patch_direct_path`` runs the corrupt input and sends the sender's
clean − corrupt write to one head's q/k/v input: ``path_patch`` with clean and corrupt swapped is the
same intervention (identity 3; transformer-lens refuses GQA k/v and parallel blocks, so: gpt2 q/k/v,
llama q). MLP receivers are checked against a hooked run that shifts only ``ln2``'s input; the
``logits`` receiver of a model without norms equals the direct effect.
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching

import interp
from interp.causal import LogitDiff, effects, path_patch
from interp.errors import ArgumentError, UnsupportedOperationError
from tiny_models import tiny_model

CLEAN = torch.tensor([[1, 5, 6, 7, 8, 9, 10], [1, 15, 16, 17, 18, 19, 20]])
CORRUPT = torch.tensor([[1, 5, 26, 7, 8, 29, 10], [1, 15, 36, 17, 18, 39, 20]])
A, W = 11, 12


def tl_metric(logits):
    return (logits[:, -1, A] - logits[:, -1, W]).mean()


@pytest.mark.parametrize("family,via", [("gpt2", "q"), ("gpt2", "k"), ("gpt2", "v"), ("llama", "q")])
def test_equals_transformer_lens_direct_path(family, via):
    m = tiny_model(family, n_layers=3)
    _, cc = m.bridge.run_with_cache(CLEAN)
    _, kc = m.bridge.run_with_cache(CORRUPT)
    for sl, sh in [(0, 1), (1, 2)]:
        tl = patching.get_act_patch_direct_path(m.bridge, CORRUPT, cc, kc, tl_metric, sl, sh, via, verbose=False)
        r = path_patch(m, CORRUPT, CLEAN, metric=LogitDiff(A, W), sender=f"L{sl}.H{sh}", via=via, progress=False)
        grid = torch.zeros_like(tl)
        for lab, v in zip(r.labels, r.values):
            grid[int(lab[1]), int(lab.split("[H")[1][:-1])] = v
        assert r.labels[0] == f"L{sl + 1}.attn.{via}[H0]"
        assert torch.allclose(grid[sl + 1 :], tl[sl + 1 :], rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_mlp_receivers_equal_a_hooked_run(family):
    m = tiny_model(family, n_layers=3)
    sender = "L0.H2"
    r = path_patch(
        m, CLEAN, CORRUPT, metric=LogitDiff(A, W), sender=sender, receivers="mlps", via="mlp", progress=False
    )
    _, cc = m.bridge.run_with_cache(CLEAN)
    _, kc = m.bridge.run_with_cache(CORRUPT)
    W_O = m.weights.W_O[0, 2]
    delta = kc["blocks.0.attn.hook_z"][:, :, 2] @ W_O - cc["blocks.0.attn.hook_z"][:, :, 2] @ W_O
    first = 1 if m.arch.parallel_attn_mlp else 0
    assert r.labels == [f"L{l}.mlp.in" for l in range(first, 3)]
    for l in range(first, 3):
        with torch.no_grad(), m.bridge.hooks(fwd_hooks=[(f"blocks.{l}.ln2.hook_in", lambda x, hook=None: x + delta)]):
            lg = m.bridge(CLEAN)
        ref = lg[:, -1, A] - lg[:, -1, W]
        assert torch.allclose(r.per_prompt[r.labels.index(f"L{l}.mlp.in")], ref, rtol=0, atol=1e-6)


def test_logits_receiver_without_norms_is_the_direct_effect():
    t = interp.models.build_toy(interp.models.ToyConfig(norm="none"), dtype=torch.float64)
    words = interp.models.toy_words(8)
    clean, corrupt = [" ".join(words[:6])], [" ".join([words[0], words[7], *words[2:6]])]
    met = LogitDiff(words[1], words[2])
    e = effects(t, clean, corrupt, metric=met, nodes=["L0.H1", "L1.H3"], progress=False)
    for i, s in enumerate(["L0.H1", "L1.H3"]):
        r = path_patch(t, clean, corrupt, metric=met, sender=s, via="logits", receivers=None, progress=False)
        assert r.labels == ["unembed"]
        assert r.values[0] - r.clean == pytest.approx(float(e.direct[i]), abs=1e-12)


def test_gqa_kv_receivers_and_bad_receivers():
    m = tiny_model("llama", n_layers=3)
    r = path_patch(
        m,
        CLEAN,
        CORRUPT,
        metric=LogitDiff(A, W),
        sender="L0.H0",
        receivers=["L1.H3", "L2.attn.k[H0]"],
        via="k",
        progress=False,
    )
    assert r.labels == ["L1.attn.k[H1]", "L2.attn.k[H0]"]  # query head 3 reads KV head 1
    with pytest.raises(ArgumentError, match=r"receivers\[0\]"):
        path_patch(
            m, CLEAN, CORRUPT, metric=LogitDiff(A, W), sender="L1.H0", receivers=["L0.H1"], via="q", progress=False
        )
    with pytest.raises(ArgumentError, match="same input twice"):
        path_patch(
            m,
            CLEAN,
            CORRUPT,
            metric=LogitDiff(A, W),
            sender="L0.H0",
            receivers=["L1.H0", "L1.H1"],
            via="v",
            progress=False,
        )
    with pytest.raises(ArgumentError, match="via"):
        path_patch(m, CLEAN, CORRUPT, metric=LogitDiff(A, W), sender="L0.H0", via="o", progress=False)
    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        b = tiny_model("bert")
        path_patch(b, CLEAN, CORRUPT, metric=interp.Direction(torch.ones(32)), sender="L0.H0", progress=False)


@pytest.mark.parametrize("seed", [1.5, "0", True, None])
def test_seed_is_checked(seed):
    """path_patch's seed went unchecked (a float reached the resample's generator, a string was kept in details):
    a typed ArgumentError naming it, as in patch and edge_patch."""
    m = tiny_model("llama")
    for ablation, ref in (("corrupt", None), ("resample", CORRUPT)):
        with pytest.raises(ArgumentError, match=rf"seed={seed!r} must be an int"):
            path_patch(
                m,
                CLEAN,
                CORRUPT if ref is None else None,
                metric=LogitDiff(A, W),
                sender="L0.H0",
                ablation=ablation,
                reference=ref,
                seed=seed,
                progress=False,
            )
