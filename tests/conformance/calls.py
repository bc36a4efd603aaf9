"""One call of every entry point docs/api.md documents, written once for every model kind and placement: ``CALLS[name]
(model, inputs) -> result``. An entry point that takes no model is in :data:`MODEL_FREE` with the reason instead; a
documented entry point in neither fails ``test_every_documented_entry_point_is_in_the_matrix``."""

from __future__ import annotations

import json
from typing import Any, Callable

import torch

import interp
import interp.circuits
import interp.features
import interp.plots
import interp.reports
import interp.stream
from conformance.placements import SEQ_LEN
from tiny_transcoders import random_transcoders

FIX = __import__("pathlib").Path(__file__).resolve().parents[1] / "features" / "fixtures" / "dictionaries"

#: documented entry points that take no model, so no placement or model kind applies (each is tested elsewhere)
MODEL_FREE = {
    "interp.list_models": "lists the catalog: no model",
    "interp.load_model": "the placements themselves are made by load_model (fp64, bf16, offload, the toy)",
    "interp.models.load_catalog_hf": "loads a real catalog checkpoint (its conformance runs once, marked slow)",
    "interp.models._gguf.verify_entry": "checks a cache folder: no model",
    "interp.models.describe_block": "pure Python over an ArchInfo: no tensors",
    "interp.features.default_lr": "a number from two numbers",
    "interp.features.TrainConfig": "training's options, a dataclass: no model (train_transcoders is in the matrix)",
    "interp.dictionaries.DictionarySet.of": "reads dictionaries given by hand: no model (tests/dictionaries)",
    "interp.features.default_passes": "a number from a number",
    "interp.features.modern_corpus": "text from a package: no model",
    "interp.features.held_out_corpus": "text from a package: no model",
    "interp.features.english_corpus": "text shipped with interp: no model",
    "interp.circuits.random_rotation": "a matrix from a seed (rotate_residual's cell uses it)",
    "interp.plots.Page": "an HTML page assembled from figures and tables: no model",
    "interp.plots.CircuitGraphOptions": "circuit_graph_figure's drawing options (its cell draws with them): no model",
    "interp.RayCluster": "starts a Ray cluster (tests/distributed run the sharded functions, whose workers run the "
    "calls here)",
}


def _metric(X):
    return interp.LogitDiff(X.answer, X.wrong)


def _tcs(m, n: int = 16):
    return [t.to(dtype=m.dtype) for t in random_transcoders(m, n, seed=0)]


def _eap(m, X, task=None):
    t = task or interp.Task("t", X.clean, X.corrupt, X.answer, X.wrong, model=m)
    return interp.edge_attribution(m, t.clean, t.corrupt, metric=t.metric, progress=False)


def _jsonl(m, X):
    p = X.tmp / "pairs.jsonl"
    rows = zip(*(x.tolist() if isinstance(x, torch.Tensor) else x for x in (X.clean, X.corrupt, X.answer, X.wrong)))
    p.write_text("\n".join(json.dumps({"clean": c, "corrupt": k, "answer": a, "wrong": w}) for c, k, a, w in rows))
    return _eap(m, X, interp.Task.from_jsonl(p, m))


