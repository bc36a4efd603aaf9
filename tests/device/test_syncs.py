"""Host synchronisations do not grow with depth: EAP, EAP-IG, the all-heads patching sweep and head-level logit
attribution read device values into Python (``.item()``, ``bool``/``float`` of a tensor, ``.tolist()``, a boolean
mask's indices…) a fixed number of times per call, never once per layer or per head — on a GPU each read waits for
every queued kernel, and a per-layer read made EAP launch- and sync-bound. Counted on the CPU by
:class:`device.guard.HostTensorGuard` (``count_syncs=True``) for calls made from interp's own frames, on a 2-layer
and a 4-layer tiny Llama (GQA, RoPE): the counts must be equal, and below :data:`BOUND`.

Before the fix the engine read the key mask (``bool(mask[:, :N].all())``) at every layer of every pass and the
sweep copied three one-element index tensors per patched head and the joining rows' prompts per layer; the circuit
graph was rebuilt on every call. A warm call made (2 → 4 layers): EAP 25 → 29 syncs, EAP-IG(3) 31 → 39, the
all-heads patch 36 → 42 syncs and 47 → 81 host-to-device copies. After: 20, 22, 26 and 14 at both depths."""

from __future__ import annotations

import pytest

import interp
from device.guard import HostTensorGuard
from tiny_models import tiny_model

CLEAN, CORRUPT = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6"], ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16"]
METRIC = interp.LogitDiff(["w3", "w7"], ["w4", "w8"])

CALLS = {
    "eap": lambda m: interp.edge_attribution(m, CLEAN, CORRUPT, metric=METRIC, method="eap", progress=False),
    "eap-ig": lambda m: interp.edge_attribution(
        m, CLEAN, CORRUPT, metric=METRIC, method="eap-ig", ig_steps=3, progress=False
    ),
    "patch": lambda m: interp.patch(m, CLEAN, CORRUPT, metric=METRIC, nodes="heads", progress=False),
    "attribute_logits": lambda m: interp.attribute_logits(
        m, CLEAN, answer=["w3", "w7"], wrong=["w4", "w8"], unit="head"
    ),
}

#: What a call may still read, per call and whatever the depth or the batch: checking its inputs (each batch's token
#: range and padding, the answer/wrong token ids, read once per metric binding when given as tensors: ≤ 16), the
#: key mask once per batch (2), the metric's finiteness once per metric evaluation (clean, corrupt, one per sweep
#: or IG step: ≤ 6), and the floats of the result's summary (metric means, closure, completeness: ≤ 8).
#: 40 leaves room for a few such reads, not for one per layer or per prompt (a 16-layer model would add ≥ 16).
BOUND = 40


def _counts(n_layers: int, name: str) -> tuple[int, int, dict]:
    m = tiny_model("llama", n_layers=n_layers)
    CALLS[name](m)  # the first call builds what is kept per model (the engine, the circuit graph)
    with HostTensorGuard(raise_=False, count_syncs=True) as g:
        CALLS[name](m)
    return sum(g.syncs.values()), sum(g.copies.values()), dict(g.syncs)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_host_syncs_do_not_grow_with_depth(name):
    s2, c2, where2 = _counts(2, name)
    s4, c4, where4 = _counts(4, name)
    grew = {k: (where2.get(k, 0), v) for k, v in where4.items() if v > where2.get(k, 0)}
    assert s4 == s2, f"{name}: {s2} host syncs at 2 layers, {s4} at 4; grew at {grew}"
    assert c4 == c2, f"{name}: {c2} host-to-device copies at 2 layers, {c4} at 4"
    assert s4 <= BOUND, f"{name}: {s4} host syncs per call (bound {BOUND}): {where4}"


def test_host_syncs_do_not_grow_with_the_batch():
    """Token-id inputs and per-prompt answer tensors, 2 and 8 prompts: the same counts (the positions, lengths and
    tokens were read prompt by prompt: head attribution made 19 → 37 syncs, patch 37 → 49, EAP 35 → 47)."""
    import torch

    m = tiny_model("llama")
    counts = {}
    for B in (2, 8):
        g = torch.Generator(device="cpu").manual_seed(0)
        clean = torch.randint(4, 100, (B, 16), generator=g, device="cpu")
        corrupt = clean.clone()
        corrupt[:, 5] = 7
        A, W = torch.full((B,), 10, device="cpu"), torch.full((B,), 11, device="cpu")
        metric = interp.LogitDiff(A, W)
        calls = {
            "attribute_logits": lambda: interp.attribute_logits(m, clean, answer=A, wrong=W, unit="head"),
            "patch": lambda: interp.patch(m, clean, corrupt, metric=metric, nodes="heads", progress=False),
            "eap": lambda: interp.edge_attribution(m, clean, corrupt, metric=metric, progress=False),
        }
        for name, f in calls.items():
            f()
            with HostTensorGuard(raise_=False, count_syncs=True) as guard:
                f()
            counts[name, B] = sum(guard.syncs.values()), dict(guard.syncs)
    for name in ("attribute_logits", "patch", "eap"):
        s2, (s8, w8) = counts[name, 2][0], counts[name, 8]
        assert s8 == s2, f"{name}: {s2} host syncs for 2 prompts, {s8} for 8: {w8}"
        assert s8 <= BOUND, f"{name}: {s8} host syncs per call (bound {BOUND}): {w8}"


def test_host_syncs_do_not_grow_with_the_chunks():
    """The all-heads patch sweep in one chunk and in chunks of 2 rows: the same syncs and copies. On an H200 at
    Llama-3.2-1B's config (8 × 32 tokens, 512 heads, many chunks) the sweep made 119 syncs and 182 copies per call:
    each chunk checked its metric's finiteness (one read) and copied its variants' indices and prompts (two)."""
    m = tiny_model("llama", n_layers=3)
    counts = {}
    for bs in (None, 2):

        def f():
            return interp.patch(m, CLEAN, CORRUPT, metric=METRIC, nodes="heads", batch_size=bs, progress=False)

        f()
        with HostTensorGuard(raise_=False, count_syncs=True) as guard:
            f()
        counts[bs] = sum(guard.syncs.values()), sum(guard.copies.values()), dict(guard.syncs)
    (s1, c1, _), (s2, c2, w2) = counts[None], counts[2]
    assert (s2, c2) == (s1, c1), f"one chunk: {s1} syncs, {c1} copies; chunks of 2: {s2}, {c2}: {w2}"


def test_circuit_graph_is_kept_per_model():
    m = tiny_model("llama")
    g = interp.circuit_graph(m)
    assert interp.circuit_graph(m) is g  # repeated edge_attribution calls reuse it
    other = tiny_model("llama", n_layers=3)
    g3 = interp.circuit_graph(other)
    assert g3 is not g and g3.n_layers == 3 and len(g3.edges) > len(g.edges)
    # a model whose weights object is replaced (e.g. without its learned positions) gets its own graph
    import dataclasses

    gpt = tiny_model("gpt2")
    gg = interp.circuit_graph(gpt)
    assert "pos_embed" in gg.writers
    object.__setattr__(gpt, "weights", dataclasses.replace(gpt.weights, W_pos=None))
    assert "pos_embed" not in interp.circuit_graph(gpt).writers
