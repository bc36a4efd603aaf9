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
# # 03 · OV and QK circuits: A ⊗ W_O W_V, from a toy to smollm2
#
# **What this shows.** With its attention pattern A frozen, a head is the linear map
# h(X) = A X W_V W_O — in the paper's notation (A ⊗ W_O W_V)·x (Elhage et al. 2021). *Where*
# a head looks is its QK circuit W_Q W_Kᵀ, *what* it moves is its OV circuit W_V W_O. On the 2-layer
# attention-only toy (**toy-attn-only-2l**, trained by interp on sequences with repeated spans) we
#
# 1. check the tensor-product form against the model's own head output;
# 2. read each head's OV and QK circuits, copying scores and OV eigenvalues;
# 3. find the induction circuit **from the weights alone** — a previous-token head (positional QK), heads
#    whose keys read it (K-composition, virtual weights), which copy (OV) and whose keys match "the
#    token before me equals my token" (the composed QK circuit);
# 4. confirm it with the exact path expansion of the logits (direct, one-head and virtual-head paths).
#
# Then the same tools on **smollm2-135m**: copying scores and eigenvalues, K-composition between all
# 270 heads — which points at smollm2's own induction circuit — and a behavioural check. Offline,
# about a minute on 2 CPU cores.

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
import pandas as pd

from interp import circuits, plots, stream
from interp.toy import logits_and_patterns as all_patterns, repeated_tokens

toy = interp.load_model("toy-attn-only-2l")
print(toy, "| norm:", toy.arch.norm, "| positions:", toy.arch.positional)
g = torch.Generator().manual_seed(0)
n = 10
seqs = repeated_tokens(8, n, toy.arch.d_vocab, generator=g)  # <bos> + 10 random words, then the same 10 again
print(" ".join(toy.to_str_tokens(seqs[0])))

# %% [markdown]
# ## 1. A head is A ⊗ W_O W_V
#
# Freeze layer 1's patterns from a forward pass; `head_operator` gives the head as the tensor product.
# `.apply(x)` computes A (x W_V + b_V) W_O; `.matrix()` is the Kronecker matrix A ⊗ (W_V W_O)ᵀ itself,
# [pos·d_model, pos·d_model], acting on the flattened input. Both must reproduce the head's own write,
# which the trace reads off the model (`z_h W_O^h`).

# %%
tr = interp.trace(toy, seqs[:1])
_, patterns = all_patterns(toy, seqs[:1])  # [n_layers, batch, n_heads, pos, pos]
x = tr.activations["blocks.1.hook_resid_pre"][0]  # the head's input (this toy has no norms)
writes = tr.decompose("blocks.1.hook_resid_post")
print(writes, f"closure error {writes.closure_error:.1e}")
for h in range(toy.arch.n_heads):
    op = circuits.head_operator(toy, 1, h, patterns[1, 0, h])
    kron = op.matrix() @ x.flatten()  # (A ⊗ W) vec(X)
    print(f"L1.H{h}: max |apply − model| = {(op.apply(x) - writes[f'L1.H{h}'][0]).abs().max().item():.1e}, "
          f"max |Kronecker − linear part| = {(kron - op.apply(x, value_bias=False).flatten()).abs().max().item():.1e}"
          f"  (matrix {tuple(op.matrix().shape)})")

# %% [markdown]
# ## 2. OV circuits: who copies?
#
# The full OV circuit W_E W_V W_O W_U [d_vocab, d_vocab] says how attending to token s changes the logit
# of every token t. A copying head raises the attended token itself: positive eigenvalues. The copying
# score Σλ/Σ|λ| is computed from the 16 × 16 cyclic product, never the vocab² matrix.

# %%
copying = interp.copying_scores(toy)
print(copying.to_dataframe().round(3).to_string(index=False))
plots.copying_score_map(copying, title="Copying scores — toy-attn-only-2l")

# %%
best = copying.top(1).iloc[0]
full_ov = interp.ov_circuit(toy, int(best.layer), int(best.head_index), full=True)
print(full_ov, "| convention:", full_ov.convention)
plots.ov_eigenvalue_figure(full_ov, label=f"{best['head']} full OV circuit")

