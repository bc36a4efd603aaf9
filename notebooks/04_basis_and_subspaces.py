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
# # 04 · The Framework paper's basis claims, tested: basis, privileged basis, subspaces, erasure
#
# **What this shows.** Elhage et al. 2021 ("A Mathematical Framework for Transformer
# Circuits") makes four claims about the residual stream. We test each on **smollm2-135m**:
#
# 1. **No privileged basis, so rotations are free.** Rotating the stream's basis (x ↦ x R, R orthogonal)
#    and every weight that touches it gives a model with the same logits, the same per-head logit
#    attribution and the same composition and copying scores.
# 2. **MLP neurons do have a privileged basis** (an elementwise nonlinearity singles out the coordinate
#    axes) and the residual stream does not: measured by the kurtosis of each coordinate, against a
#    random-basis control (the trained model turns out to be more interesting than the claim).
# 3. **Heads write to low-dimensional subspaces**: each head writes into the `d_head = 64`-dimensional
#    row space of its W_O, 11% of the 576-dimensional stream; how much do these subspaces overlap?
# 4. **Memory management**: heads whose OV map sends an earlier write's subspace onto its negative
#    ("erasure" candidates).
#
# Offline, about 1–2 minutes on 2 CPU cores (building the rotated model is the slowest step).

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

# %%
from interp import circuits

model = interp.load_model("smollm2-135m")
prompt = "When John and Mary went to the shops, John gave the bag to"
tr = interp.trace(model, prompt)
print(model)

# %% [markdown]
# ## 1. Rotating the residual basis changes nothing
#
# With x ↦ x R: writes W_E, W_O, W_out become W R; reads W_Q, W_K, W_V, W_in, W_U become Rᵀ diag(γ) W (the
# norm gain γ is folded in first: a per-coordinate gain does not commute with R, the RMS does,
# rms(x R) = rms(x)). `interp.rotate_residual` builds that model — a fresh Hugging Face module holding
# the rotated weights, wrapped in its own bridge. The stream of the new model is the old stream times R,
# coordinate by coordinate different, yet every output agrees:

# %%
R = circuits.random_rotation(model.arch.d_model, seed=0, dtype=torch.float32)
rotated = interp.rotate_residual(model, R)
print(rotated)
print("‖RᵀR − I‖_max =", f"{(R.T @ R - torch.eye(model.arch.d_model)).abs().max().item():.1e}")

rtr = interp.trace(rotated, prompt)
x = tr.activations["blocks.10.hook_resid_post"]
xr = rtr.activations["blocks.10.hook_resid_post"]
print(f"stream after block 10: max |x − x_rot| = {(x - xr).abs().max().item():.1f}, "
      f"but max |x R − x_rot| / max |x| = {((x @ R - xr).abs().max() / x.abs().max()).item():.1e}")
print(f"logits: max |Δ| = {(tr.logits - rtr.logits).abs().max().item():.1e} "
      f"(logits up to {tr.logits.abs().max().item():.0f})")

# %%
a0 = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
a1 = interp.attribute_logits(rotated, prompt, answer=" Mary", wrong=" John")
print(f"per-term DLA: max |Δ| = {(a0.values - a1.values).abs().max().item():.1e} "
      f"(closure errors {a0.closure_error:.1e}, {a1.closure_error:.1e})")
c0, c1 = interp.copying_scores(model), interp.copying_scores(rotated)
print(f"copying scores: max |Δ| = {(c0.scores - c1.scores).abs().max().item():.1e}")
k0, k1 = interp.composition_scores(model, "K"), interp.composition_scores(rotated, "K")
print(f"K-composition scores: max |Δ| = {(k0.scores - k1.scores).nan_to_num().abs().max().item():.1e}")

# %% [markdown]
# The claim needs two caveats, both enforced by `rotate_residual`: LayerNorm models also *centre* the
# stream (project out the all-ones direction), which commutes with R only if R·1 = 1
# (`random_rotation(d, fix_ones=True)` gives such an R); and post-norm models cannot be rotated at all,
# because their norm's gain multiplies the stream itself. The encoder refuses, with the reason:

