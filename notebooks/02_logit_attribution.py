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
# # 02 · Logit attribution by head on smollm2-135m
#
# **What this shows.** Direct logit attribution (DLA) made exact: with the final norm's scale frozen
# from the forward pass, the logit difference logit(answer) − logit(wrong) is *exactly* the sum of one
# term per head, MLP and embedding (docs/math.md §5). On an indirect-object (IOI) prompt set we
#
# 1. attribute the logit difference by head and print the closure error against the model's own logits;
# 2. plot the layer × head heatmap and a waterfall of the largest terms;
# 3. look at the attention patterns of the top heads, split each head's term by source position and read
#    what it copies from there (`unit="head_source"`, `interp.ov_at`);
# 4. run a small dataset sweep in batches (with a progress bar);
# 5. compare against transformer-lens's own `direct_logit_attribution` on one prompt.
#
# Offline, 1–3 minutes on 2 CPU cores.

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
import re

model = interp.load_model("smollm2-135m")
templates = [
    "When {S} and {IO} went to the shops, {S} gave the bag to",
    "After {S} and {IO} finished their lunch, {S} handed the book to",
    "Then {S} and {IO} had a long talk, and afterwards {S} wrote a letter to",
]
pairs = [(" John", " Mary"), (" Tom", " Anna"), (" James", " Sarah")]  # (subject, indirect object)
prompts, answers, wrongs = [], [], []
for t in templates:
    for s, io in pairs:
        prompts.append(t.format(S=s.strip(), IO=io.strip()))
        answers.append(io)
        wrongs.append(s)
prompts[:3]

# %% [markdown]
# Each prompt gets its own answer and wrong token; prompts of different lengths are padded and each is
# attributed at its own last real token.

# %%
attr = interp.attribute_logits(model, prompts, answer=answers, wrong=wrongs)
print(attr)
print(f"closure error {attr.closure_error:.2e} (relative {attr.relative_error:.2e})")
print("logit differences:", [round(v, 2) for v in attr.total.tolist()])
attr.top(10)

# %% [markdown]
# An independent check of the totals: the plain Hugging Face module (no hooks, no interp code) on the
# same token ids gives the same logit differences.

# %%
hf = model.bridge.original_model
diffs = []
for p, io, s in zip(prompts, answers, wrongs):
    ids = model.to_tokens(p)
    with torch.no_grad():
        logits = hf(ids).logits[0, -1]
    a_id, w_id = (model.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in (io, s))
    diffs.append((logits[a_id] - logits[w_id]).item())
print("max |interp total − HF logit diff| =", f"{(attr.total - torch.tensor(diffs)).abs().max().item():.2e}")

# %% [markdown]
# ## Which heads push the indirect object over the subject
#
# Mean over the 9 prompts (hover for values; the non-head terms — MLPs, embedding — are the strip on the
# right), and the waterfall of prompt 0: the terms stacked from 0 to the model's logit difference.

# %%
attr.plot()

# %%
from interp.plots import attribution_waterfall

attribution_waterfall(attr, prompt=0, k=15)

# %% [markdown]
# ## Attention patterns of the top heads
#
# Where do the heads with the largest mean |attribution| look from the final token? A head that attends
# to a name and copies it raises that name's logit; one that attends to it and writes against it (a
# "negative name mover" in the IOI circuit of Wang et al. 2022) lowers it. The printout gives each head's
# most-attended key after position 0, where most heads park unused attention (the attention sink).

# %%
from interp.stream import attention_patterns

top_heads = [t for t in attr.top(40)["term"] if re.fullmatch(r"L\d+\.H\d+", t)][:6]
pats = attention_patterns(model, prompts[0], top_heads)
for i, head in enumerate(pats.labels):
    row = pats.patterns[i, -1]  # attention from the final token
    k = int(row[1:].argmax()) + 1  # skip position 0, the attention sink
    print(f"{head}: attribution {attr.mean()[attr.labels.index(head)].item():+.2f}, "
          f"attends most (after BOS) to {pats.str_tokens[k]!r} with weight {row[k].item():.2f}")
pats.plot()

# %% [markdown]
# ## By source position: what each head reads, and what it copies from there
#
# A head's term is exactly a sum over the positions it attends to: its output at the final token is
# Σ_src A[dst, src] · v_src W_O, so with the final norm frozen its term splits into one term per source
# token, `L23.H3[src=4]` (docs/math.md §5; the value bias goes with the sources, weighted by A, and the
# split still sums to the head's term exactly). `unit="head_source"` gives all of them; the heatmap shows
# the heads with the largest terms against the prompt's tokens.

# %%
src = interp.attribute_logits(model, prompts[0], answer=answers[0], wrong=wrongs[0], unit="head_source")
by_head = interp.attribute_logits(model, prompts[0], answer=answers[0], wrong=wrongs[0])
print(src)
print("max |Σ_src term − head term| =", f"{(src.head_matrix() - by_head.head_matrix()).abs().max().item():.1e}")
src.plot(prompt=0)

