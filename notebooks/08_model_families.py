# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Another family: Gemma 3 270M, exactly
#
# **What this shows.** interp's analyses run on one forward engine that knows each model family as a set
# of capabilities (docs/models.md). Gemma 3 has several a Llama block does not: a norm on each sublayer's
# output before it is added (*sandwich* norms), an RMSNorm on every query and key (QK-norm), sliding-window
# attention on five layers of every six with its own rotary table, one KV head for four query heads, and
# (1 + w) norm gains. On the real Gemma 3 270M base model (`gemma3-270m`, a GGUF shipped on PyPI, offline)
# we
#
# 1. load it — interp checks its own forward against the model's at load and says by how much they differ;
# 2. ask what it predicts on an indirect-object prompt;
# 3. attribute the logit difference exactly to heads, MLPs and embeddings (each head's write through its
#    layer's frozen sandwich norm) and print the closure error;
# 4. patch every head exactly, and compare with transformer-lens's own patching sweep;
# 5. score every edge with EAP-IG and check a circuit's two endpoints against the model's own runs.
#
# Offline, about 2 minutes on 2 CPU cores (the first run also dequantizes the GGUF, ~50 s).

# %%
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below runs offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import logging
import time

import plotly.io as pio
import torch

import interp

logging.getLogger("transformers").setLevel(logging.ERROR)
pio.renderers.default = "plotly_mimetype+png"  # interactive in Jupyter; a PNG copy where JavaScript does not run
T0 = time.perf_counter()

# %% [markdown]
# ## 1. Load, and the self-check
#
# `interp.load_model` runs interp's engine beside the model's own forward on a short probe and compares the
# residual stream entering every block and the logits; a model it does not reproduce is refused. The
# capabilities it read off the config are on `model.arch`.

# %%
model = interp.load_model("gemma3-270m")
a = model.arch
print(model)
print(f"sliding windows: {a.sliding_windows}")
print(f"QK-norm: {a.qk_norm}, sandwich norms: {a.sandwich_norms}, embedding scale √d = {a.embed_scale:.3f}, "
      f"score scale {a.attn_scale(0)}")
print(f"engine vs the model's own forward: {interp.engine.self_check(model):.1e} relative (refused above 1e-4)")

# %% [markdown]
# ## 2. What does it predict?
#
# It is the base (pretrained) model, not instruction-tuned: a prompt should read like text it would continue.

# %%
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
interp.predict(model, [clean, corrupt], k=5).to_dataframe()[["prompt", "rank", "token", "prob"]]

# %% [markdown]
# ## 3. Exact logit attribution
#
# logit(" Mary") − logit(" John") split into one term per head, MLP and embedding. A head's term is its
# write through its layer's sandwich norm with that norm's scale frozen (γ' ⊙ z_h W_O^h / σ'), then
# through the final norm, frozen too: the terms add up to the model's own logit difference.

# %%
attr = interp.attribute_logits(model, clean, answer=" Mary", wrong=" John")
with torch.no_grad():
    logits = model.bridge.original_model(model.to_tokens(clean)).logits[0, -1]
tok = lambda t: model.tokenizer(t, add_special_tokens=False)["input_ids"][0]  # noqa: E731
own = float(logits[tok(" Mary")] - logits[tok(" John")])
print(f"the model's own logit difference {own:.4f}; sum of terms {float(attr.values.sum(0)[0]):.4f}; "
      f"closure error {attr.closure_error:.1e}")
attr.top(8)

# %%
attr.plot()

# %% [markdown]
# ## 4. Every head patched, exactly
#
# Activation patching of all 72 heads (denoising: the corrupt run with one head's output from the clean
# run) by prefix sharing in one growing batch, against transformer-lens's `get_act_patch_attn_head_out_all_pos`
# (one forward per head) on the same bridge.

# %%
from transformer_lens import patching  # noqa: E402

t = time.perf_counter()
result = interp.patch(model, clean, corrupt, metric=interp.LogitDiff(" Mary", " John"), progress=False)
t_interp = time.perf_counter() - t
_, cache = model.bridge.run_with_cache(model.to_tokens(clean))
t = time.perf_counter()
tl = patching.get_act_patch_attn_head_out_all_pos(model.bridge, model.to_tokens(corrupt), cache,
                                                   lambda lg: lg[0, -1, tok(" Mary")] - lg[0, -1, tok(" John")])
t_tl = time.perf_counter() - t
print(f"max |interp − transformer-lens| = {float((result.head_matrix() - tl.double()).abs().max()):.1e}; "
      f"interp is {t_tl / t_interp:.0f}× faster here")
result.top(6)

# %%
result.plot()

# %% [markdown]
# ## 5. Edges
#
# EAP-IG scores every writer → reader edge (each head's q of its own, the one KV head's k and v, each MLP's
# input, the logits) at once; a head's write is its image through its layer's sandwich norm, so the edges
# out of the embedding still sum to M(clean) − M(corrupt) as the path is refined (completeness). Circuit
# evaluation with every edge kept is the clean run, with none the corrupt run — exactly.

# %%
scores = interp.edge_attribution(model, clean, corrupt, metric=interp.LogitDiff(" Mary", " John"), ig_steps=16,
                                 progress=False)  # 16 path points: completeness within 1 % (5 give 13 %)
print(scores)
edges = list(interp.circuit_graph(model).edges)
full = interp.evaluate_circuit(model, clean, corrupt, edges, metric=interp.LogitDiff(" Mary", " John"))
none = interp.evaluate_circuit(model, clean, corrupt, [], metric=interp.LogitDiff(" Mary", " John"))
print(f"every edge: {float(full.per_prompt[0][0]):.4f} (clean run {result.clean:.4f}); "
      f"no edge: {float(none.per_prompt[0][0]):.4f} (corrupt run {result.corrupt:.4f})")
scores.top(8)

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")
