"""Padding never leaks into real positions; a trace changes nothing and leaves no hook behind
(docs/math.md §15), even when the forward pass raises or is interrupted."""

from __future__ import annotations

import pytest
import torch

from interp.stream import count_hooks, trace

from rounding import assert_same_up_to_rounding

from ._hf_reference import rel

LONG, SHORT = "w1 w2 w3 w4", "w5"


def _all_points(tr) -> list[str]:
    return tr.reads + tr.resid_points


# ---- padding --------------------------------------------------------------------------------


def test_padded_batch_equals_prompt_alone(family_model):
    padded = trace(family_model, [LONG, SHORT])
    alone = trace(family_model, SHORT)
    n = alone.tokens.shape[1]
    assert padded.tokens.shape[1] > n and int(padded.attention_mask[1].sum()) == n
    assert torch.equal(padded.tokens[1, :n], alone.tokens[0])
    for point in _all_points(alone):
        a, b = alone.decompose(point), padded.decompose(point)
        assert a.labels == b.labels
        real = alone.attention_mask[:1]
        # every term at the short prompt's real positions, and the total
        assert rel(b.contributions[:, 1:2, :n], a.contributions, real) <= 1e-5, point
        assert rel(b.total[1:2, :n], a.total, real) <= 1e-5, point


def test_pad_token_values_do_not_leak(family_model):
    """Whatever ids sit at padded positions, real positions' decompositions are unchanged."""
    padded = trace(family_model, [LONG, SHORT])
    tokens, mask = padded.tokens.clone(), padded.attention_mask
    tokens[mask == 0] = torch.arange(10, 10 + int((mask == 0).sum()))  # other, non-pad ids
    other = trace(family_model, tokens, attention_mask=mask)
    for point in _all_points(padded):
        a, b = padded.decompose(point), other.decompose(point)
        assert rel(b.contributions, a.contributions, mask) <= 1e-5, point
        assert b.relative_error <= 1e-4


def test_closure_and_tables_ignore_padding(family_model):
    tr = trace(family_model, [LONG, SHORT])
    d = tr.decompose(tr.reads[-1])
    # garbage in the padded positions of the total must not change the reported closure
    total = d.total.clone()
    total[tr.attention_mask == 0] = 1e6
    from interp.stream import Decomposition

    d2 = Decomposition.build(
        point=d.point, labels=d.labels, contributions=d.contributions, total=total, attention_mask=tr.attention_mask
    )
    assert d2.closure_error == d.closure_error and d2.relative_error == d.relative_error
    from interp.errors import ArgumentError

    with pytest.raises(ArgumentError, match="padding"):
        d.to_dataframe(batch=1, pos=tr.tokens.shape[1] - 1)


# ---- bitwise outputs ------------------------------------------------------------------------


def _plain_logits(model, tokens, mask):
    """The engine's plain forward (no capture at all) and its unembedding, written out here."""
    from interp.engine import Engine, unembed

    e, w, a = Engine.of(model), model.weights, model.arch
    final = e.run(tokens, mask).final
    y = e.norm(final, w.lnf_w, w.lnf_b) if a.norm != "none" and not model.block.normed_stream else final
    return unembed(y, w.W_U, w.b_U, a.final_softcap)


def test_trace_leaves_outputs_bitwise_identical(family_model):
    """A trace's captures change nothing: its logits are the engine's plain forward's bit for bit, and the
    model's own (its bridge's) to float rounding at every real position; an encoder's trace has no logits."""
    bridge = family_model.bridge
    for kwargs in ({}, {"neurons": True}, {"project_onto": torch.ones(2, family_model.arch.d_model)}):
        tr = trace(family_model, [LONG, SHORT], **kwargs)
        if not family_model.arch.has_logits:
            assert tr.logits is None
            continue
        assert tr.logits is not None
        assert torch.equal(tr.logits, _plain_logits(family_model, tr.tokens, tr.attention_mask)), kwargs
        with torch.no_grad():
            theirs = bridge(tr.tokens, attention_mask=tr.attention_mask)
        real = tr.attention_mask.bool()
        assert_same_up_to_rounding(tr.logits[real], theirs[real], kwargs)


# ---- no hook survives -----------------------------------------------------------------------


