"""The conformance matrix: every entry point docs/api.md documents × every placement × every grad mode × every model
kind (placements.py). Each cell returns the reference's values (float32, in memory, gradients enabled, text inputs)
within its placement's tolerance, or raises a typed :class:`interp.InterpError` that :data:`REFUSED` lists with its
reason — never torch's raw error, never a silently different value, never a tensor made without ``device=`` (the
``guard`` placement). Entry points come from docs/api.md (tests/test_docs_api.py's enumeration) and the axes from
placements.py: a new documented entry point without a call in calls.py, or a new placement, kind or grad mode,
enters every cell without anyone listing it.

Values are compared tensor by tensor over the whole result (tests/device/walk.py): float tensors to
``tolerance(placement) × max |reference|``; integer and boolean tensors (token ids, ranks, masks) exactly, except in
bfloat16, where an argmax may flip within its rounding.
"""

from __future__ import annotations

import fnmatch
import traceback
from typing import Any

import pytest
import torch

import interp
from conformance.calls import CALLS, MODEL_FREE
from conformance.placements import GRAD_MODES, KINDS, PLACEMENTS, REFERENCE, guarded, inputs, model, tolerance
from device.walk import tensors
from test_docs_api import DOCUMENTED

#: (entry point, kind, placement, grad mode) patterns (fnmatch) → why the cell raises a typed error by design.
#: A cell that raises an InterpError no pattern lists fails.
_GRADIENTS = (
    "takes gradients, and inference_mode's tensors cannot be saved for backward (no_grad runs: it turns gradients on)"
)
_ALL_LAYERS = "weight maths over every layer at once, while an offloaded model is read one block at a time"
REFUSED: dict[tuple[str, str, str, str], str] = {
    # gradient methods, and the calls that score edges with one first
    **{
        (e, "*", "*", "inference_mode"): _GRADIENTS
        for e in (
            "interp.attribution_patch",
            "interp.edge_attribution",
            "interp.Task",
            "interp.Task.from_jsonl",
            "interp.faithfulness_curve",
            "interp.task_report",
            "interp.plots.circuit_graph_figure",
            "interp.features.qk_attribution",
        )
    },
    **{
        (e, "*", "offload", "*"): _ALL_LAYERS
        for e in (
            "interp.composition_scores",
            "interp.copying_scores",
            "interp.weights_report",
            "interp.circuits.virtual_weight_norms",
            "interp.circuits.write_subspace_overlap",
            "interp.circuits.erasure_candidates",
            "interp.rotate_residual",
            "interp.ResidualTrace.load",
        )
    },
    ("interp.path_expansion", "[!a]*", "*", "*"): "the path expansion is exact for attention-only models only",
    ("*", "attn-only", "offload", "*"): "a native toy model (kilobytes) is loaded in memory only",
    ("interp.Task.from_jsonl", "*", "ids", "*"): "a JSON Lines task file holds text pairs: it needs a tokenizer",
    ("interp.rotate_residual", "[!p]*", "*", "*"): "a rotated model is a new Hugging Face module: built for the "
    "pre-norm Llama/GPT-2 layouts; other families refuse",
    # an encoder has no logits: everything that reads one refuses (its hidden states are decomposed instead)
    **{
        (e, "post-norm", "*", "*"): "an encoder has no unembedding: no logit, metric or generation to read"
        for e in (
            "interp.patch",
            "interp.path_patch",
            "interp.predict",
            "interp.logit_lens",
            "interp.ov_at",
            "interp.plots.circuit_graph_figure",
            "interp.features.generate",
            "interp.features.Steer",
            "interp.features.feature_logit_effects",
            "interp.features.evaluate_dictionary",
            "interp.dictionary_page",
            "interp.LogitDiff",
            "interp.Logit",
            "interp.LogProb",
            "interp.Prob",
            "interp.KL",
            "interp.effects",
            "interp.attribution_patch",
            "interp.attribute_logits",
            "interp.edge_attribution",
            "interp.edge_patch",
            "interp.evaluate_circuit",
            "interp.faithfulness_curve",
            "interp.task_report",
            "interp.Task",
            "interp.Task.from_jsonl",
            "interp.export",
            "interp.copying_scores",
            "interp.circuits.effective_embedding",
        )
    },
    # transcoder features: replace MLPs of a pre-norm decoder (the toy has no MLP; BERT's stream is normed at each join)
    **{
        (e, k, "*", "*"): "transcoders replace MLPs of a pre-norm decoder: the toy has none, BERT's stream is normed "
        "after each join"
        for e in (
            "interp.features.attribution_graph",
            "interp.features.aggregate_graphs",
            "interp.features.intervene",
            "interp.features.Intervention",
            "interp.features.generate",
            "interp.features.qk_attribution",
            "interp.features.train_transcoders",
            "interp.features.evaluate_dictionary",
            "interp.dictionary_page",
            "interp.plots.feature_graph_view",
            "interp.plots.graph_faithfulness_figure",
        )
        for k in ("attn-only", "post-norm")
    },
    ("interp.features.load_*", "attn-only", "*", "*"): "the fixtures are dictionaries of the tiny models' width",
    **{
        (e, "moe", "*", "*"): "weight maths through an MLP's read and write: a mixture of experts has one per expert "
        "and a token-dependent router"
        for e in (
            "interp.circuits.effective_embedding",
            "interp.circuits.erasure_candidates",
            "interp.circuits.privileged_basis_report",
            "interp.circuits.virtual_weight_norms",
        )
    },
    ("interp.circuits.effective_embedding", "attn-only", "*", "*"): "no MLP: the effective embedding is W_E itself",
    ("interp.circuits.ov_diagonal_stats", "post-norm", "*", "*"): "an OV circuit's diagonal is read in the "
    "vocabulary: an encoder has no unembedding",
    ("interp.rotate_residual", "post-norm", "*", "*"): "a post-norm model's gains multiply the stream after each "
    "join: no rotation leaves it unchanged",
    ("interp.features.sae_reconstruction", "attn-only", "*", "*"): "the fixtures are dictionaries of the tiny "
    "models' width",
    ("interp.features.train_transcoders", "*", "ids", "*"): "training reads a text corpus: a model without a "
    "tokenizer cannot tokenise it",
    ("interp.features.train_transcoders", "*", "offload", "*"): "training reads every layer's MLP weights at once",
}
#: results whose node set depends on which features are active: in bfloat16 a feature on the edge of activation may
#: switch, so a tensor whose shape differs is not compared (the rest of the result is)
SHAPE_MAY_CHANGE_IN_BF16 = {
    "interp.features.attribution_graph",
    "interp.features.qk_attribution",
    "interp.features.aggregate_graphs",
    "interp.features.intervene",
    "interp.features.Intervention",
    "interp.plots.graph_faithfulness_figure",
    "interp.plots.feature_graph_view",
}
#: entry points whose values are compared at a looser tolerance than their placement's, with the reason
LOOSER: dict[str, tuple[float, float, str]] = {
    "interp.features.train_transcoders": (
        0.1,
        0.01,
        "an optimisation: each of its updates amplifies the previous ones' rounding (fp64 vs fp32 differ by ~2%)",
    ),
    "interp.features.evaluate_dictionary": (
        1e-3,
        1e-4,
        "loss recovered divides by CE_zero − CE_clean, which is small on a random tiny model (rounding amplified)",
    ),
}

