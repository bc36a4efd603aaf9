"""Top activating contexts (interp.features.top_activating_contexts), against the Hugging Face model's own MLP inputs
(a forward pre-hook on each layer's MLP, not the engine): each feature's first context is at the (text, token) of
its largest activation, which it states, and the contexts are in decreasing order; the graph viewer matches them."""

from __future__ import annotations

import re

import pytest

from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import top_activating_contexts
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_transcoders

TEXTS = ["w1 w2 w3 w4 w5", "w9 w8 w7 w6 w5 w4 w3", "w20 w21 w1 w22"]


def test_contexts_against_hf_mlp_inputs():
    hf = tiny_hf_model("llama")
    m = model_from_hf(tiny_hf_model("llama"), tiny_tokenizer(), name="tiny-llama")
    tcs = random_transcoders(m, 16, seed=3)
    feats = [(0, 2), (1, 5), (1, 7)]
    got = top_activating_contexts(m, tcs, TEXTS, [f"L{l}.F{f}" for l, f in feats], k=3, before=2)
    acts = {l: [] for l in (0, 1)}
    for text in TEXTS:
        ids = m.to_tokens(text)
        seen = {}
        hs = [
            hf.model.layers[l].mlp.register_forward_pre_hook(lambda mod, a, l=l: seen.__setitem__(l, a[0][0]))
            for l in (0, 1)
        ]
        hooked_forward(hf, hs, ids)
        for l in (0, 1):
            acts[l].append((ids[0].tolist(), tcs[l].encode(seen[l])))
    for l, f in feats:
        best = max(((float(a[p, f]), toks[p]) for toks, a in acts[l] for p in range(len(toks))), key=lambda x: x[0])
        ctx = got[f"L{l}.F{f}"]
        vals = [float(re.search(r"\(([-0-9.e+]+)\)$", c).group(1)) for c in ctx]
        print(f"L{l}.F{f}: {ctx[0]!r}; HF max {best[0]:.4g}")
        assert vals == sorted(vals, reverse=True) and len(ctx) <= 3
        assert vals[0] == pytest.approx(best[0], rel=1e-3)
        assert f"«{m.tokenizer.decode([best[1]])}»" in ctx[0]
    with pytest.raises(ArgumentError, match="feature 99 of layer 0 does not exist"):
        top_activating_contexts(m, tcs, TEXTS, ["L0.F99"])
    with pytest.raises(ArgumentError, match="texts"):
        top_activating_contexts(m, tcs, [], ["L0.F1"])