def _attached(bridge) -> dict[str, int]:
    """Hooks attached per hook point (aliases of one point counted once). Some bridges come
    with permanent hooks of their own (BERT: 4 on the MLP), so tests compare snapshots."""
    out = {}
    for hp in {id(hp): hp for hp in bridge.hook_dict.values()}.values():
        k = len(hp._forward_hooks) + len(hp._backward_hooks) + len(hp._forward_pre_hooks)
        if k:
            out[hp.name] = k
    return out


def _plus(snapshot: dict[str, int], name: str) -> dict[str, int]:
    out = dict(snapshot)
    out[name] = out.get(name, 0) + 1
    return out


def test_no_hook_survives_a_trace(family_model):
    bridge = family_model.bridge
    before, n = _attached(bridge), count_hooks(bridge)
    for kwargs in ({}, {"neurons": [0]}, {"project_onto": torch.ones(family_model.arch.d_model)}):
        trace(family_model, [LONG, SHORT], **kwargs)
        assert count_hooks(bridge) == n, kwargs
        assert _attached(bridge) == before, kwargs


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("exc", [_Boom, KeyboardInterrupt], ids=["error", "keyboard-interrupt"])
def test_no_hook_survives_a_failing_forward(family_model, exc, monkeypatch):
    """A forward that raises late (in its last layer) leaves the bridge's hooks as they were — the user's own
    one included, still attached and still firing in the user's own bridge calls — and a trace works after it."""
    from interp.engine import Engine

    bridge = family_model.bridge
    L = family_model.arch.n_layers
    point = f"blocks.{L - 1}.hook_resid_post"
    fired = []
    layer = Engine.layer

    def failing(self, l, *args, **kwargs):
        if l == L - 1:
            fired.append(l)
            raise exc("raised inside the forward pass")
        return layer(self, l, *args, **kwargs)

    before, n = _attached(bridge), count_hooks(bridge)
    bridge.add_hook(point, lambda x, hook: fired.append(hook.name))
    with_user = _plus(before, bridge.hook_dict[point].name)
    try:
        monkeypatch.setattr(Engine, "layer", failing)
        with pytest.raises(exc):
            trace(family_model, [LONG, SHORT])
        monkeypatch.undo()
        assert fired == [L - 1], "the traced forward must have reached its last layer"
        assert _attached(bridge) == with_user and count_hooks(bridge) == n + 1
        with torch.no_grad():
            bridge(torch.tensor([[1, 5, 6]]))
        assert fired[1:], "the user's hook must still fire in the user's own bridge call"
    finally:
        bridge.reset_hooks()  # removes the user's hook (the bridge's permanent ones stay)
    assert _attached(bridge) == before
    # and a trace works normally afterwards
    tr = trace(family_model, [LONG, SHORT])
    assert tr.decompose(tr.reads[-1]).relative_error <= 1e-4
    assert _attached(bridge) == before


def test_count_hooks_counts_an_aliased_hook_point_once(family_model):
    """Regression: hook_dict lists blocks.0.hook_resid_pre also as blocks.0.hook_in; one hook
    used to be counted twice."""
    bridge = family_model.bridge
    assert bridge.hook_dict["blocks.0.hook_resid_pre"] is bridge.hook_dict["blocks.0.hook_in"]
    n = count_hooks(bridge)
    bridge.add_hook("blocks.0.hook_resid_pre", lambda x, hook: None)
    try:
        assert count_hooks(bridge) == n + 1
    finally:
        bridge.reset_hooks()
    assert count_hooks(bridge) == n


def test_user_hooks_survive_a_trace_and_do_not_change_it(family_model):
    """A user's hook on the bridge is left attached by a trace; the trace runs on the engine, so the hook neither
    fires during it nor changes it (a hook that edits the stream leaves the trace's values as they were)."""
    bridge = family_model.bridge
    seen = []
    n = count_hooks(bridge)
    plain = trace(family_model, [LONG, SHORT])

    def edit(x, hook):
        seen.append(tuple(x.shape))
        return x + 1.0

    bridge.add_hook("blocks.0.hook_resid_pre", edit)
    try:
        tr = trace(family_model, [LONG, SHORT])
        assert seen == [] and count_hooks(bridge) == n + 1
        for name, t in plain.activations.items():
            assert torch.equal(tr.activations[name], t), name
        with torch.no_grad():
            bridge(torch.tensor([[1, 5, 6]]))
        assert seen, "the user's hook still fires in the user's own bridge calls"
    finally:
        bridge.reset_hooks()
    assert count_hooks(bridge) == n
