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
# # 09 · Feature circuits: transcoders and an exact attribution graph
#
# **What this shows.** Heads and MLP blocks are the basis a model was built in; features — directions a
# sparse dictionary finds — are often easier to read. A *transcoder* replaces an MLP by a sparse map from the
# MLP's input to its output. Over transcoders on every layer, the *attribution graph* of a prompt has one node
# per active feature, per token embedding, per output logit, and one **error node** per layer and position (the
# MLP's real output minus the transcoder's), so the graph is exact: every node's input is the sum of its
# incoming edges plus its bias. On smollm2-135m, offline, we
#
# 1. ask the model what follows "The capital of France is";
# 2. train TopK transcoders for all 30 layers on English text shipped on PyPI (the King James Bible) — or load
#    them from interp's cache — and read their held-out FVU and L0;
# 3. build the attribution graph for " Paris", print its closure, prune it and read the top paths;
# 4. check one path by intervention, split a key head's attention score into features (QK attribution), and
#    export the graph in circuit-tracer's JSON format.
#
# About 1 minute with the transcoders in the cache; a fresh machine trains them first (about 3 minutes on 2
# CPU cores; a few thousand tokens, so their FVU is high and the error nodes carry much of the MLPs' writes —
# the graph is exact either way).

# %%
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below runs offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import logging
import tempfile
import time
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import torch

import interp
from interp.features import Intervention, attribution_graph, intervene, qk_attribution, train_transcoders

logging.getLogger("transformers").setLevel(logging.ERROR)
pio.renderers.default = "plotly_mimetype+png"  # interactive in Jupyter; a PNG copy where JavaScript does not run
T0 = time.perf_counter()
model = interp.load_model("smollm2-135m")
PROMPT = "The capital of France is"
print(model)
print(interp.predict(model, PROMPT, k=5).to_dataframe())

# %% [markdown]
# The model's first choice is " Paris". That is the output the graph explains.
#
# ## Transcoders
#
# `train_transcoders` streams text from the bundled corpus through the model batch by batch, reading each
# layer's MLP input (after its norm) and output from interp's engine, and fits a TopK transcoder per layer
# (Adam, unit-norm decoder rows, AuxK for dead features). The dictionaries are cached under
# `~/.cache/interp/transcoders/smollm2-135m/<hash of the configuration>/`, with atomic, resumable checkpoints:
# this cell trains only when the cache has no entry for this configuration
# (benchmarks/bench_train_transcoders.py fills the same entry and prints the throughput).

