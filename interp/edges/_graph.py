"""The circuit graph of a model: writers, readers, and an edge from every writer to every later reader.

Writers (terms that join the residual stream), in program order::

    embed   pos_embed (learned positions)   type_embed (BERT)     the embedding parts
    L{l}.H{h}                                                      each head's write z_h W_O^h
    L{l}.mlp                                                       each MLP's output (b_out included)

Readers (linear maps that see the stream), in program order::

    L{l}.attn.q[H{h}]     each query head's q input
    L{l}.attn.k[H{g}]     each KV head's k input — under GQA one reader per KV head, shared by the
    L{l}.attn.v[H{g}]     n_heads / n_kv_heads query heads that read it (its k/v are computed once)
    L{l}.mlp.in           each MLP's input (a gated MLP's gate reads the same normalised stream)
    unembed | final       the metric's read: the logits, or an encoder's final hidden state

An edge w → r exists iff r sees w in the model's block program (:func:`interp.models.sees`): a head
is read by every later layer and, in a sequential block, by its own layer's MLP; an MLP by every later
layer; both by the metric. Biases (b_O, norm β) are constants, never writers, so never ablated.
Edges are listed reader by reader (program order), each reader's writers in program order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import pandas as pd
import torch
from torch import Tensor

from interp.errors import LabelError
from interp.labels import Edge, Embed, Head, HeadInput, Mlp, MlpInput, Output, as_label
from interp.models.internal import program_position
from interp.models import Model

__all__ = ["CircuitGraph", "circuit_graph", "WriterInfo", "ReaderInfo"]


@dataclass(frozen=True)
class WriterInfo:
    """One writer: ``kind`` "embed" | "head" | "mlp", its layer (−1 for embeddings), head (−1) and
    the engine site of its activation ("embed.token", "z", "mlp_out"...)."""

    label: str
    kind: str
    layer: int
    head: int
    site: str


@dataclass(frozen=True)
class ReaderInfo:
    """One reader: ``kind`` "q" | "k" | "v" | "mlp" | "out", its layer (n_layers for the metric's read)
    and head (query head for q, KV head for k/v, −1 otherwise)."""

    label: str
    kind: str
    layer: int
    head: int


def _writers(model: Model) -> list[WriterInfo]:
    a, w = model.arch, model.weights
    out = [WriterInfo(str(Embed("token")), "embed", -1, -1, "embed.token")]
    if w.W_pos is not None and a.positional == "learned":
        out.append(WriterInfo(str(Embed("pos")), "embed", -1, -1, "embed.pos"))
    if w.W_type is not None:
        out.append(WriterInfo(str(Embed("type")), "embed", -1, -1, "embed.type"))
    mlp = model.has_mlp
    for l in range(a.n_layers):
        out += [WriterInfo(str(Head(l, h)), "head", l, h, "z") for h in range(a.n_heads)]
        if mlp:
            out.append(WriterInfo(str(Mlp(l)), "mlp", l, -1, "mlp_out"))
    return out


def _readers(model: Model) -> list[ReaderInfo]:
    a = model.arch
    out: list[ReaderInfo] = []
    mlp = model.has_mlp
    for l in range(a.n_layers):
        out += [ReaderInfo(str(HeadInput(l, "q", h)), "q", l, h) for h in range(a.n_heads)]
        out += [ReaderInfo(str(HeadInput(l, "k", g)), "k", l, g) for g in range(a.n_kv_heads)]
        out += [ReaderInfo(str(HeadInput(l, "v", g)), "v", l, g) for g in range(a.n_kv_heads)]
        if mlp:
            out.append(ReaderInfo(str(MlpInput(l, "in")), "mlp", l, -1))
    out.append(ReaderInfo(str(Output("unembed" if a.has_logits else "final")), "out", a.n_layers, -1))
    return out


@dataclass(frozen=True, eq=False)
class CircuitGraph:
    """Every writer → reader edge of one model (see the module docstring).

    ``writers`` / ``readers`` are label strings in program order; ``edges`` the edge labels
    (``L0.H3→L1.attn.k[H2]``), reader by reader; ``edge_writer`` / ``edge_reader`` [n_edges] index
    ``writers`` / ``readers``; ``mask`` [n_writers, n_readers] is True where the edge exists.
    ``str(graph)`` gives the node and edge counts.
    """

    model_name: str
    writers: tuple[str, ...]
    readers: tuple[str, ...]
    edges: tuple[str, ...] = field(repr=False)
    edge_writer: Tensor = field(repr=False)
    edge_reader: Tensor = field(repr=False)
    mask: Tensor = field(repr=False)
    writer_info: tuple[WriterInfo, ...] = field(repr=False)
    reader_info: tuple[ReaderInfo, ...] = field(repr=False)
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    @property
    def n_nodes(self) -> int:
        """Writers + readers (a head counts as one writer and its q input; its KV head as k and v inputs)."""
        return len(self.writers) + len(self.readers)

    def __len__(self) -> int:
        return self.n_edges

    def __repr__(self) -> str:
        kv = (
            f", k/v readers per KV head ({self.n_kv_heads} KV heads for {self.n_heads} query heads)"
            if self.n_kv_heads != self.n_heads
            else ""
        )
        return (
            f"CircuitGraph({self.model_name!r}: {len(self.writers):,} writers, {len(self.readers):,} readers "
            f"({self.n_nodes:,} nodes), {self.n_edges:,} edges{kv})"
        )

    __str__ = __repr__

    def _lookup(self) -> dict[str, int]:
        cache = self.__dict__.get("_edge_pos")
        if cache is None:
            cache = {e: i for i, e in enumerate(self.edges)}
            object.__setattr__(self, "_edge_pos", cache)
        return cache

    def __contains__(self, edge: Any) -> bool:
        return (edge if isinstance(edge, str) else str(edge)) in self._lookup()

    def index(self, edge: Any, *, name: str = "edge") -> int:
        """Position of ``edge`` (an :class:`~interp.labels.Edge` or its text) in :attr:`edges`."""
        lab = as_label(edge, Edge, name=name)
        i = self._lookup().get(str(lab))
        if i is None:
            w, r = str(lab.writer), str(lab.reader)
            why = (
                f"writer {w!r} is not a writer of this model"
                if w not in self.writers
                else f"reader {r!r} is not a reader of this model"
                if r not in self.readers
                else f"{r!r} does not see {w!r} (it comes before it in the block program)"
            )
            raise LabelError(
                f"{name}={str(lab)!r} is not an edge of {self.model_name!r}: {why}; "
                f"edges look like {self.edges[0]!r}, {self.edges[-1]!r}"
            )
        return i

    def indices(self, edges: Iterable[Any], *, name: str = "edges") -> Tensor:
        """Positions [n] of ``edges`` in :attr:`edges` (a LabelError names the first that does not exist)."""
        return torch.tensor(
            [self.index(e, name=f"{name}[{i}]") for i, e in enumerate(edges)], dtype=torch.long, device="cpu"
        )

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge: edge, writer, reader, and the layers they sit in."""
        w = [self.writer_info[i] for i in self.edge_writer.tolist()]
        r = [self.reader_info[i] for i in self.edge_reader.tolist()]
        return pd.DataFrame(
            {
                "edge": list(self.edges),
                "writer": [x.label for x in w],
                "reader": [x.label for x in r],
                "writer_layer": [x.layer for x in w],
                "reader_layer": [x.layer for x in r],
            }
        )


def circuit_graph(model: Model) -> CircuitGraph:
    """The circuit graph of ``model``: its writers, readers and every writer → later-reader edge.

    Built once per model and kept on it (a 1B model's ~200k edge labels take ~0.3 s of Python), rebuilt when its
    architecture or weights object changes; the graph is shared between calls, so treat it as read-only.

    >>> g = circuit_graph(model)     # doctest: +SKIP
    >>> g                            # smollm2-135m: 301 writers, 481 readers, 70,651 edges
    """
    from interp.stream.internal import require_model

    require_model(model)
    w = model.weights
    # what the graph depends on: the block program and which embedding parts exist (not the weights' values)
    stamp = (model.name, model.arch, model.has_mlp, id(w), w.W_pos is None, w.W_type is None)
    graph: CircuitGraph = model.derived("_circuit_graph", stamp, lambda: _build(model))
    return graph


def _build(model: Model) -> CircuitGraph:
    """:func:`circuit_graph` without the cache."""
    a = model.arch
    writers, readers = _writers(model), _readers(model)
    # program order: embeddings before everything, the metric's read after everything
    last = 1 << 30
    wpos = [-1 if w.kind == "embed" else program_position(a, w.label) for w in writers]
    rpos = [last if r.kind == "out" else program_position(a, r.label) for r in readers]
    wp = torch.tensor(wpos, dtype=torch.long, device="cpu")  # the graph is host bookkeeping
    rp = torch.tensor(rpos, dtype=torch.long, device="cpu")
    mask = wp[:, None] < rp[None, :]  # [W, R]: the writer's event precedes the reader's
    ridx, widx = torch.nonzero(mask.T, as_tuple=True)  # reader-major
    edges = tuple(f"{writers[i].label}→{readers[j].label}" for i, j in zip(widx.tolist(), ridx.tolist()))
    return CircuitGraph(
        model_name=model.name,
        writers=tuple(w.label for w in writers),
        readers=tuple(r.label for r in readers),
        edges=edges,
        edge_writer=widx,
        edge_reader=ridx,
        mask=mask,
        writer_info=tuple(writers),
        reader_info=tuple(readers),
        n_layers=a.n_layers,
        n_heads=a.n_heads,
        n_kv_heads=a.n_kv_heads,
    )


_READER_ORDER = {"q": 0, "k": 1, "v": 2, "mlp": 3, "out": 4}


def _writer_info(text: str) -> WriterInfo:
    lab = as_label(text, (Embed, Head, Mlp), name="edge writer")
    if isinstance(lab, Embed):
        return WriterInfo(text, "embed", -1, -1, f"embed.{lab.which}")
    if isinstance(lab, Head):
        return WriterInfo(text, "head", lab.layer, lab.head, "z")
    return WriterInfo(text, "mlp", lab.layer, -1, "mlp_out")


def _reader_info(text: str, n_layers: int) -> ReaderInfo:
    lab = as_label(text, (HeadInput, MlpInput, Output), name="edge reader")
    if isinstance(lab, HeadInput):
        return ReaderInfo(text, lab.which, lab.layer, lab.head)
    if isinstance(lab, MlpInput):
        return ReaderInfo(text, "mlp", lab.layer, -1)
    return ReaderInfo(text, "out", n_layers, -1)


def graph_from_edges(
    edges: Iterable[str], *, model_name: str = "", n_layers: int = 0, n_heads: int = 0, n_kv_heads: int = 0
) -> CircuitGraph:
    """The graph spanned by ``edges`` (label strings), rebuilt without the model — for results, which never
    hold it. Writers and readers are ordered by layer and kind; ``mask`` marks the listed edges only."""
    edges = list(edges)
    pairs = [e.split("→") for e in edges]
    w_names = dict.fromkeys(p[0] for p in pairs)
    r_names = dict.fromkeys(p[1] for p in pairs)
    winfo = sorted(
        (_writer_info(t) for t in w_names),
        key=lambda w: (
            w.layer,
            {"embed": 0, "head": 1, "mlp": 2}[w.kind],
            w.head,
            {"embed.token": 0, "embed.pos": 1, "embed.type": 2}.get(w.site, 0),
        ),
    )
    rinfo = sorted((_reader_info(t, n_layers) for t in r_names), key=lambda r: (r.layer, _READER_ORDER[r.kind], r.head))
    wpos = {w.label: i for i, w in enumerate(winfo)}
    rpos = {r.label: i for i, r in enumerate(rinfo)}
    ew = torch.tensor([wpos[p[0]] for p in pairs], dtype=torch.long, device="cpu")
    er = torch.tensor([rpos[p[1]] for p in pairs], dtype=torch.long, device="cpu")
    mask = torch.zeros(len(winfo), len(rinfo), dtype=torch.bool, device="cpu")
    mask[ew, er] = True
    return CircuitGraph(
        model_name=model_name,
        writers=tuple(w.label for w in winfo),
        readers=tuple(r.label for r in rinfo),
        edges=tuple(edges),
        edge_writer=ew,
        edge_reader=er,
        mask=mask,
        writer_info=tuple(winfo),
        reader_info=tuple(rinfo),
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
    )
