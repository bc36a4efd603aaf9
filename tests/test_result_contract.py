"""The one result contract, checked on every result class interp exports.

Classes are discovered, not listed: every class reachable from ``interp.__all__`` and from the
``__all__`` of each public subpackage (``interp.causal``, ``interp.edges``... as they appear). A class
that subclasses :class:`interp._result.Result` must have a factory below (one instance built on a tiny
model); a dataclass-like class (a dataclass, or one with ``to_dataframe``/``top``/``plot``) that does
not subclass Result must be listed in ``NOT_RESULTS`` with the reason. So a new result class cannot
skip the contract, and a new non-result is a decision someone wrote down.

For each result: ``r[label]`` on its first label equals that label's row(s) of ``to_dataframe()``
(checked against the tensors by hand, per class), the DataFrame has the label column, ``top(3)`` has
≤ 3 rows ordered by the class's default column (|·| when ``default_absolute``), ``top(by=...,
absolute=False)`` ranks signed, ``top(absolute=...)`` has one meaning (|·| or signed, ``signed_by`` where the
default column is a magnitude), ``plot()`` is a plotly Figure, and ``save``/``load`` round-trips every
field (tensors bit-for-bit, labels equal).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import re
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

import interp
from interp._result import Result
from interp.errors import ArgumentError, LabelError
from tiny_models import tiny_model

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10"]

#: exported dataclass-like classes that are not results, and why
NOT_RESULTS = {
    "ArchInfo": "a model's architecture description",
    "Example": "a catalog model's default prompt, answer and task (catalog data, not a result)",
    "Block": "a block's wiring, the ordered steps every forward interprets (a description, not a result)",
    "Step": "one step of a block description",
    "CrossLayerTranscoder": (
        "a cross-layer feature dictionary's weights (the input of an attribution graph), not a result"
    ),
    "DictionarySet": "a set of transcoders' weights, per-layer or cross-layer (an analysis's input), not a result",
    "TrainConfig": "the options of a training run (its input), not a result",
    "TrainedCrossLayerTranscoder": (
        "a trained cross-layer dictionary and its per-layer held-out metrics (cached on disk), "
        "not a table of labelled rows"
    ),
    "Batch": "tokenised inputs",
    "CatalogEntry": "a catalog row (model name, source, licence)",
    "Model": "the model itself (results never hold it)",
    "Weights": "a model's weights in transformer-lens layout",
    "ToyConfig": "a toy model's configuration",
    "ResidualTrace": "a capture of one forward pass; its .decompose() returns Decomposition results",
    "Circuit": "a factored matrix (transformer-lens FactoredMatrix), not a table of labelled rows",
    "Exporter": "a figure exporter (a reusable headless browser)",
    "FeatureGraphView": "an HTML widget (a view of an AttributionGraph, like a figure), not a table of labelled rows",
    "AttentionView": "an HTML widget (a view of AttentionPatterns, like a figure), not a table of labelled rows",
    "Page": "a self-contained HTML page being assembled (sections, figures, tables), not a table of labelled rows",
    "CircuitGraphOptions": "how circuit_graph_figure draws (drawing options), not a result",
    "Metric": "a metric specification (what a causal analysis measures)",
    "CustomMetric": "a metric specification",
    "Direction": "a metric specification",
    "KL": "a metric specification",
    "Logit": "a metric specification",
    "LogitDiff": "a metric specification",
    "LogProb": "a metric specification",
    "Prob": "a metric specification",
    "ProgramSpec": "the specification of a compiled ground-truth program",
    "TracrProgram": "a compiled ground-truth program (a model and its residual labels)",
    "TrueCircuit": "a circuit known by construction (a reference to score results against), not a computed result",
    "CircuitGraph": "a model's graph structure (writers, readers, edges), not a computed table",
    "Task": "a prompt set with its metric (the input of an analysis)",
    "OutputMargin": "a metric specification",
    "PromptGroup": "equal-length prompts with their resample partners (the input of an analysis)",
    "DiscoveryTask": "a model with a known circuit and its prompts (the input of a discovery benchmark)",
    "Transcoder": "a feature dictionary's weights (the input of an attribution graph), not a result",
    "SAE": "a residual-stream dictionary's weights (the input of sae_reconstruction), not a result",
    "SAEReconstruction": "per-SAE tensors of one batch (stream, features, reconstruction) and one FVU / L0 per SAE, "
    "not a table of labelled rows",
    "TrainedTranscoders": "trained dictionaries and their per-layer held-out metrics (cached on disk by "
    "train_transcoders), not a table of labelled rows",
    "Intervention": "an intervention specification (what to set or scale in the replacement model)",
    "Steer": "a steering vector specification (what generate adds to the residual stream)",
}


def _public_modules() -> list[Any]:
    mods = [interp]
    for info in pkgutil.iter_modules(interp.__path__):
        if info.ispkg and not info.name.startswith("_"):
            mods.append(importlib.import_module(f"interp.{info.name}"))
    return mods


def _exported_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for mod in _public_modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isclass(obj):
                out[obj.__name__] = obj
    return out


def _looks_like_result(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) or any(hasattr(cls, m) for m in ("to_dataframe", "top", "plot"))


# --- one instance of each result class, on the tiny models ------------------------------------------------


@pytest.fixture(scope="module")
def models():
    from interp.models import load_model_unchecked as load_model

    return {f: tiny_model(f) for f in ("gpt2", "llama", "neox", "bert")} | {"toy": load_model("toy-attn-only-2l")}


EDGE_CLEAN, EDGE_CORRUPT = ["w1 w2 w3 w4", "w5 w6 w7 w8"], ["w1 w9 w3 w4", "w5 w9 w7 w8"]
_EDGE_CACHE: dict = {}


def _edge_scores(m):
    if "s" not in _EDGE_CACHE:
        _EDGE_CACHE["s"] = interp.edge_attribution(
            m["gpt2"], EDGE_CLEAN, EDGE_CORRUPT, metric=_causal_metric(), progress=False
        )
    return _EDGE_CACHE["s"]


def _edge_ranking(m):
    from interp.groundtruth import edge_ranking, induction_task

    return edge_ranking(induction_task(m["toy"], n_seqs=3, n=6), "eap", "resample")


def _attribution_graph(m):
    from interp.features import attribution_graph
    from tiny_transcoders import random_transcoders

    return attribution_graph(m["llama"], "w1 w2 w3 w4", random_transcoders(m["llama"], 8, seed=0))


def _intervention(m):
    from interp.features import intervene
    from tiny_transcoders import random_transcoders

    return intervene(m["llama"], "w1 w2 w3 w4", random_transcoders(m["llama"], 8, seed=0), [(0, 1, 2, 3.0)], top_k=3)


def _generation(m):
    from interp.features import generate
    from tiny_transcoders import random_transcoders

    return generate(
        m["llama"],
        ["w1 w2 w3 w4", "w5 w6"],
        random_transcoders(m["llama"], 8, seed=0),
        [(0, None, 2, 3.0)],
        max_new_tokens=3,
        top_k=3,
    )


def _aggregate(m):
    from interp.features import aggregate_graphs
    from tiny_transcoders import random_transcoders

    return aggregate_graphs(
        m["llama"], ["w1 w2 w3 w4", "w5 w6 w7"], random_transcoders(m["llama"], 8, seed=0), target="w3", progress=False
    )


def _graph_faithfulness(m):
    from tiny_transcoders import random_transcoders

    return _attribution_graph(m).faithfulness(
        m["llama"], random_transcoders(m["llama"], 8, seed=0), thresholds=(0.5, 0.8, 1.0)
    )


def _qk(m):
    from interp.features import qk_attribution
    from tiny_transcoders import random_transcoders

    return qk_attribution(
        m["llama"], "w1 w2 w3 w4", random_transcoders(m["llama"], 8, seed=0), 1, 2, query_pos=3, key_pos=1
    )


def _dictionary_evaluation(m):
    from interp.features import evaluate_dictionary
    from tiny_transcoders import random_transcoders

    ids = torch.randint(4, 90, (3, 8), generator=torch.Generator().manual_seed(0))
    return evaluate_dictionary(m["llama"], random_transcoders(m["llama"], 8, seed=0), tokens=ids)


def _causal_metric():
    from interp.causal import LogitDiff

    return LogitDiff("w12", "w13")


FACTORIES: dict[str, Callable[[dict], Any]] = {
    "Decomposition": lambda m: interp.trace(m["gpt2"], PROMPTS).decompose("unembed"),
    "LogitAttribution": lambda m: interp.attribute_logits(m["llama"], PROMPTS, answer="w3", wrong="w4"),
    "AttentionPatterns": lambda m: interp.stream.attention_patterns(m["gpt2"], PROMPTS, ["L0.H1", "L1.H0"], prompt=1),
    "HeadScores": lambda m: interp.copying_scores(m["llama"]),
    "OVDiagonalStats": lambda m: interp.circuits.ov_diagonal_stats(m["gpt2"], 1, 2),
    "VirtualWeightNorms": lambda m: interp.circuits.virtual_weight_norms(m["llama"]),
    "CompositionScores": lambda m: interp.composition_scores(m["neox"], "K"),
    "CompositionGraph": lambda m: interp.circuits.composition_edges(
        {k: interp.composition_scores(m["llama"], k) for k in "QKV"}, max_edges=4
    ),
    "HeadOperator": lambda m: interp.head_operator(
        m["llama"], 1, 3, torch.softmax(torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0)), -1)
    ),
    "PathExpansion": lambda m: interp.path_expansion(m["toy"], torch.tensor([[0, 5, 6, 7], [3, 4, 5, 6]]), order=2),
    "PrivilegedBasisReport": lambda m: interp.circuits.privileged_basis_report(m["gpt2"], PROMPTS),
    "SubspaceOverlap": lambda m: interp.circuits.write_subspace_overlap(m["gpt2"]),
    "ErasureTable": lambda m: interp.circuits.erasure_candidates(m["gpt2"]),
    "PatchResult": lambda m: interp.causal.patch(
        m["llama"], "w1 w2 w3 w4", "w1 w9 w3 w4", metric=_causal_metric(), nodes="heads", progress=False
    ),
    "Effects": lambda m: interp.causal.effects(
        m["gpt2"], "w1 w2 w3 w4", "w1 w9 w3 w4", metric=_causal_metric(), progress=False
    ),
    "OVAt": lambda m: interp.ov_at(m["llama"], PROMPTS, 1, 2, src=2, prompt=1),
    "AttentionPatternBatch": lambda m: interp.stream.attention_patterns(
        m["llama"], ["w1 w2 w3", "w4 w5 w6 w7 w8"], ["L0.H1", "L1.H3"], prompt=None
    ),
    "LogitLens": lambda m: interp.logit_lens(m["llama"], ["w1 w2 w3 w4 w5", "w6 w7 w8"], answer="w3", top_k=3),
    "EdgeScores": lambda m: _edge_scores(m),
    "EdgeCircuit": lambda m: _edge_scores(m).circuit(n=12),
    "CircuitEvaluation": lambda m: interp.evaluate_circuit(
        m["gpt2"], EDGE_CLEAN, EDGE_CORRUPT, _edge_scores(m).circuit(n=12), metric=_causal_metric()
    ),
    "EdgeRanking": lambda m: _edge_ranking(m),
    "Predictions": lambda m: interp.predict(m["gpt2"], ["w1 w2 w3 w4 w5", "w6 w7 w8"], k=4),
    "AttributionGraph": lambda m: _attribution_graph(m),
    "InterventionResult": lambda m: _intervention(m),
    "AggregateGraph": lambda m: _aggregate(m),
    "GraphFaithfulness": lambda m: _graph_faithfulness(m),
    "GenerationResult": lambda m: _generation(m),
    "QKAttribution": lambda m: _qk(m),
    "DictionaryEvaluation": lambda m: _dictionary_evaluation(m),
    "FaithfulnessCurve": lambda m: interp.faithfulness_curve(
        m["gpt2"],
        EDGE_CLEAN,
        EDGE_CORRUPT,
        _edge_scores(m),
        metric=_causal_metric(),
        sizes=(0.05, 0.2, 1.0),
        progress=False,
    ),
}


# --- [label] against the label's row(s), per class, from the tensors -------------------------------------

_HEAD = re.compile(r"L(\d+)\.H(\d+)")


def _heads(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in _HEAD.findall(text)]


def _close(a: Any, b: Any) -> bool:
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


def _check_logit_attribution(r, label, v, rows):
    (row,) = rows.to_dict("records")
    assert torch.equal(v, r.values[r.labels.index(label)])
    assert _close(row["mean"], v.double().mean()) and _close(row["mean_abs"], v.double().abs().mean())
    assert all(_close(row[f"p{n}"], v[n]) for n in range(v.shape[0]))


def _check_decomposition(r, label, v, rows):
    (row,) = rows.to_dict("records")  # to_dataframe(): prompt 0, last position
    c, t = v[0, -1].double(), r.total[0, -1].double()
    assert v.shape == r.total.shape
    assert _close(row["norm"], c.norm()) and _close(row["projection"], c @ t / t.norm())


def _check_head_scores(r, label, v, rows):
    (row,) = rows.to_dict("records")
    ((l, h),) = _heads(label)
    assert _close(v, r.scores[l, h]) and _close(row[r.metric], v)


def _check_ov_diagonal(r, label, v, rows):
    (row,) = rows.to_dict("records")
    t = int(label)
    assert v == (int(r.ranks[t]), pytest.approx(float(r.diagonal[t]))) and row["rank"] == v[0]
    assert _close(row["diagonal"], v[1])


def _check_virtual(r, label, v, rows):
    (row,) = rows.to_dict("records")
    src, dst = label.split("→")
    assert (row["src"], row["dst"]) == (src, dst)
    assert _close(v, r.values[r.writes.index(src), r.reads.index(dst)]) and _close(row["norm"], v)
    assert _close(r[(src, dst)], v)


def _check_composition(r, label, v, rows):
    (row,) = rows.to_dict("records")
    (l1, h1), (l2, h2) = _heads(label)
    assert _close(v, r.scores[l1, h1, l2, h2]) and _close(row["score"], v)


def _check_graph(r, label, v, rows):
    (row,) = rows.to_dict("records")
    kind, pair = label.split(":")
    src, dst = pair.split("→")
    assert v == {"src": src, "dst": dst, "kind": kind, "score": pytest.approx(row["score"])}
    assert (row["src"], row["dst"], row["kind"]) == (src, dst, kind)


def _check_head_operator(r, label, v, rows):
    (row,) = rows.to_dict("records")
    b, q, k = row["prompt"], row["query_pos"], row["key_pos"]
    W = (r.W_V.double() @ r.W_O.double()).T  # the column-convention OV map
    assert _close(row["weight"], r.pattern[b, q, k])
    torch.testing.assert_close(v.double(), float(r.pattern[b, q, k]) * W, rtol=1e-5, atol=1e-7)
    d = r.d_model
    torch.testing.assert_close(v, r.matrix()[b][q * d : (q + 1) * d, k * d : (k + 1) * d])  # the Kronecker block
    assert _close(row["block_norm"], float(r.pattern[b, q, k]) * torch.linalg.matrix_norm(W))


def _check_path_expansion(r, label, v, rows):
    assert list(rows["prompt"]) == list(range(r.values.shape[1]))
    assert torch.equal(v, r.values[r.labels.index(label)])
    assert all(_close(x, y) for x, y in zip(rows["value"], v))


def _check_privileged(r, label, v, rows):
    (row,) = rows.to_dict("records")
    l = int(re.search(r"blocks\.(\d+)\.", label).group(1))
    assert torch.equal(v["resid"], r.resid[l]) and torch.equal(v["resid_rotated"], r.resid_rotated[l])
    assert _close(row["resid_median"], r.resid[l].double().median())
    assert _close(row["neurons_max"], r.neurons[l].double().max())


def _check_overlap(r, label, v, rows):
    (row,) = rows.to_dict("records")
    (l1, h1), (l2, h2) = _heads(label)
    assert _close(v, r.overlap[l1, h1, l2, h2]) and _close(row["overlap"], v)
    assert _close(r[f"L{l2}.H{h2}→L{l1}.H{h1}"], v)  # unordered


def _check_erasure(r, label, v, rows):
    (row,) = rows.to_dict("records")
    src, dst = label.split("→")
    assert (v["src"], v["dst"]) == (row["src"], row["dst"]) == (src, dst)
    assert all(_close(v[c], row[c]) for c in ("mean_gain", "max_eig", "min_eig"))
    assert v["negative_definite"] == bool(row["negative_definite"]) == (row["max_eig"] < 0)


def _check_attention(r, label, v, rows):
    assert torch.equal(v, r.patterns[r.labels.index(label)])
    got = rows.pivot(index="query_pos", columns="key_pos", values="weight").to_numpy()
    np.testing.assert_allclose(got, v.double().numpy(), rtol=1e-6)


def _check_patch(r, label, v, rows):
    (row,) = rows.to_dict("records")
    assert torch.equal(v, r.values[r.labels.index(label)])
    assert _close(row["value"], v) and _close(row["effect"], float(v) - r.baseline)


def _check_effects(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert torch.equal(v, torch.stack([r.total[i], r.direct[i], r.indirect[i]]))
    assert all(_close(row[c], x) for c, x in zip(("total", "direct", "indirect"), v))


def _check_attention_batch(r, label, v, rows):
    assert torch.equal(v, r.patterns[r.labels.index(label)])  # [prompt, query, key]
    for b in range(r.n_prompts):
        n = int(r.attention_mask[b].sum())
        got = rows[rows["prompt"] == b].pivot(index="query_pos", columns="key_pos", values="weight").to_numpy()
        np.testing.assert_allclose(got, v[b, :n, :n].double().numpy(), rtol=1e-6)


def _check_ov_at(r, label, v, rows):
    (row,) = rows.to_dict("records")
    t = int(label)
    assert _close(v, r.logits[t]) and _close(row["logit"], v) and _close(row["weighted"], v * r.weight)


def _check_lens(r, label, v, rows):
    i = r.labels.index(label)
    assert torch.equal(v["top_tokens"], r.top_tokens[i]) and torch.equal(v["target"], r.target_values[i])
    assert len(rows) == int(r.attention_mask.sum())  # one row per real kept position of every prompt
    for row in rows.to_dict("records"):
        b, s = row["prompt"], int((r.positions[row["prompt"]] == row["pos"]).nonzero()[0, 0])
        assert _close(row["target"], v["target"][b, s]) and _close(row["value"], v["target"][b, s])
        assert _close(row["top_prob"], v["top_probs"][b, s, 0]) and _close(row["top_logit"], v["top_logits"][b, s, 0])
        assert row["top_token"] == r.token_str(int(v["top_tokens"][b, s, 0]))


def _check_edge_rows(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    w, rd = label.split("→")
    assert _close(v, r.scores[i]) and _close(row["score"], v) and (row["writer"], row["reader"]) == (w, rd)


def _check_edge_ranking(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert _close(v, r.scores[i]) and _close(row["score"], v) and _close(row["signed"], r.signed[i])
    assert bool(row["true"]) == bool(r.truth[i]) and bool(row["testable"]) == bool(r.testable[i])


def _check_circuit_evaluation(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert _close(v, r.values[i]) and _close(row["value"], v) and _close(v, r.per_prompt[i].double().mean())
    assert _close(row["faithfulness"], (v - r.empty) / (r.full - r.empty))


def _check_faithfulness_curve(r, label, v, rows):
    (row,) = rows.to_dict("records")
    a, k = label.split("@")
    i, j = r.ablations.index(a), r.sizes.index(float(k))
    assert _close(v, r.faithfulness[i, j]) and _close(row["faithfulness"], v) and row["ablation"] == a
    assert _close(v, (r.values[i, j] - r.empty[i]) / (r.full[i] - r.empty[i]))


def _check_predictions(r, label, v, rows):
    i = r.labels.index(label)
    assert torch.equal(v, r.label_probs[i]) and v.shape == (r.n_prompts,)
    assert len(rows) >= 1
    for row in rows.to_dict("records"):  # the label's rows: the prompts whose top k hold it
        assert row["token_id"] == r.label_ids[i] and _close(row["prob"], v[row["prompt"]])
        assert _close(row["prob"], r.top_probs[row["prompt"], row["rank"] - 1])


def _check_attribution_graph(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert v == row and row["kind"] == r.node_kind[i] and _close(row["value"], r.value[i])
    outs = [j for j, k in enumerate(r.node_kind) if k == "logit"]
    direct = sum(float(r.output_weight[j]) * float(r.adjacency[j, i]) for j in outs)
    assert _close(row["direct"], direct) and _close(row["influence"], r.influence()[i])


def _check_intervention(r, label, v, rows):
    (row,) = rows.to_dict("records")
    t = int(label[len("logit[") : -1])
    assert v == row and row["id"] == t and _close(row["logit_before"], r.logits_before[t])
    assert _close(row["change"], r.logits_after[t] - r.logits_before[t])


def _check_generation(r, label, v, rows):
    (row,) = rows.to_dict("records")
    b, s = (int(x[1:]) for x in label.split("."))
    t, bt = int(r.tokens[b, s]), int(r.baseline_tokens[b, s])
    assert v == row and row["token_id"] == t and row["baseline_token_id"] == bt and row["same"] == (t == bt)
    assert _close(row["logit"], r.logits[b, s, t]) and _close(row["baseline_logit"], r.baseline_logits[b, s, bt])
    lp, blp = torch.log_softmax(r.logits[b, s].double(), -1), torch.log_softmax(r.baseline_logits[b, s].double(), -1)
    assert _close(row["kl"], (lp.exp() * (lp - blp)).sum())


def _check_aggregate(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert v == row and row["kind"] == r.node_kind[i] and int(row["n_active"]) == int(r.n_active[i])
    assert _close(row["influence"], r.influence_sum[i] / r.n_prompts)
    assert _close(row["influence_active"], r.influence_sum[i] / r.n_active[i])


def _check_graph_faithfulness(r, label, v, rows):
    (row,) = rows.to_dict("records")
    j = r.labels.index(label)
    assert v == row and row["threshold"] == r.thresholds[j] and _close(row["value"], r.values[j])
    assert _close(row["faithfulness"], (r.values[j] - r.empty) / (r.full - r.empty))


def _check_qk(r, label, v, rows):
    (row,) = rows.to_dict("records")
    q, k = label.split(" · ")
    i, j = r.q_labels.index(q), r.k_labels.index(k)
    assert v == row and row["query_node"] == q and _close(row["value"], r.q_terms[i] @ r.k_terms[j])


def _check_dictionary_evaluation(r, label, v, rows):
    (row,) = rows.to_dict("records")
    i = r.labels.index(label)
    assert v == row and row["layer"] == r.layers[i] and _close(row["fvu"], r.fvu[i])
    gap = row["ce_zero"] - row["ce_clean"]
    assert _close(row["loss_recovered"], 1 - (row["ce_spliced"] - row["ce_clean"]) / gap)
    assert _close(row["dead_fraction"], (r.densities(label) == 0).double().mean())


ROW_CHECKS: dict[str, Callable[[Any, str, Any, pd.DataFrame], None]] = {
    "DictionaryEvaluation": _check_dictionary_evaluation,
    "QKAttribution": _check_qk,
    "InterventionResult": _check_intervention,
    "GenerationResult": _check_generation,
    "AttributionGraph": _check_attribution_graph,
    "AggregateGraph": _check_aggregate,
    "GraphFaithfulness": _check_graph_faithfulness,
    "Predictions": _check_predictions,
    "LogitAttribution": _check_logit_attribution,
    "Decomposition": _check_decomposition,
    "HeadScores": _check_head_scores,
    "OVDiagonalStats": _check_ov_diagonal,
    "VirtualWeightNorms": _check_virtual,
    "CompositionScores": _check_composition,
    "CompositionGraph": _check_graph,
    "HeadOperator": _check_head_operator,
    "PathExpansion": _check_path_expansion,
    "PrivilegedBasisReport": _check_privileged,
    "SubspaceOverlap": _check_overlap,
    "ErasureTable": _check_erasure,
    "AttentionPatterns": _check_attention,
    "PatchResult": _check_patch,
    "Effects": _check_effects,
    "OVAt": _check_ov_at,
    "LogitLens": _check_lens,
    "AttentionPatternBatch": _check_attention_batch,
    "EdgeScores": _check_edge_rows,
    "EdgeCircuit": _check_edge_rows,
    "EdgeRanking": _check_edge_ranking,
    "CircuitEvaluation": _check_circuit_evaluation,
    "FaithfulnessCurve": _check_faithfulness_curve,
}


class Order(NamedTuple):
    """A class whose documented default order is not one column: (columns, ascending) for sort_values."""

    columns: list[str]
    ascending: list[bool]


#: classes whose top() without by= follows a documented multi-column order
DEFAULT_ORDERS = {
    "OVDiagonalStats": Order(["rank", "diagonal"], [True, False]),  # copied most strongly first
    "ErasureTable": Order(["negative_definite", "mean_gain"], [False, True]),  # strongest erasure first
}


# --- discovery ---------------------------------------------------------------------------------------------


RESULT_CLASSES = sorted(n for n, c in _exported_classes().items() if issubclass(c, Result))


def test_every_exported_result_class_is_in_the_contract():
    classes = _exported_classes()
    not_result = sorted(
        n for n, c in classes.items() if _looks_like_result(c) and not issubclass(c, Result) and n not in NOT_RESULTS
    )
    assert not not_result, (
        f"exported dataclass-like classes that neither subclass interp._result.Result nor are "
        f"listed in NOT_RESULTS with a reason: {not_result}"
    )
    stale = sorted(n for n in NOT_RESULTS if n not in classes)
    assert not stale, f"NOT_RESULTS lists classes no public module exports (internal now, or gone): {stale}"
    wrongly_excluded = sorted(n for n in NOT_RESULTS if n in classes and issubclass(classes[n], Result))
    assert not wrongly_excluded, f"NOT_RESULTS lists Result subclasses: {wrongly_excluded}"
    no_factory = sorted(n for n in RESULT_CLASSES if n not in FACTORIES or n not in ROW_CHECKS)
    assert not no_factory, (
        f"result classes without a factory / row check in tests/test_result_contract.py: {no_factory}"
    )
    assert {"Decomposition", "LogitAttribution", "PathExpansion", "CompositionGraph"} <= set(RESULT_CLASSES)


def test_discovery_sees_the_subpackages():
    names = {m.__name__ for m in _public_modules()}
    assert {"interp", "interp.stream", "interp.circuits", "interp.attribution", "interp.plots"} <= names


# --- the contract, per class -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results(models):
    return {}


def _instance(name: str, models, cache) -> Any:
    if name not in FACTORIES:
        pytest.fail(f"{name} has no factory in tests/test_result_contract.py")
    if name not in cache:
        cache[name] = FACTORIES[name](models)
    r = cache[name]
    assert type(r).__name__ == name
    return r


def _field_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(
                torch.equal(a, b)
                or (
                    a.is_floating_point()
                    and torch.equal(a.nan_to_num(7.25), b.nan_to_num(7.25))
                    and torch.equal(a.isnan(), b.isnan())
                )
            )
        )
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_field_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_field_equal(a[k], b[k]) for k in a)
    return a == b


def _key(df: pd.DataFrame, col: str, absolute: bool) -> np.ndarray:
    v = df[col].to_numpy(dtype=np.float64)
    return np.abs(v) if absolute else v


def _assert_ranked(top: pd.DataFrame, full: pd.DataFrame, col: str, absolute: bool, k: int) -> None:
    """``top`` is ``full``'s k largest by ``col`` (|col| if absolute), largest first (NaN last)."""
    assert isinstance(top, pd.DataFrame) and len(top) == min(k, len(full))
    got = _key(top, col, absolute)
    ref = _key(full, col, absolute)
    want = np.sort(ref[~np.isnan(ref)])[::-1][:k]
    np.testing.assert_allclose(got[: len(want)], want, rtol=0, atol=0)