# %% [markdown]
# ## 3. The induction circuit, from the weights alone
#
# **(a) A previous-token head.** This toy has learned positions, so a layer-0 head's positional QK
# circuit W_pos W_Q W_Kᵀ W_posᵀ says where it looks by position, whatever the tokens.

# %%
W_pos = toy.weights.W_pos  # [n_ctx, d_model]
q_pos = torch.arange(1, toy.arch.n_ctx)
causal = torch.ones(toy.arch.n_ctx, toy.arch.n_ctx, dtype=torch.bool).tril()
prev_share = []
for h in range(toy.arch.n_heads):
    qk = interp.qk_circuit(toy, 0, h)
    scores = (W_pos @ qk.A @ qk.B @ W_pos.T).masked_fill(~causal, float("-inf"))  # [query pos, key pos]
    prev_share.append((scores[1:].argmax(-1) == q_pos - 1).float().mean().item())
    print(f"L0.H{h}: the top key is the previous position for {prev_share[-1]:.0%} of query positions")
prev_head = int(torch.tensor(prev_share).argmax())
print("previous-token head: L0.H%d" % prev_head)

# %% [markdown]
# **(b) Heads whose keys read it: K-composition.** Score ‖W_OV^src W_QK^dstᵀ‖_F / (‖W_OV^src‖_F ‖W_QK^dst‖_F)
# for every pair of heads in different layers; the virtual weight W_O^src W_K^dst is the map itself.

# %%
comp = {kind: interp.composition_scores(toy, kind) for kind in ("Q", "K", "V")}
print(comp["K"].top(6)[["src", "dst", "score"]].to_string(index=False))
vw = circuits.virtual_weight_norms(toy)
k_reads = [f"L1.attn.k[H{h}]" for h in range(toy.arch.n_heads)]
print("\n‖W_O^src W_K^dst‖_F (virtual weights into layer-1 keys):")
print(pd.DataFrame({src: [vw[src, r] for r in k_reads] for src in [f"L0.H{h}" for h in range(4)]},
                   index=k_reads).round(1).to_string())
circuits.composition_graph(comp, max_edges=6, title="Q/K/V composition — toy-attn-only-2l")

# %% [markdown]
# **(c) The composed QK circuit matches tokens.** A layer-1 head's key at position j contains the
# previous-token head's copy of token j−1, so its token-to-token QK circuit through that head is
# W_E W_Q^{1,h} (W_E W_OV^{0,prev} W_K^{1,h})ᵀ: row = the current token, column = the *previous* token of
# a key. An induction head puts its maximum on the diagonal — attend where the previous token equals
# mine — and then copies (its OV circuit, step 2).

# %%
w = toy.weights
words = slice(2, None)  # skip <bos>, <unk>
ov_prev = interp.ov_circuit(toy, 0, prev_head)  # W_V W_O of the previous-token head, factored
rows = []
for h in range(toy.arch.n_heads):
    query_side = w.W_E[words] @ w.W_Q[1, h]  # [n_words, d_head]
    key_side = w.W_E[words] @ ov_prev.A @ ov_prev.B @ w.W_K[1, h]  # [n_words, d_head]
    M = query_side @ key_side.T  # [current token, previous token of the key]
    diag_top = (M.argmax(-1) == torch.arange(M.shape[0])).float().mean().item()
    rows.append({"head": f"L1.H{h}", "diagonal is the row max": f"{diag_top:.0%}",
                 "K-composition with prev head": round(comp["K"].scores[0, prev_head, 1, h].item(), 3),
                 "copying score": round(copying[f"L1.H{h}"], 3)})
pd.DataFrame(rows)

# %% [markdown]
# The weights predict an induction circuit. Check it on the repeated sequences: the attention of the
# previous-token head and of the layer-1 heads (the second half attends to "the token after the earlier
# copy" — the off-diagonal stripe), and the loss, which drops from ln(n_words) on the unpredictable first
# half to near zero on the second.