DOCUMENTED_NAMES = sorted({name for name, *_ in DOCUMENTED})
ENTRIES = sorted(CALLS)


def test_every_documented_entry_point_is_in_the_matrix():
    missing = [n for n in DOCUMENTED_NAMES if n not in CALLS and n not in MODEL_FREE]
    assert not missing, f"documented entry points with no call in tests/conformance/calls.py: {missing}"
    stale = [n for n in [*CALLS, *MODEL_FREE] if n not in DOCUMENTED_NAMES]
    assert not stale, f"calls.py lists entry points docs/api.md does not document: {stale}"


def _refusal(entry: str, kind: str, placement: str, grad: str) -> str | None:
    for (e, k, p, g), why in REFUSED.items():
        if all(fnmatch.fnmatchcase(v, pat) for v, pat in ((entry, e), (kind, k), (placement, p), (grad, g))):
            return why
    return None


def _run(entry: str, kind: str, placement: str, grad: str, tmp) -> tuple[str, Any]:
    """("ok", result) | ("refused", error) | ("raw", traceback) | ("guard", violations) of one cell."""
    violations: dict = {}
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        m = model(kind, placement)
        ref = model(kind, REFERENCE) if placement == "ids" else None
        X = inputs(kind, placement, tmp, ref)
        with guarded(placement, violations), GRAD_MODES[grad]():
            out = CALLS[entry](m, X)
    except interp.InterpError as e:
        return "refused", e
    except Exception:  # noqa: BLE001 — the point: a raw error is a failure of the cell, reported with its traceback
        return "raw", traceback.format_exc(limit=-6)
    if violations:
        return "guard", violations
    return "ok", out


