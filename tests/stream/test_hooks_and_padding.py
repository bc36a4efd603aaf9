"""Padding never leaks into real positions; a trace changes nothing and leaves no hook behind
(docs/math.md §15), even when the forward pass raises or is interrupted."""

from __future__ import annotations

import pytest
import torch

from interp.stream.internal import count_hooks
from interp.stream import trace

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


def test_trace_logits_are_the_models_own_and_the_model_is_untouched(family_model):
    """A trace reads the engine's forward: its logits are the bridge's own at every real position (to float
    rounding), and the bridge computes bitwise the same before and after traces."""
    bridge = family_model.bridge
    first = trace(family_model, [LONG, SHORT])
    tokens, mask = first.tokens, first.attention_mask
    with torch.no_grad():
        before = bridge(tokens, attention_mask=mask)
    for kwargs in ({}, {"neurons": True}, {"project_onto": torch.ones(2, family_model.arch.d_model)}):
        tr = trace(family_model, [LONG, SHORT], **kwargs)
        if not family_model.arch.has_logits:  # an encoder without an unembedding: no logits to read
            assert tr.logits is None
            continue
        assert tr.logits is not None
        assert rel(tr.logits, before, mask) <= 1e-5, kwargs
    with torch.no_grad():
        again = bridge(tokens, attention_mask=mask)
    assert torch.equal(again, before)


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
def test_a_raising_user_hook_is_left_alone_by_a_trace(family_model, exc):
    """A trace attaches nothing to the bridge and does not run it: a user's hook that raises inside the bridge's
    forward neither fires during a trace nor is removed by one, and still fires on the bridge's own forward."""
    bridge = family_model.bridge
    L = family_model.arch.n_layers
    point = f"blocks.{L - 1}.hook_resid_post"
    fired = []

    def user_hook(x, hook):
        fired.append(hook.name)
        raise exc("raised inside the forward pass")

    before, n = _attached(bridge), count_hooks(bridge)
    bridge.add_hook(point, user_hook)
    with_user = _plus(before, bridge.hook_dict[point].name)
    try:
        tr = trace(family_model, [LONG, SHORT])
        assert not fired, "a trace runs the engine's forward, not the bridge's"
        assert tr.decompose(tr.reads[-1]).relative_error <= 1e-4
        assert _attached(bridge) == with_user and count_hooks(bridge) == n + 1
        with pytest.raises(exc), torch.no_grad():
            bridge(torch.tensor([[1, 5, 6]]))
        assert fired
    finally:
        bridge.reset_hooks()  # removes the user's hook (the bridge's permanent ones stay)
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


def test_user_hooks_survive_a_trace_and_see_the_bridges_forward(family_model):
    """A user's (non-raising) hook is left attached by a trace; it sees the bridge's forwards, not the trace's
    (which is the engine's), and the bridge's tensor there is the one the trace holds."""
    bridge = family_model.bridge
    seen = []
    n = count_hooks(bridge)
    bridge.add_hook("blocks.0.hook_resid_pre", lambda x, hook: seen.append(x.detach().clone()))
    try:
        tr = trace(family_model, [LONG, SHORT])
        assert seen == []
        assert count_hooks(bridge) == n + 1
        with torch.no_grad():
            bridge(tr.tokens, attention_mask=tr.attention_mask)
        assert len(seen) == 1
        assert rel(tr.activations["blocks.0.hook_resid_pre"], seen[0], tr.attention_mask) <= 1e-5
    finally:
        bridge.reset_hooks()
    assert count_hooks(bridge) == n