# %% [markdown]
# For each of the top heads: the source that contributes most, its attention weight, and what the head
# copies from it — `interp.ov_at` carries v_src W_O through the final norm with the scale frozen at the final
# token (the real pass's σ) and reads it as logits. Times the attention weight, the answer − wrong entry of
# those logits is exactly the head's term from that source.

# %%
mary, john = (model.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in (answers[0], wrongs[0]))
toks0 = src.prompt_str_tokens[0]
grid = src.source_matrix(prompt=0)  # [n_layers, n_heads, n_src]
for head in top_heads[:4]:
    l, h = (int(x) for x in head[1:].split(".H"))
    s = int(grid[l, h].abs().argmax())
    ov = interp.ov_at(model, prompts[0], l, h, src=s)
    term = ov.weight * (ov.logits[mary] - ov.logits[john]).item()
    top = [ov.token_strs[str(t)] for t in ov.logits.topk(5).indices.tolist()]
    print(f"{head}: from {toks0[s]!r} (pos {s}, A = {ov.weight:.2f}) term {grid[l, h, s].item():+.2f} "
          f"(= A × logit diff of the copy {term:+.2f}); copies {top}")
ov.plot()

# %% [markdown]
# ## A small dataset sweep
#
# `attribute_logits` streams any number of prompts in batches (`batch_size`) with a progress bar and
# keeps only `[n_terms, n_prompts]` numbers. Here: 24 prompts from the three templates with other
# names. The per-head means over the sweep line up with the 9-prompt set above.

# %%
import itertools
import random

names = [" John", " Mary", " Tom", " Anna", " James", " Sarah", " Paul", " Emma"]
combos = random.Random(0).sample(list(itertools.product(templates, itertools.permutations(names, 2))), 24)
sweep_prompts = [t.format(S=s.strip(), IO=io.strip()) for t, (s, io) in combos]
sweep = interp.attribute_logits(model, sweep_prompts, answer=[io for _, (s, io) in combos],
                                wrong=[s for _, (s, io) in combos], batch_size=8, progress=True)
print(sweep)
print(f"closure error {sweep.closure_error:.2e} (relative {sweep.relative_error:.2e})")
print(f"the model prefers the indirect object in {(sweep.total > 0).float().mean().item():.0%} of prompts; "
      f"mean logit difference {sweep.total.mean().item():.2f}")
heads = [i for i, lab in enumerate(sweep.labels) if re.fullmatch(r"L\d+\.H\d+", lab)]
corr = torch.corrcoef(torch.stack([attr.mean()[heads], sweep.mean()[heads]]))[0, 1]
print(f"correlation of per-head means, 9-prompt set vs sweep: {corr.item():.2f}")
sweep.top(8)

# %% [markdown]
# ## Against transformer-lens's DLA
#
# transformer-lens computes DLA on a bridge in *compatibility mode* (norms folded into the weights, the
# final norm's scale taken from the cache). We load a second copy of the model, switch it to
# compatibility mode and call `transformer_lens.tools.analysis.direct_logit_attribution` on one prompt.
# The per-head values should agree with interp's up to float rounding (smollm2 has no biases, so the
# value-bias convention does not matter here).

# %%
from transformer_lens.tools.analysis.direct_logit_attribution import direct_logit_attribution

prompt = prompts[0]
ours = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
tl_model = interp.load_model("smollm2-135m")
tl_model.bridge.enable_compatibility_mode(disable_warnings=True)
r = direct_logit_attribution(tl_model.bridge, prompt, answer_tokens=" Mary", incorrect_tokens=" John", unit="head")
tl = {re.sub(r"L(\d+)H(\d+)", r"L\1.H\2", lab): v for lab, v in zip(r.labels, r.attribution.flatten().tolist())}
head_labels = [lab for lab in tl if re.fullmatch(r"L\d+\.H\d+", lab)]
gap = max(abs(tl[h] - ours[h].item()) for h in head_labels)
print(f"{len(head_labels)} heads compared; max |interp − transformer-lens| = {gap:.1e}")
print(f"interp closure error {ours.closure_error:.1e}; largest head term {ours.values.abs().max().item():.2f}")
assert gap < 1e-3
del tl_model

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")

# %% [markdown]
# ## What we saw
#
# * The logit difference splits exactly into 301 terms (270 heads, 30 MLPs, the embedding); the closure
#   error against the model's own logits is ~1e-6, and the totals match the plain HF module.
# * A handful of late heads (layers 23–29) and MLPs carry most of the IOI logit difference. Their attention
#   from the final token tells them apart: L23.H1 and L23.H2 attend to " Mary" and push it up, L24.H4
#   attends to " Mary" and pushes it down, and the largest head, L23.H3, attends mostly to " John" yet
#   raises the difference — attention alone does not say what a head writes; its OV circuit does
#   (notebook 03).
# * By source position, each top head's term comes mostly from one token of the prompt, and `ov_at` shows
#   what the head copies from it; the per-source terms sum back to the head's term to float rounding.
# * The batched sweep gives per-head means that agree with the small set, with a progress bar and only
#   `[n_terms, n_prompts]` kept in memory.
# * transformer-lens's compatibility-mode DLA gives the same per-head numbers to float rounding.