def _compare(ref: Any, out: Any, placement: str, entry: str = "") -> list[str]:
    r, o = dict(tensors(ref)), dict(tensors(out))
    if r.keys() != o.keys():
        return [f"result fields differ: {sorted(r.keys() ^ o.keys())[:6]}"]
    (rel, atol), bad = tolerance(placement), []
    if entry in LOOSER and placement != "guard":
        rel, atol = max(rel, LOOSER[entry][0]), max(atol, LOOSER[entry][1])
    for path, a in r.items():
        b = o[path]
        if a.shape != b.shape and placement == "bf16" and entry in SHAPE_MAY_CHANGE_IN_BF16:
            continue
        if a.shape != b.shape:
            bad.append(f"{path}: shape {tuple(b.shape)} vs the reference's {tuple(a.shape)}")
            continue
        if not a.numel():
            continue
        a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
        if not (a.is_floating_point() or a.is_complex()):
            if placement != "bf16" and not torch.equal(a64, b64):
                bad.append(f"{path}: {int((a64 != b64).sum())} of {a.numel()} discrete values differ")
            continue
        nan_a, nan_b = a64.isnan(), b64.isnan()
        if not torch.equal(nan_a, nan_b):
            bad.append(
                f"{path}: NaN at {int((nan_a ^ nan_b).sum())} places where the reference has none (or the reverse)"
            )
            continue
        fin = ~nan_a
        scale = float(a64[fin].abs().max()) if fin.any() else 0.0
        err = float((a64[fin] - b64[fin]).abs().max()) if fin.any() else 0.0
        if not err <= rel * scale + atol:
            bad.append(f"{path}: max |diff| {err:.3g} > {rel:g} × {scale:.3g} + {atol:g}")
    return bad


#: the cells of a kind besides its reference: on the pre-norm decoder every placement × every grad mode; on the other
#: kinds every placement with gradients enabled and every grad mode in memory and offloaded (where grad modes bit)
FULL_CROSS = {"pre-norm"}


def cells(kind: str) -> list[tuple[str, str]]:
    return [
        (p, g)
        for p in PLACEMENTS
        for g in GRAD_MODES
        if (p, g) != (REFERENCE, "enabled") and (kind in FULL_CROSS or g == "enabled" or p in (REFERENCE, "offload"))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("entry", ENTRIES)
def test_cell(entry, kind, tmp_path):
    status, ref = _run(entry, kind, REFERENCE, "enabled", tmp_path / "ref")
    failures: list[str] = []
    if status == "raw":
        pytest.fail(f"{entry} on {kind} (the reference): torch's raw error\n{ref}")
    if status == "refused" and _refusal(entry, kind, REFERENCE, "enabled") is None:
        pytest.fail(f"{entry} on {kind} (the reference) raised a typed error no REFUSED pattern lists: {ref!r}")
    for placement, grad in cells(kind):
        cell = f"{entry} | {kind} | {placement} | {grad}"
        got, out = _run(entry, kind, placement, grad, tmp_path / f"{placement}-{grad}")
        listed = _refusal(entry, kind, placement, grad)
        if got == "raw":
            failures.append(f"{cell}: torch's raw error\n{out}")
        elif got == "guard":
            failures.append(f"{cell}: tensors made inside interp without device=: {out}")
        elif got == "refused":
            if listed is None:
                failures.append(f"{cell}: typed error no REFUSED pattern lists: {type(out).__name__}: {out}")
        elif listed is not None:
            failures.append(f"{cell}: listed as refused ({listed}) but it ran")
        elif status == "refused":
            failures.append(f"{cell}: ran where the reference refused ({ref})")
        else:
            failures += [f"{cell}: {d}" for d in _compare(ref, out, placement, entry)]
    assert not failures, "\n".join(failures)