# %%
logits, pats = all_patterns(toy, seqs)
q = torch.arange(n + 1, 2 * n + 1)
induction = pats[:, :, :, q, q - n + 1].mean(dim=(1, 3))  # [n_layers, n_heads]
previous = pats[:, :, :, torch.arange(1, 2 * n + 1), torch.arange(0, 2 * n)].mean(dim=(1, 3))
print("induction score (attention to the token after the earlier copy):\n", induction.round(decimals=2))
print("previous-token score:\n", previous.round(decimals=2))
nll = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, seqs[:, 1:, None])[..., 0]
print(f"loss, first half {nll[:, 1:n].mean().item():.2f} (ln n_words = "
      f"{torch.log(torch.tensor(toy.arch.d_vocab - 2.0)).item():.2f}); second half {nll[:, n + 1:].mean().item():.3f}")
stream.attention_patterns(toy, seqs[:1], [f"L0.H{prev_head}", "L1.H1", "L1.H3"]).plot()

# %% [markdown]
# ## 4. Path expansion: which paths write the prediction
#
# With every pattern frozen, this norm-free attention-only model's logits are *exactly* a sum of paths
# (docs/math.md §14): the direct path W_E W_U, one-head paths A^h ⊗ W_E W_OV^h W_U, and virtual-head paths
# through two heads A^{h2}A^{h1} ⊗ W_E W_OV^{h1} W_OV^{h2} W_U (plus positional and bias sources). Expand
# the logit of the correct next token at the second-to-last position (an induction prediction):

# %%
pe = interp.path_expansion(toy, seqs, order=2, answer=seqs[:, -1], pos=-2)
print(pe)
print(f"closure error {pe.closure_error:.1e}: |model logits − Σ paths| over every position and token")
by_order = pe.to_dataframe().groupby("order")["value"].sum() / len(seqs)
print("mean contribution to the answer's logit by path order:", by_order.round(3).to_dict())
print(f"answer logit (mean) {pe.logit.mean().item():.3f} = Σ paths {pe.values.sum(0).mean().item():.3f} + b_U")
pe.plot(k=12)

# %% [markdown]
# The prediction is written by the one-head paths `embed→L1.H*`: the layer-1 heads' OV circuits copying
# the token they attend to. The previous-token head never appears on a *logit* path of its own — its
# role is in the K side of layer 1's attention (K-composition), which path expansion freezes into the
# patterns. The virtual-head (order-2, V-composition) paths are small, as the V-composition scores said.
#
# ## 5. The same tools on smollm2-135m
#
# Real models mix many functions per head; the weight tools still point somewhere. First, copying:

# %%
model = interp.load_model("smollm2-135m")
copying = interp.copying_scores(model)
print(copying.top(6)[["head", "copying_score"]].to_string(index=False))
plots.copying_score_map(copying, title="Copying scores — smollm2-135m")

# %%
top = copying.top(1).iloc[0]
l, h = int(top.layer), int(top.head_index)
full_ov = interp.ov_circuit(model, l, h, full=True)  # [49152, 49152], kept factored (rank 64)
print(full_ov)
names = [" Mary", " John", " Paris", " France", " dog", " cat", " red", " seven"]
ids = [model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in names]
plots.top_token_table(full_ov, ids, targets="all", k=4, decode=lambda i: model.tokenizer.decode([i]))

# %%
plots.ov_eigenvalue_figure(interp.ov_circuit(model, l, h), label=f"{top['head']} OV circuit")

# %% [markdown]
# smollm2 uses rotary position embeddings: its QK circuit depends on the distance between query and key.
# `qk_circuit` says so, and `rel_pos=Δ` folds in the rotation for a query Δ positions after its key.

# %%
qk0 = interp.qk_circuit(model, 5, 0)
print(qk0, "\nnote:", qk0.note)
print(interp.qk_circuit(model, 5, 0, rel_pos=1))

# %% [markdown]
# **K-composition over all 270 heads, from the weights.** Computed with d_head-sized Gram factors, all
# pairs in one product (no d_model² product per pair):

