"""Results of edge attribution: EdgeScores (one score per edge) and EdgeCircuit (a chosen set of edges).

Sign convention (interp's one convention, docs/math.md "Sign convention"): an edge's score is positive when the
edge supports the metric — what the metric loses when the edge is corrupted,

    score(w → r) = (a_w(clean) − a_w(corrupt)) · J_{w→r}ᵀ ∂M/∂x_r   ≈   M(clean) − M(clean, only r sees w's
                                                                                   corrupt value)

(the negative of the EAP-IG reference code's score), and ranking by |score| finds the edges that matter either way.
``exact`` holds the exactly patched effect in the same sign, M(clean) − M(patched), where :func:`interp.edge_patch`
computed it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Optional

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, check_finite_float, check_int_min
from interp.errors import ArgumentError

__all__ = ["EdgeScores", "EdgeCircuit", "CONVENTION"]

CONVENTION = (
    "score(w→r) = (a_w(clean) − a_w(corrupt))·∂M/∂x_r carried to w's write, gradient at the clean run "
    "(EAP-IG: averaged over the corrupt→clean path); ≈ M(clean) − M(only r sees w's corrupt value): "
    "positive = the edge supports the metric"
)


def _split(edge: str) -> tuple[str, str]:
    w, r = edge.split("→")
    return w, r


def _layer(label: str) -> int:
    if label.startswith("L"):
        return int(label[1 : label.index(".")])
    return -1 if label in ("embed", "pos_embed", "type_embed") else 1 << 30


def _edge_frame(edges: list[str], cols: dict[str, Any]) -> pd.DataFrame:
    w, r = zip(*(_split(e) for e in edges)) if edges else ((), ())
    df = pd.DataFrame({"edge": list(edges), "writer": list(w), "reader": list(r), **cols})
    df["writer_layer"] = [_layer(x) for x in w]
    df["reader_layer"] = [min(_layer(x), 10**6) for x in r]
    return df


@dataclass(frozen=True, eq=False)
class EdgeScores(Result):
    """Edge attribution scores (EAP or EAP-IG) for every edge of a model's circuit graph.

    ``edges`` the edge labels (graph order), ``scores`` [n_edges] the mean over prompts, ``per_prompt``
    [n_edges, n_prompts]; ``clean`` / ``corrupt`` the metric on the two runs. ``completeness`` is the sum
    of the scores that should add up to M(clean) − M(corrupt) (``completeness_of`` says which: the edges out
    of the token embedding for EAP-IG at the inputs, every edge for EAP-IG at the activations; exact as
    ``ig_steps`` → ∞ with ``scale="recomputed"``); :attr:`completeness_error` is its distance from it.
    ``exact`` [n_edges] the exactly patched effect M(clean) − M(patched) where computed (NaN elsewhere): positive
    scores and effects support the metric.

    Contract: ``scores[edge]`` is the edge's score; ``to_dataframe()`` one row per edge; ``top`` ranks by
    |score|; ``circuit(n=…)`` / ``circuit(threshold=…)`` pick an :class:`EdgeCircuit`.
    """

    label_column: ClassVar[str] = "edge"
    default_by: ClassVar[str] = "score"

    edges: list[str]
    scores: Tensor = field(repr=False)
    per_prompt: Tensor = field(repr=False)
    method: str
    metric: str
    clean: float
    corrupt: float
    clean_per_prompt: Tensor = field(repr=False)
    corrupt_per_prompt: Tensor = field(repr=False)
    model_name: str = ""
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    ig_steps: int = 1
    ig_at: str = "inputs"
    scale: str = "recomputed"
    completeness: float = math.nan
    completeness_of: str = ""
    exact: Optional[Tensor] = field(default=None, repr=False)
    convention: str = CONVENTION
    details: dict = field(default_factory=dict, repr=False)

    @property
    def labels(self) -> list[str]:
        return list(self.edges)

    @property
    def n_prompts(self) -> int:
        return int(self.per_prompt.shape[-1])

    @property
    def target(self) -> float:
        """M(clean) − M(corrupt): what the completeness sum estimates."""
        return self.clean - self.corrupt

    @property
    def completeness_error(self) -> float:
        """|completeness − (M(clean) − M(corrupt))| (see the class docstring)."""
        return abs(self.completeness - self.target)

    def _row(self, index: int) -> float:
        return float(self.scores[index])

    def __len__(self) -> int:
        return len(self.edges)

    def __repr__(self) -> str:
        m = self.method.upper() + (f" ({self.ig_steps} steps at the {self.ig_at})" if self.method == "eap-ig" else "")
        rel = self.completeness_error / abs(self.target) if self.target else math.nan
        return (
            f"EdgeScores({self.model_name!r}: {m}, {len(self.edges):,} edges, {self.n_prompts} prompts, "
            f"metric {self.metric}: clean {self.clean:.4g}, corrupt {self.corrupt:.4g}; completeness "
            f"({self.completeness_of}) {self.completeness:.4g} vs M(clean) − M(corrupt) = {self.target:.4g}: "
            f"error {self.completeness_error:.3g} ({rel:.1%}))"
        )

    def to_dataframe(self) -> pd.DataFrame:
        cols: dict[str, Any] = {"score": self.scores.double().numpy()}
        if self.exact is not None:
            cols["exact"] = self.exact.double().numpy()
        return _edge_frame(self.edges, cols)

    def circuit(
        self,
        n: Optional[int] = None,
        *,
        threshold: Optional[float] = None,
        method: str = "top",
        absolute: bool = True,
        prune: bool = True,
    ) -> "EdgeCircuit":
        """The circuit of the ``n`` best edges (``method="top"`` or ``"greedy"`` from the metric) or of every edge
        with |score| ≥ ``threshold`` (a number > 0); ``prune`` then removes edges from unfed writers / into unproductive
        readers. ``absolute=False`` ranks by the signed score: the edges that support the metric most."""
        from interp.edges import _select

        check_bool("absolute", absolute)
        check_bool("prune", prune)
        if (n is None) == (threshold is None):
            raise ArgumentError(f"circuit(n={n!r}, threshold={threshold!r}): give exactly one of n= and threshold=")
        if method not in ("top", "greedy"):
            raise ArgumentError(f"method={method!r} must be 'top' or 'greedy'")
        if n is not None:
            n = check_int_min("n", n, 0)
            if n > len(self.edges):
                raise ArgumentError(f"n={n} is more than the graph's {len(self.edges)} edges")
        if threshold is not None:
            threshold = check_finite_float("threshold", threshold)
            if threshold <= 0:
                raise ArgumentError(
                    f"threshold={threshold!r} must be > 0: it keeps the edges with "
                    f"{'|score|' if absolute else 'score'} ≥ threshold, so {threshold!r} would keep "
                    f"{'every edge' if absolute else 'every edge that does not oppose the metric'}; "
                    "use n= for a number of edges"
                )
            if method == "greedy":
                raise ArgumentError("method='greedy' takes n=, not threshold=")
        g = _graph_of(self)
        if threshold is not None:
            keep = _select.above_threshold(self.scores, threshold, absolute=absolute)
            how = f"|score| ≥ {threshold:g}" if absolute else f"score ≥ {threshold:g}"
        elif method == "greedy":
            keep = _select.greedy(g, self.scores, n, absolute=absolute)  # type: ignore[arg-type]
            how = f"greedy {n} from the metric"
        else:
            keep = _select.top_n(self.scores, n, absolute=absolute)  # type: ignore[arg-type]
            how = f"top {n} by {'|score|' if absolute else 'score'}"
        chosen = int(keep.sum())
        if prune:
            keep = _select.prune(g, keep)
        idx = torch.nonzero(keep).flatten()
        return EdgeCircuit(
            edges=[self.edges[i] for i in idx.tolist()],
            scores=self.scores[idx].clone(),
            n_total=len(self.edges),
            selection=how + (", pruned" if prune else ""),
            model_name=self.model_name,
            pruned=chosen - int(keep.sum()),
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
        )

    def with_exact(self, patched: Any) -> "EdgeScores":
        """A copy whose ``exact`` holds, for the edges of an :func:`interp.edge_patch` result, M(clean) − M(patched)
        (the negative of its ``effect`` M(patched) − M(clean), so that it has the sign of the scores)."""
        labels = list(getattr(patched, "labels", []))
        eff = getattr(patched, "effect", None)
        if not labels or eff is None:
            raise ArgumentError("with_exact(patched) takes the PatchResult of interp.edge_patch(...)")
        pos = {e: i for i, e in enumerate(self.edges)}
        missing = [e for e in labels if e not in pos]
        if missing:
            raise ArgumentError(f"patched has edges that are not in these scores: {missing[:3]}")
        exact = self.exact.clone() if self.exact is not None else torch.full_like(self.scores, math.nan)
        exact[torch.tensor([pos[e] for e in labels], device=exact.device)] = -eff.to(exact.device, exact.dtype)
        return replace(self, exact=exact)

    def plot(self, **options: Any) -> Any:
        """The circuit viewer (:func:`interp.plots.circuit_graph_figure`, whose keywords ``options`` are)."""
        from interp.plots import circuit_graph_figure

        return circuit_graph_figure(self, **options)


@dataclass(frozen=True, eq=False)
class EdgeCircuit(Result):
    """A set of edges (a circuit), with the score each had where it was chosen from scores.

    ``edges`` edge labels; ``scores`` [n] (NaN for edges given without scores); ``n_total`` the graph's
    edge count; ``selection`` how it was chosen; ``pruned`` how many chosen edges pruning removed.
    Contract: ``circuit[edge]`` the edge's score, ``top`` by |score|, ``plot`` the circuit viewer.
    """

    label_column: ClassVar[str] = "edge"
    default_by: ClassVar[str] = "score"

    edges: list[str]
    scores: Tensor = field(repr=False)
    n_total: int
    selection: str = "given"
    model_name: str = ""
    pruned: int = 0
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0

    @property
    def labels(self) -> list[str]:
        return list(self.edges)

    @property
    def fraction(self) -> float:
        """The circuit's share of the graph's edges."""
        return len(self.edges) / self.n_total if self.n_total else math.nan

    @property
    def nodes(self) -> list[str]:
        """Writers and readers that appear in the circuit (writers first, in edge order)."""
        ws = dict.fromkeys(_split(e)[0] for e in self.edges)
        rs = dict.fromkeys(_split(e)[1] for e in self.edges)
        return list(ws) + [r for r in rs if r not in ws]

    def __len__(self) -> int:
        return len(self.edges)

    def __iter__(self):
        return iter(self.edges)

    def __repr__(self) -> str:
        return (
            f"EdgeCircuit({self.model_name!r}: {len(self.edges):,} of {self.n_total:,} edges "
            f"({self.fraction:.2%}), {self.selection})"
        )

    def _row(self, index: int) -> float:
        return float(self.scores[index])

    def to_dataframe(self) -> pd.DataFrame:
        return _edge_frame(self.edges, {"score": self.scores.double().numpy()})

    def plot(self, **options: Any) -> Any:
        """The circuit viewer (:func:`interp.plots.circuit_graph_figure`, whose keywords ``options`` are)."""
        from interp.plots import circuit_graph_figure

        return circuit_graph_figure(self, **options)


def _graph_of(scores: EdgeScores) -> Any:
    """The CircuitGraph whose edges ``scores`` lists (rebuilt from the labels: results never hold the model)."""
    from interp.edges._graph import graph_from_edges

    g = scores.__dict__.get("_graph")
    if g is None:
        g = graph_from_edges(
            scores.edges,
            model_name=scores.model_name,
            n_heads=scores.n_heads,
            n_kv_heads=scores.n_kv_heads,
            n_layers=scores.n_layers,
        )
        object.__setattr__(scores, "_graph", g)
    return g
