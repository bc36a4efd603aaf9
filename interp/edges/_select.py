"""Choosing a circuit from edge scores: top-n, threshold, greedy from the metric, and node-level pruning.

As the EAP-IG reference code (hannamw/EAP-IG ``graph.py``) does:

* **top-n** — the n edges with the largest |score|; with ``absolute=False`` the largest score: the edges
  that support the metric most (scores estimate M(clean) − M(edge corrupted)), which is the reference code's
  signed ranking (its metric is a loss, −M, and its score the negative of interp's);
* **threshold** — every edge with |score| ≥ τ (score ≥ τ when not ``absolute``);
* **greedy** — start at the metric's read; repeatedly take the best-scoring edge into a reader already
  in the circuit, then make the writer's own readers (a head's q, its KV head's k and v; an MLP's
  input) candidates too, until n edges;
* **pruning** (applied after each, to a fixpoint) — a component is *fed* if some circuit edge enters one
  of its readers (embeddings always are) and *productive* if its writer has a circuit edge to a productive
  component's reader (the metric always is); an edge survives iff its writer is fed and its reader belongs
  to a productive component. Under GQA a KV head's k/v reader belongs to every query head that shares it.

Everything works on edge indices of a :class:`~interp.edges.CircuitGraph`.
"""

from __future__ import annotations

import heapq
from typing import Any

import torch
from torch import Tensor

from interp.edges._graph import CircuitGraph
from interp.labels import Head, Mlp

__all__ = ["top_n", "above_threshold", "greedy", "prune"]


def _key(scores: Tensor, absolute: bool) -> Tensor:
    """|score|, or the signed score (the drop of the metric the edge's corruption causes) when not ``absolute``."""
    s = scores.double()
    s = s.abs() if absolute else s
    return torch.nan_to_num(s, nan=float("-inf"))


def top_n(scores: Tensor, n: int, *, absolute: bool = True) -> Tensor:
    """Bool mask [n_edges] of the ``n`` best edges (ties: the earlier edge)."""
    key = _key(scores, absolute)
    keep = torch.zeros(scores.shape[0], dtype=torch.bool, device=scores.device)
    if n > 0:
        order = torch.sort(key, descending=True, stable=True).indices[:n]
        keep[order] = True
    return keep


def above_threshold(scores: Tensor, tau: float, *, absolute: bool = True) -> Tensor:
    """Bool mask [n_edges] of the edges with |score| ≥ τ (score ≥ τ when not ``absolute``)."""
    return _key(scores, absolute) >= tau


def _components(g: CircuitGraph) -> tuple[list[str], list[int], list[list[int]]]:
    """(component names, component of each writer, components of each reader).

    Components: "input" (the embeddings), each head "L{l}.H{h}", each MLP "L{l}.mlp", and "metric"."""
    names: list[str] = ["input", "metric"]
    index = {"input": 0, "metric": 1}

    def comp(name: str) -> int:
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    w_comp = [0 if w.kind == "embed" else comp(w.label) for w in g.writer_info]
    group = g.n_heads // g.n_kv_heads if g.n_kv_heads else 1
    r_comp: list[list[int]] = []
    for r in g.reader_info:
        if r.kind == "out":
            r_comp.append([1])
        elif r.kind == "q":
            r_comp.append([comp(str(Head(r.layer, r.head)))])
        elif r.kind in ("k", "v"):
            r_comp.append([comp(str(Head(r.layer, h))) for h in range(r.head * group, (r.head + 1) * group)])
        else:
            r_comp.append([comp(str(Mlp(r.layer)))])
    return names, w_comp, r_comp


def prune(g: CircuitGraph, keep: Tensor) -> Tensor:
    """``keep`` [n_edges] with edges from unfed writers and into unproductive readers removed, to a fixpoint."""
    names, w_comp, r_comp = _components(g)
    ew, er = g.edge_writer.tolist(), g.edge_reader.tolist()
    keep = keep.clone()
    while True:
        idx = torch.nonzero(keep).flatten().tolist()
        fed = {0}
        for i in idx:
            fed.update(r_comp[er[i]])
        productive = {1}
        changed = True
        while changed:  # edges are reader-major, so one pass from the last reader backwards settles it
            changed = False
            for i in reversed(idx):
                c = w_comp[ew[i]]
                if c not in productive and any(x in productive for x in r_comp[er[i]]):
                    productive.add(c)
                    changed = True
        new = keep.clone()
        for i in idx:
            if w_comp[ew[i]] not in fed or not any(c in productive for c in r_comp[er[i]]):
                new[i] = False
        if torch.equal(new, keep):
            return keep
        keep = new


def greedy(g: CircuitGraph, scores: Tensor, n: int, *, absolute: bool = True) -> Tensor:
    """Bool mask [n_edges]: ``n`` edges grown from the metric's read, best candidate first (module docstring)."""
    key = _key(scores, absolute).tolist()
    ew, er = g.edge_writer.tolist(), g.edge_reader.tolist()
    into: dict[int, list[int]] = {}
    for i, r in enumerate(er):
        into.setdefault(r, []).append(i)
    readers_of: dict[int, list[int]] = {}  # writer -> the readers of its own component
    names, w_comp, r_comp = _components(g)
    comp_readers: dict[int, list[int]] = {}
    for r, cs in enumerate(r_comp):
        for c in cs:
            comp_readers.setdefault(c, []).append(r)
    for wi, c in enumerate(w_comp):
        readers_of[wi] = [] if c == 0 else comp_readers.get(c, [])
    keep = torch.zeros(len(ew), dtype=torch.bool)
    heap: list[tuple[float, int]] = []
    seen_readers: set[int] = set()

    def open_reader(r: int) -> None:
        if r in seen_readers:
            return
        seen_readers.add(r)
        for i in into.get(r, []):
            heapq.heappush(heap, (-key[i], i))

    open_reader(g.reader_info.index(next(r for r in g.reader_info if r.kind == "out")))
    taken = 0
    while heap and taken < n:
        _, i = heapq.heappop(heap)
        if keep[i]:
            continue
        keep[i] = True
        taken += 1
        for r in readers_of[ew[i]]:
            open_reader(r)
    return keep


def describe(selection: str, **kw: Any) -> str:
    """A one-line description of a selection, for results."""
    return selection + "".join(f", {k}={v}" for k, v in kw.items() if v is not None)