# %%
k_comp = interp.composition_scores(model, "K")
print(k_comp)
k_top = k_comp.top(10)[["src", "dst", "score"]]
print(k_top.to_string(index=False))
circuits.composition_graph(k_comp, max_edges=15, title="Strongest K-composition edges — smollm2-135m")

# %% [markdown]
# One source head feeds the keys of a cluster of heads in the next layers — the shape of an induction
# circuit. A virtual weight makes one of those edges concrete, and a behavioural check on repeated
# random tokens measures each head's previous-token and induction scores:

# %%
src = k_top.src.value_counts().idxmax()  # the head feeding the most of the strongest edges
dst = k_top[k_top.src == src].iloc[0].dst
print(f"{src} is the source of {int((k_top.src == src).sum())} of the 10 strongest K-composition edges")
sl = int(src[1:].split(".H")[0])
dl, dh = map(int, dst[1:].split(".H"))
read = f"L{dl}.attn.k[H{model.arch.kv_head(dh)}]"  # under GQA a key is a KV head's
vwt = interp.virtual_weights(model, src, read)
others = [interp.virtual_weights(model, f"L{sl}.H{i}", read).norm().item() for i in range(model.arch.n_heads)]
print(vwt, f"‖·‖_F = {vwt.norm().item():.1f}; median over layer {sl}'s heads {torch.tensor(others).median().item():.1f}")

gen = torch.Generator().manual_seed(0)
m = 20
first = torch.randint(1000, 20000, (4, m), generator=gen)
ids = torch.cat([torch.full((4, 1), model.tokenizer.bos_token_id), first, first], dim=1)
logits, pats = all_patterns(model, ids)
q = torch.arange(m + 1, 2 * m + 1)
induction = pats[:, :, :, q, q - m + 1].mean(dim=(1, 3))  # [n_layers, n_heads]
qp = torch.arange(2, m + 1)
previous = pats[:, :, :, qp, qp - 1].mean(dim=(1, 3))
score = lambda t, lab: t[tuple(map(int, lab[1:].split(".H")))].item()  # noqa: E731
k_top["src previous-token score"] = [round(score(previous, s), 2) for s in k_top.src]
k_top["dst induction score"] = [round(score(induction, d), 2) for d in k_top.dst]
nll = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
print(f"loss on the repeated half {nll[:, m + 1:].mean().item():.2f} vs the first half {nll[:, 1:m].mean().item():.2f}")
best_ind = induction.flatten().topk(5)
print("top induction heads:", [f"L{i // 9}.H{i % 9} {v:.2f}" for v, i in zip(best_ind.values.tolist(), best_ind.indices.tolist())])
k_top

# %%
stream.attention_patterns(model, ids[:1], [src, dst]).plot()

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")

# %% [markdown]
# ## What we saw
#
# * A head with its pattern frozen is exactly A ⊗ W_O W_V: `head_operator`'s `.apply` and its explicit
#   Kronecker matrix reproduce the model's own head writes to float rounding.
# * On the toy, the weights alone name the induction circuit: one layer-0 head whose positional QK
#   looks one position back, layer-1 heads K-composing with it (the largest scores and virtual weights),
#   whose composed QK circuit matches "previous token = my token" on the diagonal for every word, and
#   whose OV circuits copy (copying score ≈ 1). Behaviour agrees: previous-token and induction attention,
#   and near-zero loss on the repeated half. Path expansion closes to float rounding and puts the
#   prediction on the one-head paths of the layer-1 heads.
# * On smollm2 the same weight-only K-composition scores single out one source head (L16.H0) feeding the
#   keys of a cluster of heads in the next two layers; behaviourally that source is the strongest
#   previous-token head, and its K-composition partners include the strongest induction heads on
#   repeated random tokens (L18.H6, L17.H3/H4/H5) — not all of them (L18.H8 composes but does not
#   induct). Copying scores alone do not find them (dozens of heads copy), and the QK circuits of a
#   rotary model need `rel_pos` to say anything about position.