def _top_edges(m, X, n=6):
    """Every n-th edge of the model's graph: a fixed circuit, without a gradient method to choose it."""
    edges = interp.circuit_graph(m).edges
    return list(edges[:: max(len(edges) // n, 1)])


def _trace_load(m, X):
    tr = interp.trace(m, X.prompt)
    tr.save(X.tmp / "trace.safetensors")
    return interp.ResidualTrace.load(X.tmp / "trace.safetensors").decompose(
        "final" if not m.arch.has_logits else "unembed"
    )


def _graph(m, X):
    return interp.features.attribution_graph(m, X.prompt, _tcs(m), target=X.one)


def _train(m, X):
    return interp.features.train_transcoders(
        m,
        layers="all",
        width=8,
        k=2,
        tokens=8 * 4 * 2,
        seq_len=6,
        batch_size=4,
        lr=1e-2,
        corpus=X.texts * 4,
        cache_dir=X.tmp / "train",
        progress=False,
        eval_tokens=8 * 4,
    ).transcoders


CALLS: dict[str, Callable[[Any, Any], Any]] = {
    # metrics: patching with each
    "interp.LogitDiff": lambda m, X: interp.patch(m, X.clean, X.corrupt, metric=_metric(X), progress=False),
    "interp.Logit": lambda m, X: interp.patch(m, X.clean, X.corrupt, metric=interp.Logit(X.answer), progress=False),
    "interp.LogProb": lambda m, X: interp.patch(m, X.clean, X.corrupt, metric=interp.LogProb(X.answer), progress=False),
    "interp.Prob": lambda m, X: interp.patch(m, X.clean, X.corrupt, metric=interp.Prob(X.answer), progress=False),
    "interp.KL": lambda m, X: interp.patch(m, X.clean, X.corrupt, metric=interp.KL(), progress=False),
    "interp.patch": lambda m, X: interp.patch(
        m, X.clean, X.corrupt, metric=_metric(X), nodes="components", positions="each", progress=False
    ),
    "interp.effects": lambda m, X: interp.effects(m, X.clean, X.corrupt, metric=_metric(X), progress=False),
    "interp.path_patch": lambda m, X: interp.path_patch(
        m, X.clean, X.corrupt, metric=_metric(X), sender="L0.H0", via="q", progress=False
    ),
    "interp.attribution_patch": lambda m, X: interp.attribution_patch(m, X.clean, X.corrupt, metric=_metric(X)),
    "interp.logit_lens": lambda m, X: interp.logit_lens(m, X.prompt),
    # the stream and attribution
    "interp.trace": lambda m, X: interp.trace(m, X.prompt).decompose("final" if not m.arch.has_logits else "unembed"),
    "interp.ResidualTrace.load": _trace_load,
    "interp.predict": lambda m, X: interp.predict(m, X.clean, k=3),
    "interp.stream.attention_patterns": lambda m, X: interp.stream.attention_patterns(m, X.prompt, ["L1.H0"]),
    "interp.stream.capture": lambda m, X: interp.stream.capture(
        m, X.prompt, ["blocks.1.hook_resid_pre", "blocks.0.attn.hook_z", "ln_final.hook_in"]
    ),
    "interp.attribute_logits": lambda m, X: interp.attribute_logits(
        m, X.clean, answer=X.answer, wrong=X.wrong, progress=False
    ),
    "interp.attribute_direction": lambda m, X: interp.attribute_direction(
        m, X.prompt, torch.ones(m.arch.d_model, dtype=m.dtype, device=m.device)
    ),
    "interp.Direction": lambda m, X: interp.patch(
        m,
        X.clean,
        X.corrupt,
        metric=interp.Direction(torch.ones(m.arch.d_model, dtype=m.dtype, device=m.device)),
        progress=False,
    ),
    "interp.ov_at": lambda m, X: interp.ov_at(m, X.prompt, 1, 0, src=1, k=3),
    "interp.path_expansion": lambda m, X: interp.path_expansion(m, X.prompt, order=2),
    # weights only
    "interp.ov_circuit": lambda m, X: interp.ov_circuit(m, 1, 0).AB,
    "interp.qk_circuit": lambda m, X: interp.qk_circuit(m, 1, 0).AB,
    "interp.head_operator": lambda m, X: interp.head_operator(
        m, 1, 0, torch.full((3, 3), 1 / 3, dtype=m.dtype, device=m.device)
    ).apply(torch.ones(3, m.arch.d_model, dtype=m.dtype, device=m.device)),
    "interp.virtual_weights": lambda m, X: interp.virtual_weights(m, "L0.H0", "L1.attn.v[H0]").AB,
    "interp.composition_scores": lambda m, X: interp.composition_scores(m, kind="K"),
    "interp.copying_scores": lambda m, X: interp.copying_scores(m),
    "interp.rotate_residual": lambda m, X: interp.logit_lens(
        interp.rotate_residual(m, interp.circuits.random_rotation(m.arch.d_model, fix_ones=m.arch.norm == "layernorm")),
        X.prompt,
    ),
    "interp.circuits.effective_embedding": lambda m, X: interp.circuits.effective_embedding(m),
    "interp.circuits.erasure_candidates": lambda m, X: interp.circuits.erasure_candidates(m),
    "interp.circuits.ov_diagonal_stats": lambda m, X: interp.circuits.ov_diagonal_stats(m, 1, 0),
    "interp.circuits.privileged_basis_report": lambda m, X: interp.circuits.privileged_basis_report(m, X.clean),
    "interp.circuits.virtual_weight_norms": lambda m, X: interp.circuits.virtual_weight_norms(m),
    "interp.circuits.write_subspace_overlap": lambda m, X: interp.circuits.write_subspace_overlap(m),
    # edges
    "interp.circuit_graph": lambda m, X: interp.circuit_graph(m).n_edges,
    "interp.edge_attribution": lambda m, X: _eap(m, X),
    "interp.Task": lambda m, X: _eap(m, X),
    "interp.Task.from_jsonl": _jsonl,
    "interp.edge_patch": lambda m, X: interp.edge_patch(
        m, X.clean, X.corrupt, _top_edges(m, X), metric=_metric(X), progress=False
    ),
    "interp.evaluate_circuit": lambda m, X: interp.evaluate_circuit(
        m, X.clean, X.corrupt, _top_edges(m, X), metric=_metric(X)
    ),
    "interp.faithfulness_curve": lambda m, X: interp.faithfulness_curve(
        m, X.clean, X.corrupt, _eap(m, X), metric=_metric(X), sizes=(0.1, 1.0), ablations=("corrupt",), progress=False
    ),
    "interp.plots.circuit_graph_figure": lambda m, X: interp.plots.circuit_graph_figure(_eap(m, X)).to_json(),
    "interp.export": lambda m, X: interp.export(
        interp.attribute_logits(m, X.clean, answer=X.answer).plot(), X.tmp / "a.json"
    ),
    # reports
    "interp.task_report": lambda m, X: interp.task_report(
        m,
        interp.Task("t", X.clean, X.corrupt, X.answer, X.wrong, model=m),
        out_dir=X.tmp / "c",
        method="eap",
        n_exact=2,
        max_edges=10,
        sizes=(0.5, 1.0),
        ablations=("zero",),
        static=False,
    ),
    "interp.weights_report": lambda m, X: interp.weights_report(m, out_dir=X.tmp / "cs", max_edges=5, static=False),
    "interp.plots.attention_view": lambda m, X: interp.plots.attention_view(
        interp.stream.attention_patterns(m, X.prompt, ["L0.H1"])
    ),
    # features
    "interp.features.attribution_graph": _graph,
    "interp.plots.feature_graph_view": lambda m, X: interp.plots.feature_graph_view(_graph(m, X)),
    "interp.plots.graph_faithfulness_figure": lambda m, X: interp.plots.graph_faithfulness_figure(
        _graph(m, X).faithfulness(m, _tcs(m), thresholds=(0.5, 1.0))
    ).to_json(),
    "interp.features.aggregate_graphs": lambda m, X: interp.features.aggregate_graphs(
        m, X.clean, _tcs(m), target=X.answer, progress=False
    ),
    "interp.features.intervene": lambda m, X: interp.features.intervene(
        m, X.prompt, _tcs(m), [(0, 2, 1, 3.0)], target=X.one, top_k=3
    ),
    "interp.features.Intervention": lambda m, X: interp.features.intervene(
        m, X.prompt, _tcs(m), interp.features.Intervention.scale("L0.F1@2", 2.0), target=X.one, frozen_attention=False
    ),
    "interp.features.generate": lambda m, X: interp.features.generate(
        m, X.prompt, _tcs(m), [(0, 2, 1, 3.0)], max_new_tokens=2, frozen_attention=True
    ),
    "interp.features.Steer": lambda m, X: interp.features.generate(
        m,
        X.prompt,
        None,
        [interp.features.Steer(1, torch.ones(m.arch.d_model, dtype=m.dtype, device=m.device))],
        max_new_tokens=2,
    ),
    "interp.features.qk_attribution": lambda m, X: interp.features.qk_attribution(
        m, X.prompt, _tcs(m), 1, 0, query_pos=4, key_pos=1
    ),
    "interp.features.feature_logit_effects": lambda m, X: interp.features.feature_logit_effects(
        m, _tcs(m), ["L0.F1", "L1.F2"], k=3
    ),
    "interp.features.top_activating_contexts": lambda m, X: interp.features.top_activating_contexts(
        m, _tcs(m), X.contexts, ["L0.F1", "L1.F2"], k=2
    ),
    "interp.features.evaluate_dictionary": lambda m, X: interp.features.evaluate_dictionary(
        m, _tcs(m), tokens=X.rows, seq_len=SEQ_LEN
    ),
    "interp.dictionary_page": lambda m, X: interp.dictionary_page(
        m,
        _tcs(m),
        path=X.tmp / "dict.html",
        tokens=X.rows,
        texts=X.contexts,
        seq_len=SEQ_LEN,
        features_per_layer=2,
        contexts=2,
    ),
    "interp.features.train_transcoders": _train,
    "interp.features.load_transcoders": lambda m, X: interp.features.load_transcoders(FIX / "circuit_tracer", m),
    "interp.features.load_saes": lambda m, X: interp.features.load_saes(FIX / "saelens_saes", m),
    "interp.features.sae_reconstruction": lambda m, X: interp.features.sae_reconstruction(
        m, X.prompt, interp.features.load_saes(FIX / "saelens_saes", m)
    ),
}
