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
# # 01 · The residual stream, decomposed exactly
#
# **What this shows.** The residual-stream view of a transformer (Elhage et al. 2021, §2):
# each token carries one `d_model`-dimensional vector from the embedding to the unembedding, and every
# sublayer *reads* from it and *writes* back into it. We
#
# 1. trace **smollm2-135m** (pre-norm RMSNorm, Llama family) on one prompt and list its read and write
#    points;
# 2. decompose a residual point and a read point (the query input of one head) into per-head / per-MLP
#    terms and print the **closure error** |Σ terms − the model's own tensor|;
# 3. do the same for the post-norm **MiniLM** encoder ("Add & Norm"), where the raw
#    writes do *not* add up to the hidden state, and show how interp carries every write through each
#    later norm with the norm's scale frozen from the forward pass.
#
# Offline, about a minute on 2 CPU cores (the two models load from installed packages).

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
torch.manual_seed(0)
T0 = time.perf_counter()

# %% [markdown]
# ## Pre-norm: the stream is a plain sum
#
# A pre-norm block (GPT-2, Llama, SmolLM2) normalises only the *copy* a sublayer reads:
#
# $$x_\text{mid} = x + \text{Attn}(N_1(x)), \qquad x_\text{out} = x_\text{mid} + \text{MLP}(N_2(x_\text{mid})),$$
#
# with one final norm before the unembedding. (A common mis-statement writes the pre-norm residual as
# $t^3 = t^2 + t^1$ with $t^1 = \text{LN}(x)$, i.e. it adds the *normalised* input back; that is wrong —
# the un-normalised $x$ is carried forward, which is why the stream stays additive.)
# So the residual stream at any point is the sum of everything written before it: the embedding, each
# head's $z_h W_O^h$, each MLP's output (and output biases where a model has them).

# %%
model = interp.load_model("smollm2-135m")
print(model)
prompt = "When John and Mary went to the shops, John gave the bag to"
tr = interp.trace(model, prompt)  # one hooked forward pass
print(tr.str_tokens[0])
print(f"{len(tr.writes)} writes: {tr.writes[:3]} … {tr.writes[-2:]}")
print(f"{len(tr.reads)} reads:  {tr.reads[:2]} … {tr.reads[-2:]}")
print(f"{len(tr.resid_points)} resid points: {tr.resid_points[:3]} …")

# %% [markdown]
# Reads are named by what reads: `L20.attn.q[H3]` is query head 3's input, `L20.attn.k[H1]` /
# `L20.attn.v[H1]` a *KV head's* input (smollm2 has 9 query heads sharing 3 KV heads, GQA),
# `L20.mlp.in` the MLP's input and `unembed` what the unembedding reads (after the final norm).
#
# Decompose the residual stream after block 10. Every term is a raw write, untouched; the check below
# uses only the model's own hooks: `resid_mid − resid_pre` of block 3 must equal the sum of that layer's
# head terms (smollm2 has no attention bias).

# %%
d = tr.decompose("blocks.10.hook_resid_post")
print(d)
print(f"closure error {d.closure_error:.2e} (relative {d.relative_error:.2e})")

acts = tr.activations
heads3 = sum(d[f"L3.H{h}"] for h in range(model.arch.n_heads))
attn3 = acts["blocks.3.hook_resid_mid"] - acts["blocks.3.hook_resid_pre"]
print("max |Σ_h L3.H* − (resid_mid − resid_pre)| =", f"{(heads3 - attn3).abs().max().item():.2e}")
print("max |L3.mlp term − hook_mlp_out|          =",
      f"{(d['L3.mlp'] - acts['blocks.3.hook_mlp_out']).abs().max().item():.2e}")
d.top(8)

# %% [markdown]
# ## Reading through a norm
#
# A read point sees the stream through its sublayer's norm. RMSNorm is
# $N(x) = \gamma \odot x / \sigma(x)$ with $\sigma(x) = \sqrt{\text{mean}(x^2) + \epsilon}$: not linear in
# $x$, but with the per-token scale $\sigma$ **frozen** at its value in this forward pass it is, so the
# normalised input splits exactly into $\gamma \odot w / \sigma$ for every earlier write $w$
# (for LayerNorm the writes are also centred and the norm's $\beta$ becomes a term of its own).
# Here is what query head 3 of layer 20 reads at the last token, term by term:

# %%
q = tr.decompose("L20.attn.q[H3]")
print(q)
print(f"closure error {q.closure_error:.2e} (relative {q.relative_error:.2e}) against blocks.20.ln1.hook_out")
q.plot(k=15)

# %% [markdown]
# The same token's whole stream, layer by layer: the norm of the stream at every resid point, and how
# large each sublayer's write is (the residual-stream picture). In a pre-norm model a write, once added, stays in
# the stream unchanged.

# %%
from interp.plots import residual_stream_figure

residual_stream_figure(tr, pos=-1)