# %%
enc = interp.load_model("minilm-l6")
try:
    interp.rotate_residual(enc, circuits.random_rotation(enc.arch.d_model, fix_ones=True))
except interp.InterpError as e:
    print(type(e).__name__, ":", e)
del enc, rotated, rtr

# %% [markdown]
# ## 2. Neurons have a privileged basis; the residual stream mostly does not
#
# If features align with the coordinate axes, single coordinates are heavy-tailed: a large excess kurtosis
# κ = E[(x−μ)⁴]/E[(x−μ)²]² − 3 (0 for a Gaussian). `privileged_basis_report` streams κ of every
# coordinate over the tokens of some text for (a) the residual stream after each block, (b) the same
# stream in a random orthogonal basis — the control, what "no preferred basis" looks like — and (c)
# every MLP neuron (the input of W_out).

# %%
texts = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
    "In 1969, astronauts landed on the Moon and walked on its dusty surface for several hours.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "She opened the window, and the cold morning air filled the quiet little room at once.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "When John and Mary went to the shops, John gave the bag to Mary and then went home.",
]
pb = circuits.privileged_basis_report(model, texts)
print(pb)
df = pb.to_dataframe()
cols = ["layer", "resid_median", "resid_rotated_median", "neurons_median",
        "resid_frac_gt10", "resid_rotated_frac_gt10", "neurons_frac_gt10"]
df[cols].iloc[::5].round(3)

# %%
summary = {group: (df[f"{group}_median"].median(), df[f"{group}_frac_gt10"].mean())
           for group in ("resid", "resid_rotated", "neurons")}
for group, (med, frac) in summary.items():
    print(f"{group:14s} median κ over layers {med:6.2f}; share of coordinates with κ > 10: {frac:.1%}")
pb.top(8)

# %% [markdown]
# Neurons are heavy-tailed in every layer. The residual stream in its own basis has a median κ below 1
# everywhere — but a handful of its coordinates are extreme, and in the early layers the *random-basis*
# control is the more kurtotic one. The most kurtotic residual coordinate of each layer says why: the
# same one or two dimensions carry the outliers for many layers in a row (the "massive activations" of
# trained LLMs). Concentrated on one axis in the model's own basis, they touch few coordinates; a
# rotation spreads them over all of them.

# %%
kmax, dim = pb.resid.max(dim=1)
print("most kurtotic residual coordinate per layer (dim: κ):")
print(", ".join(f"L{l} {d}: {k:.0f}" for l, (d, k) in enumerate(zip(dim.tolist(), kmax.tolist()))))

# %%
pb.plot()

# %% [markdown]
# ## 3. Heads write into small subspaces
#
# Head h writes z_h W_O^h with W_O^h of shape [d_head, d_model] = [64, 576]: every write lies in the
# 64-dimensional row space of W_O^h. The MLPs' W_out [1536, 576] has full rank 576.

# %%
w = model.weights
W_O = w.W_O.flatten(0, 1).double()  # [n_layers * n_heads, d_head, d_model]
head_ranks = torch.linalg.matrix_rank(W_O @ W_O.transpose(-1, -2), hermitian=True)  # rank(W Wᵀ) = rank(W)
W_out = w.W_out[[0, 15, 29]].double()  # three layers: [3, d_mlp, d_model]
mlp_ranks = torch.linalg.matrix_rank(W_out.transpose(-1, -2) @ W_out, hermitian=True)
print(f"rank of W_O^h, all {len(head_ranks)} heads: {sorted(set(head_ranks.tolist()))} of "
      f"d_model={model.arch.d_model} ({model.arch.d_head / model.arch.d_model:.1%} of the stream per head)")
print(f"rank of W_out in layers 0, 15, 29: {mlp_ranks.tolist()}")

# %% [markdown]
# Do different heads share their subspaces? Overlap = mean cos² of the principal angles between two heads'
# write subspaces (1: the same subspace; two random 64-dimensional subspaces of R⁵⁷⁶ give 64/576 ≈ 0.11).

