"""interp.edges on the real catalog models: smollm2-135m (GQA, RMSNorm, RoPE) and minilm-l6 (post-norm)."""

from __future__ import annotations

import re

import pytest
import torch

import interp
from interp.causal import Direction
from interp.models import tokenize

pytestmark = pytest.mark.real


def test_smollm2_graph(smollm2):
    g = interp.circuit_graph(smollm2)
    assert (len(g.writers), len(g.readers), g.n_edges) == (301, 481, 70_651)
    assert "70,651 edges" in repr(g) and "3 KV heads for 9 query heads" in repr(g)
    assert "L0.mlp→L23.attn.v[H1]" in g and "L23.H3→unembed" in g and "L5.H0→L5.attn.q[H1]" not in g


def test_smollm2_ioi_task(smollm2):
    t = interp.load_task("ioi", smollm2)
    assert t.n >= 100 and "ABBA" in t.description and "BABA" in t.description
    lens = tokenize(smollm2, t.clean).attention_mask.sum(1)
    assert bool((lens == lens[0]).all()) and torch.equal(lens, tokenize(smollm2, t.corrupt).attention_mask.sum(1))
    for c, k, a, w in zip(t.clean, t.corrupt, t.answer, t.wrong):
        assert len(smollm2.tokenizer(a, add_special_tokens=False)["input_ids"]) == 1
        assert a.strip() in c and w.strip() in c and c.count(w.strip()) == 2  # the subject is repeated
        names_k = set(re.findall(r"[A-Z][a-z]+", k)) - {"Then", "After", "When", "While", "Afterwards", "Friends"}
        assert len(names_k) == 3 and not names_k & {a.strip(), w.strip()}  # three other names


@pytest.mark.slow
def test_smollm2_ioi_edges(smollm2):
    """EAP on IOI finds the name movers' direct edges; evaluating every edge is the model's own run."""
    t = interp.load_task("ioi", smollm2, n=8)
    s = interp.edge_attribution(smollm2, t.clean, t.corrupt, metric=t.metric, method="eap", progress=False)
    top = set(s.top(10)["edge"])
    assert "L23.H3→unembed" in top, sorted(top)
    hf = smollm2.bridge.original_model
    bc, bk = tokenize(smollm2, t.clean), tokenize(smollm2, t.corrupt)
    ids = lambda x: torch.tensor([smollm2.tokenizer(v, add_special_tokens=False)["input_ids"][0] for v in x])
    a, w = ids(t.answer), ids(t.wrong)

    def hf_metric(b):
        with torch.no_grad():
            y = hf(b.tokens, attention_mask=b.attention_mask).logits[:, -1]
        r = torch.arange(len(y))
        return (y[r, a] - y[r, w]).double()

    ev = interp.evaluate_circuit(smollm2, t.clean, t.corrupt, s.circuit(n=700), metric=t.metric)
    assert (ev.per_prompt[1] - hf_metric(bc)).abs().max() < 1e-3  # all edges: the clean run
    assert (ev.per_prompt[2] - hf_metric(bk)).abs().max() < 1e-3  # none: the corrupt run
    assert s.clean == pytest.approx(float(hf_metric(bc).mean()), abs=1e-3)


@pytest.mark.slow
def test_minilm_post_norm_edges(minilm):
    """Post-norm on a real encoder: scores, evaluation ends equal the model's own hidden states."""
    clean = ["The movie was wonderful and moving.", "A truly great film."]
    corrupt = ["The movie was terrible and boring.", "A truly awful film."]
    u = torch.linspace(-1, 1, minilm.arch.d_model)
    met = Direction(u)
    bc, bk = tokenize(minilm, clean), tokenize(minilm, corrupt)
    if not torch.equal(bc.attention_mask.sum(1), bk.attention_mask.sum(1)):
        pytest.skip("the sentences tokenise to different lengths for this tokenizer")
    s = interp.edge_attribution(minilm, clean, corrupt, metric=met, method="eap-ig", ig_steps=8, progress=False)
    assert s.completeness_error < 0.2 * abs(s.target)
    ev = interp.evaluate_circuit(minilm, clean, corrupt, s.circuit(n=200), metric=met)
    hf = minilm.bridge.original_model

    def pooled(b):
        with torch.no_grad():
            h = getattr(hf, "bert", hf)(b.tokens, attention_mask=b.attention_mask).last_hidden_state
        m = b.attention_mask.to(h.dtype)
        return (((h * m[..., None]).sum(1) / m.sum(1, keepdim=True)) @ u).double()

    assert (ev.per_prompt[1] - pooled(bc)).abs().max() < 1e-4
    assert (ev.per_prompt[2] - pooled(bk)).abs().max() < 1e-4