@pytest.mark.parametrize("name", RESULT_CLASSES)
def test_result_contract(name, models, results, tmp_path):
    r = _instance(name, models, results)
    cls = type(r)
    assert dataclasses.is_dataclass(r) and cls.__dataclass_params__.frozen, f"{name} must be a frozen dataclass"

    # labels and [label]
    labels = list(r.labels)
    assert labels and all(isinstance(x, str) for x in labels) and len(set(labels)) == len(labels)
    label = labels[0]
    assert label in r
    with pytest.raises(LabelError):
        r["no such label"]

    # to_dataframe: a DataFrame with the label column naming every label
    df = r.to_dataframe()
    assert isinstance(df, pd.DataFrame) and cls.label_column in df.columns, (name, list(df.columns))
    assert set(df[cls.label_column].astype(str)) == set(labels)
    ROW_CHECKS[name](r, label, r[label], df[df[cls.label_column].astype(str) == label])

    # top(k): ≤ k rows by the default column (|·| unless the class ranks signed), or its documented order
    full = r._ranked_frame()
    col = r.default_column
    assert col in full.columns and pd.api.types.is_numeric_dtype(full[col]), (name, col)
    top = r.top(3)
    assert isinstance(top, pd.DataFrame) and len(top) <= 3 and list(top.columns) == list(full.columns)
    if name in DEFAULT_ORDERS:
        o = DEFAULT_ORDERS[name]
        want = full.sort_values(o.columns, ascending=o.ascending, kind="stable").head(3).reset_index(drop=True)
        pd.testing.assert_frame_equal(top, want)
    else:
        _assert_ranked(top, full, col, cls.default_absolute, 3)
    _assert_ranked(r.top(3, by=col, absolute=True), full, col, True, 3)
    _assert_ranked(r.top(3, by=col, absolute=False), full, col, False, 3)
    # one meaning of ``absolute`` without ``by``: True ranks by |quantity|, False by the signed quantity —
    # the signed column a magnitude default summarises (``signed_by``, e.g. mean for mean_abs), else the default
    signed = cls.signed_by or col
    assert signed in full.columns and pd.api.types.is_numeric_dtype(full[signed]), (name, signed)
    _assert_ranked(r.top(3, absolute=True), full, col, True, 3)
    _assert_ranked(r.top(3, absolute=False), full, signed, False, 3)
    other = [
        c
        for c in full.columns
        if c != col and pd.api.types.is_numeric_dtype(full[c]) and not pd.api.types.is_bool_dtype(full[c])
    ]
    if other:
        _assert_ranked(r.top(2, by=other[-1], absolute=False), full, other[-1], False, 2)
    with pytest.raises(ArgumentError, match="k="):
        r.top(0)
    with pytest.raises(ArgumentError, match="by="):
        r.top(3, by="no such column")

    # plot: a plotly Figure
    assert isinstance(r.plot(), go.Figure)

    # save / load: every field equal, tensors bit for bit
    back = cls.load(r.save(tmp_path / f"{name}.safetensors"))
    assert type(back) is cls
    for f in dataclasses.fields(r):
        assert _field_equal(getattr(r, f.name), getattr(back, f.name)), (name, f.name)
    assert list(back.labels) == labels
    pd.testing.assert_frame_equal(back.top(3), top)


def test_fold_norms_is_a_typed_field_where_weights_may_be_folded(models):
    m = models["llama"]
    for fold in (True, False):
        for r in (
            interp.copying_scores(m, fold_norms=fold),
            interp.composition_scores(m, "Q", fold_norms=fold),
            interp.circuits.virtual_weight_norms(m, fold_norms=fold),
            interp.circuits.write_subspace_overlap(m, fold_norms=fold),
            interp.circuits.erasure_candidates(m, fold_norms=fold),
            interp.circuits.ov_diagonal_stats(m, 0, 0, fold_norms=fold),
        ):
            assert r.fold_norms is fold, type(r).__name__
            assert {f.name: f.type for f in dataclasses.fields(r)}["fold_norms"] == "bool"


def test_batch_is_the_deprecated_spelling_of_prompt(models):
    d = interp.trace(models["gpt2"], PROMPTS).decompose("unembed")
    with pytest.warns(DeprecationWarning, match="prompt="):
        old = d.to_dataframe(batch=1)
    pd.testing.assert_frame_equal(old, d.to_dataframe(prompt=1))
    with pytest.raises(ArgumentError, match="not both"):
        d.top(3, prompt=0, batch=1)