# %%
so = circuits.write_subspace_overlap(model)
print(so)
pairs = so.to_dataframe()
L = pairs.head_a.str.extract(r"L(\d+)")[0].astype(int)
same_layer = L == pairs.head_b.str.extract(r"L(\d+)")[0].astype(int)
print(f"mean overlap, heads of the same layer: {pairs.overlap[same_layer].mean():.3f}; "
      f"of different layers: {pairs.overlap[~same_layer].mean():.3f}; random baseline {so.baseline:.3f}")
so.top(8)

# %%
import plotly.express as px

px.histogram(pairs, x="overlap", color=same_layer.map({True: "same layer", False: "different layers"}),
             nbins=80, barmode="overlay", log_y=True,
             title=f"write-subspace overlap of all head pairs (random baseline {so.baseline:.3f})")

# %% [markdown]
# ## 4. Erasure ("memory management") candidates
#
# A later head d erases what an earlier write s put in the stream if its OV map sends s's subspace back
# onto its negative. With U_s an orthonormal basis of s's write subspace, E = U_sᵀ W_V^d W_O^d U_s
# [64, 64]: `mean_gain` = tr(E)/64 < 0 means s's writes come back negated on average; `max_eig` < 0
# (of the symmetric part) would mean *every* direction is erased.

# %%
er = circuits.erasure_candidates(model)
print(er)
er.top(10)

# %% [markdown]
# An independent recomputation of the top pair's gain from the (norm-folded) OV circuit and an SVD of
# the source head's W_O:

# %%
top = er.top(1).iloc[0]
(ls, hs), (ld, hd) = [map(int, lab[1:].split(".H")) for lab in (top.src, top.dst)]
ov = interp.ov_circuit(model, ld, hd)  # W_V^g W_O^h with ln1's gain folded into W_V
U = torch.linalg.svd(w.W_O[ls, hs].double(), full_matrices=False).Vh.T  # [d_model, d_head]
E = U.T @ ov.A.double() @ ov.B.double() @ U
print(f"{top.src} → {top.dst}: mean gain {torch.trace(E).item() / U.shape[1]:.4f} (table: {top.mean_gain:.4f})")

# %% [markdown]
# Does that head actually write against the source's direction on the prompt? Compare the two heads'
# terms in the residual stream at the final token (`decompose` of the last resid point), and the same
# heads' logit attribution from notebook 02:

# %%
last = tr.decompose(f"blocks.{model.arch.n_layers - 1}.hook_resid_post")
print(f"closure error {last.closure_error:.1e} (relative {last.relative_error:.1e})")
src_w, dst_w = last[top.src][0, -1], last[top.dst][0, -1]
cos = torch.nn.functional.cosine_similarity(src_w, dst_w, dim=0)
print(f"cos({top.src} write, {top.dst} write) at the last token: {cos.item():+.2f}")
print(f"DLA (Mary − John): {top.src} {a0[top.src].item():+.2f}, {top.dst} {a0[top.dst].item():+.2f}")
er.plot()

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")

# %% [markdown]
# ## What we saw
#
# * A random rotation of the residual basis (norm gains folded first) changes every weight and every
#   coordinate of the stream, yet logits agree to ~1e-5 and per-head DLA, copying and composition scores
#   to float rounding: the stream has no privileged basis. Post-norm models and LayerNorm with R·1 ≠ 1
#   are the exceptions, and interp refuses them with the reason.
# * MLP neuron activations are heavy-tailed in every layer (a privileged basis). Residual coordinates
#   mostly are not, but training has aligned a few outlier features with single coordinates (the same
#   dimension over many layers); the arithmetic is rotation-invariant, the trained weights are not
#   entirely basis-agnostic.
# * Every head writes into a 64-of-576-dimensional subspace; most pairs overlap at the random level, but
#   heads of the same layer often share a subspace.
# * The strongest erasure candidates are late heads whose OV maps are strongly negative on earlier heads'
#   subspaces (none fully negative-definite); on the IOI prompt the top pair's writes point against each
#   other and their logit attributions have opposite signs.