# %% [markdown]
# ## Post-norm: Add & Norm rescales everything already in the stream
#
# The original Transformer and BERT (MiniLM is a 6-layer BERT) put the norm *after* the residual
# addition ("Add & Norm"):
#
# $$x_\text{mid} = N_1(x + \text{Attn}(x)), \qquad x_\text{out} = N_2(x_\text{mid} + \text{MLP}(x_\text{mid})).$$
#
# Each norm centres and rescales the whole stream, including everything written before it, and adds
# its own $\beta$. So summing the raw writes (embeddings + heads + MLPs) does **not** give the hidden
# state — the check below does exactly that, from the captured activations, and misses by a lot:

# %%
enc = interp.load_model("minilm-l6")
print(enc)
sentence = "A man is playing a guitar on stage."
etr = interp.trace(enc, sentence)
print(etr.str_tokens[0])

a, w = etr.activations, enc.weights
naive = a["embed.hook_out"] + a["pos_embed.hook_out"] + a["token_type_embed.hook_out"]
for l in range(enc.arch.n_layers):
    z = a[f"blocks.{l}.attn.hook_z"]  # [batch, pos, n_heads, d_head]
    naive = naive + torch.einsum("bphe,hed->bpd", z, w.W_O[l]) + w.b_O[l] + a[f"blocks.{l}.hook_mlp_out"]
hidden = a[f"blocks.{enc.arch.n_layers - 1}.hook_resid_post"]  # the encoder's last hidden state
print(f"raw writes summed vs hidden state: relative error {((naive - hidden).abs().max() / hidden.abs().max()).item():.2f}")

# %% [markdown]
# With each norm's per-token $\sigma$ frozen, every norm is affine, so interp walks the block program
# backwards from the read point: each earlier write is carried through every later norm (centred,
# scaled by $\gamma/\sigma$), and each norm's $\beta$ joins as a write of its own (`L3.ln1_bias`,
# `L3.ln2_bias`, `embed_ln_bias`). The decomposition of the final hidden state is exact again:

# %%
fin = etr.decompose("final")
print(fin)
print(f"closure error {fin.closure_error:.2e} (relative {fin.relative_error:.2e})")
print([lab for lab in fin.labels if "ln" in lab][:6], "…")
fin.top(8)


# %% [markdown]
# The embedding's contribution is the clearest witness: in the pre-norm model it is the same vector at
# every resid point; in the post-norm encoder every Add & Norm shrinks it (and centres it).

# %%
def embed_norms(trace, pos=-1):
    out = {}
    for point in trace.resid_points:
        if point.endswith("resid_post"):
            dec = trace.decompose(point)
            out[point.split(".")[1]] = round(dec["embed"][0, pos].norm().item(), 3)
    return out

print("smollm2 ‖embed term‖ after each block:", list(embed_norms(tr).values())[::5], "(every 5th block)")
print("minilm  ‖embed term‖ after each block:", list(embed_norms(etr).values()))

# %%
residual_stream_figure(etr, pos=-2)  # the last real word (the final token is [SEP])

# %% [markdown]
# ## Closure errors, both models
#
# Every resid point and a few reads, decomposed in full; closure = max over positions and coordinates
# of |Σ terms − the model's own tensor|, relative = closure / max |tensor|.

# %%
import pandas as pd

rows = []
for name, t in (("smollm2-135m (pre-norm)", tr), ("minilm-l6 (post-norm)", etr)):
    n_layers = t.arch.n_layers
    points = [p for p in t.resid_points if int(p.split(".")[1]) in (0, n_layers // 2, n_layers - 1)]
    points += [t.reads[0], f"L{n_layers - 1}.mlp.in", t.reads[-1]]
    for p in points:
        dec = t.decompose(p)
        rows.append({"model": name, "point": p, "terms": len(dec.labels),
                     "closure_error": dec.closure_error, "relative_error": dec.relative_error})
closure = pd.DataFrame(rows)
print("worst relative closure error:", f"{closure.relative_error.max():.1e}")
closure

# %%
assert closure.relative_error.max() < 1e-4, closure  # docs/math.md §2-4: exact up to fp32 rounding

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")

# %% [markdown]
# ## What we saw
#
# * A pre-norm model's residual stream is literally the sum of its writes: each term of a resid point is
#   the raw write (head outputs match `resid_mid − resid_pre`, the MLP term matches `hook_mlp_out`), and
#   read points split exactly once the norm's scale is frozen — closure ≤1e-6 relative in fp32 at every
#   point we checked.
# * In the post-norm encoder the raw writes summed miss the hidden state by about a hundred times its
#   own size; carrying each write through every later Add & Norm (frozen σ, centring, γ) and counting
#   each β as a write closes the decomposition to the same ≤1e-6 level.
# * The embedding term is constant along a pre-norm stream and shrinks at every post-norm layer: in a
#   post-norm model "what a head wrote" depends on where you look.
