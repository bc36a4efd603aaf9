"""The real Gemma 3 270M (catalog ``gemma3-270m``, offline): the analyses are exact against an independent
computation — the Hugging Face model's own logits and hidden state, transformer-lens's patching sweep on the
same bridge — through its sandwich norms, QK-norm and sliding windows."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching

import interp
from interp.causal import LogitDiff
from interp.engine import self_check

pytestmark = [pytest.mark.real, pytest.mark.slow]

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def _ids(m, text):
    return m.to_tokens(text)


def _hf_logits(m, text):
    with torch.no_grad():
        return m.bridge.original_model(_ids(m, text)).logits[0, -1]


def _tok(m, t):
    return m.tokenizer(t, add_special_tokens=False)["input_ids"][0]


def test_the_engine_reproduces_its_forward(gemma3):
    assert gemma3.arch.qk_norm and gemma3.arch.sandwich_norms and gemma3.arch.window(0) == 512
    assert gemma3.arch.window(5) == 0  # every sixth layer attends globally (its own rotary table)
    assert self_check(gemma3) < 1e-4


def test_attribution_is_exact_and_the_models_own_logit_difference(gemma3):
    a = interp.attribute_logits(gemma3, CLEAN, answer=" Mary", wrong=" John")
    hf = _hf_logits(gemma3, CLEAN)
    want = float(hf[_tok(gemma3, " Mary")] - hf[_tok(gemma3, " John")])
    assert float(a.logit[0]) == pytest.approx(want, abs=1e-4) and want > 4.0  # it solves IOI
    assert a.closure_error <= 1e-4 * abs(want)


def test_trace_closes_to_the_hidden_state(gemma3):
    tr = interp.trace(gemma3, CLEAN)
    d = tr.decompose("blocks.17.hook_resid_post")
    with torch.no_grad():
        h = gemma3.bridge.original_model(_ids(gemma3, CLEAN), output_hidden_states=True).hidden_states
    assert d.relative_error < 1e-5
    # HF's last hidden state is after the final norm; block 16's output is hidden_states[17]
    d16 = tr.decompose("blocks.16.hook_resid_post")
    # the trace reads the engine's forward: it is HF's to float32 rounding at the stream's scale (values up to ~1e3
    # here, so an element near 0 may differ by ~1e-3: not an elementwise 1e-4, which held while the trace read the
    # bridge's own forward, HF's computation itself)
    gap = float((d16.total[0] - h[17][0]).abs().max() / h[17][0].abs().max())
    assert gap <= 1e-5, gap


def test_all_heads_patching_equals_transformer_lens(gemma3):
    m = gemma3
    r = interp.patch(m, CLEAN, CORRUPT, metric=LogitDiff(" Mary", " John"), progress=False)
    a, w = _tok(m, " Mary"), _tok(m, " John")
    _, cache = m.bridge.run_with_cache(_ids(m, CLEAN))
    tl = patching.get_act_patch_attn_head_out_all_pos(
        m.bridge, _ids(m, CORRUPT), cache, lambda lg: lg[0, -1, a] - lg[0, -1, w]
    )
    assert r.head_matrix().shape == tl.shape == (18, 4)
    assert float((r.head_matrix() - tl.double()).abs().max()) <= 1e-4
    assert (r.head_matrix() - r.corrupt).abs().max() > 0.1  # some head matters


def test_circuit_evaluation_endpoints_and_eap_ig_completeness(gemma3):
    """Every edge in → the model's own clean metric; none → its corrupt metric (HF logits); EAP-IG's edges out
    of the embedding sum to M(clean) − M(corrupt) within 2 % (16 path points)."""
    m, met = gemma3, LogitDiff(" Mary", " John")
    edges = list(interp.circuit_graph(m).edges)
    full = interp.evaluate_circuit(m, CLEAN, CORRUPT, edges, metric=met)
    none = interp.evaluate_circuit(m, CLEAN, CORRUPT, [], metric=met)
    hc, hk = _hf_logits(m, CLEAN), _hf_logits(m, CORRUPT)
    a, w = _tok(m, " Mary"), _tok(m, " John")
    assert float(full.per_prompt[0][0]) == pytest.approx(float(hc[a] - hc[w]), abs=1e-4)
    assert float(none.per_prompt[0][0]) == pytest.approx(float(hk[a] - hk[w]), abs=1e-4)
    s = interp.edge_attribution(m, CLEAN, CORRUPT, metric=met, method="eap-ig", ig_steps=16, progress=False)
    assert len(s) == len(edges) and s.completeness_error < 0.02 * abs(s.target)  # measured 0.46 %