# %%
t = time.perf_counter()
tc = train_transcoders(model, layers="all", width=1024, k=8, tokens=8192, lr=1e-2, passes=4, eval_tokens=2048)
print(tc, f"({'loaded from the cache' if tc.from_cache else 'trained'} in {time.perf_counter() - t:.0f} s)")
print(f"trained at {tc.tokens_per_second} tokens/s" if tc.tokens_per_second else "")
df = tc.to_dataframe()
print(df.iloc[::3].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
fig = go.Figure([go.Bar(x=df["layer"], y=df["fvu"], name="held-out FVU"),
                 go.Scatter(x=df["layer"], y=df["l0"] / tc.config["k"], name="L0 / k", mode="lines+markers"),
                 go.Scatter(x=df["layer"], y=df["dead"], name="dead fraction", mode="lines+markers")])
fig.update_layout(title="Transcoders per layer (smollm2-135m)", xaxis_title="layer", height=320, width=760)
fig.show()

# %% [markdown]
# FVU is the fraction of the MLP output's variance (around its mean, on held-out chapters) the transcoder does
# not reconstruct: 1 is as good as predicting the mean. L0 is the mean number of active features per token (at
# most k). With a few thousand training tokens these dictionaries are rough; in the graph the error nodes hold
# what they miss, exactly.
#
# ## The attribution graph

# %%
t = time.perf_counter()
g = attribution_graph(model, PROMPT, tc.transcoders, target=" Paris")
kinds = {k: g.node_kind.count(k) for k in sorted(set(g.node_kind))}
print(f"{g.n_nodes} nodes {kinds}, built in {time.perf_counter() - t:.0f} s")
print(f"closure: max |value − (Σ edges + bias)| = {g.closure_error:.2e}, relative {g.relative_error:.2e}")
print(f"replacement score {g.replacement_score():.3f}, completeness score {g.completeness_score():.3f}")
assert g.relative_error < 1e-4

# %% [markdown]
# Each feature's pre-activation and the " Paris" logit equal the sum of their incoming edges plus their bias,
# to float rounding. Now prune to the nodes and edges that carry 80% / 98% of the influence on the logit, and
# read the most influential nodes.

# %%
p = g.prune(node_threshold=0.8, edge_threshold=0.98)
print(f"pruned: {p.n_nodes} nodes (of {g.n_nodes}), {int((p.adjacency != 0).sum())} edges (of {int((g.adjacency != 0).sum())})")
tokens = g.token_strs or [str(i) for i in g.tokens]
top = p.to_dataframe().query("kind != 'logit'").sort_values("influence", ascending=False).head(12)
top["token"] = [repr(tokens[i]) for i in top["pos"]]
print(top[["node", "kind", "token", "activation", "direct", "influence"]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# **Top paths.** From the logit backwards, follow the strongest edges between features and tokens (edge value =
# its direct effect, in logit units for the last step, in pre-activation units before it), leaving out position 0
# (the BOS token, which every position reads through the attention sink; the transcoders were not trained on
# it). Error nodes are sources with no incoming edges, so a path through features is the readable part; the
# first line says how the logit's direct inputs split between the kinds of node — with dictionaries this rough,
# the error nodes carry most of it.

# %%
A, lab = p.adjacency, p.node_labels
out = lab.index("logit")
share = {k: float(sum(A[out, i] for i, kk in enumerate(p.node_kind) if kk == k)) for k in ("token", "feature", "error")}
print("direct inputs of the logit, summed by kind:", {k: round(v, 2) for k, v in share.items()},
      f"+ bias {float(p.bias[out]):.2f} = {float(p.value[out]):.2f}")
# features and tokens after position 0 (BOS: every position reads it through the attention sink, and the
# transcoders were not trained on it)
readable = torch.tensor([k != "error" and pos > 0 for k, pos in zip(p.node_kind, p.node_pos)])


def paths(node: int, depth: int, width: int = 2) -> list[list[tuple[int, float]]]:
    """The strongest backward paths from ``node``: each step the ``width`` largest |incoming edges|."""
    if depth == 0 or not (A[node] * readable).any():
        return [[]]
    res = []
    row = A[node] * readable
    for s in row.abs().topk(min(width, int((row != 0).sum()))).indices.tolist():
        for rest in paths(s, depth - 1, width):
            res.append([(s, float(A[node, s]))] + rest)
    return res


for path in paths(out, 3, 3)[:9]:
    print(" ← ".join(["logit(' Paris')"] + [f"{lab[s]} [{repr(tokens[p.node_pos[s]])}] ({v:+.2f})" for s, v in path]))

# %% [markdown]
# ## One path checked by intervention
#
# Take the most influential feature below the last layer (after position 0) and ablate it in the replacement
# model (`intervene`), first with every other feature frozen at its real activation: then the change of the
# logit must be minus its direct edge into the logit. Then let the downstream features respond (attention
# still frozen): the difference is what flows through later features.

# %%
feats = p.to_dataframe().query(f"kind == 'feature' and pos > 0 and layer < {model.arch.n_layers - 1}")
f_best = feats.loc[feats["influence"].abs().idxmax()]
edge = float(g.adjacency[g.node_labels.index("logit"), g.node_labels.index(f_best["node"])])
r_frozen = intervene(model, PROMPT, tc.transcoders, [Intervention.ablate(f_best["node"])], target=" Paris", freeze_features=True)
r_live = intervene(model, PROMPT, tc.transcoders, [Intervention.ablate(f_best["node"])], target=" Paris")
print(f"ablate {f_best['node']} (activation {f_best['activation']:.3f}; edge into the logit {edge:+.4f})")
print(f"  other features frozen:   Δ logit = {r_frozen.metric_change:+.4f}  (graph predicts {-edge:+.4f})")
print(f"  downstream features live: Δ logit = {r_live.metric_change:+.4f}")
assert abs(r_frozen.metric_change + edge) <= 1e-3 * max(1.0, abs(edge))

# %% [markdown]
# ## QK attribution for a key head
#
# Which head moves the most to " Paris"? Exact logit attribution by head, then split that head's attention
# score from the last position to " France" into query-side × key-side terms of the graph's nodes: the sum of
# the terms is the score (closure printed).

# %%
la = interp.attribute_logits(model, PROMPT, answer=" Paris", unit="head").to_dataframe()
heads = la[la["term"].str.contains(r"\.H")]
head = heads.loc[heads["mean"].idxmax(), "term"]
print(heads.sort_values("mean", ascending=False).head(3).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
layer, h = (int(x) for x in head[1:].split(".H"))
key_pos = next(i for i, s in enumerate(tokens) if "France" in s)
qk = qk_attribution(model, PROMPT, tc.transcoders, layer, h, query_pos=-1, key_pos=key_pos)
print(f"{head}: score {qk.score:.3f} at (query {len(tokens) - 1}, key {key_pos} {tokens[key_pos]!r}); closure "
      f"{qk.closure_error:.1e} (relative {qk.relative_error:.1e})")
print(qk.top(6).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
pairs = qk.to_dataframe()
with_features = pairs[pairs["query_node"].str.contains(r"\.F") | pairs["key_node"].str.contains(r"\.F")]
print("strongest pairs with a feature on either side:")
print(with_features.reindex(with_features["value"].abs().sort_values(ascending=False).index).head(6)
      .to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# ## Export
#
# `export` writes the pruned graph as circuit-tracer's graph JSON (the format its frontend and Neuronpedia read).

# %%
out_dir = Path(tempfile.mkdtemp())
g.export(out_dir / "paris.json", slug="smollm2-paris")
print(f"{(out_dir / 'paris.json').stat().st_size / 1e3:.0f} kB written; whole notebook {time.perf_counter() - T0:.0f} s")
