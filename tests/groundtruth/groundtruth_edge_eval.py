"""A small exact edge-ablation forward for norm-free models (the tracr programs, the toys), by bridge hooks.

Removing an edge w → r replaces w's contribution to r's input only (Math 17 of docs/math.md, one
reader at a time): with x_r the reader's input in this run,

    x_r  ←  x_r − Σ_{w: (w → r) removed} (a_w − ā_w)

where a_w is w's write in this same run and ā_w its ablated value (given). Writers: ``embed``,
``pos_embed``, heads (z_h W_O^h), MLPs (their output minus b_out); readers: q/k/v of each head (the
head's projection is recomputed from x_r), each MLP's input, ``unembed``. Biases are never removed.
This is written for the tests independently of the library's edge code: it needs ``norm == "none"``
(then every read point is the residual itself).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
from torch import Tensor

from interp.labels import Edge, Embed, Head, HeadInput, Mlp, MlpInput, Output


def all_edges(model: Any) -> list[Edge]:
    """Every writer → reader pair where the writer runs before the reader."""
    a = model.arch
    writers: list[tuple[Any, float]] = [(Embed("token"), -1), (Embed("pos"), -1)]
    readers: list[tuple[Any, float]] = []
    for l in range(a.n_layers):
        writers += [(Head(l, h), 2 * l) for h in range(a.n_heads)]
        readers += [(HeadInput(l, w, h), 2 * l) for h in range(a.n_heads) for w in "qkv"]
        if not a.attn_only:
            writers.append((Mlp(l), 2 * l + 1))
            readers.append((MlpInput(l, "in"), 2 * l + 1))
    readers.append((Output("unembed"), 2 * a.n_layers))
    return [Edge(w, r) for w, tw in writers for r, tr in readers if tw < tr]


def writer_outputs(model: Any, tokens: Tensor) -> dict[str, Tensor]:
    """Each writer's write a_w [batch, pos, d_model] in a plain run (for ablated values)."""
    return _run(model, tokens, removed=(), ablated={})[1]


def run_with_edges(model: Any, tokens: Tensor, *, removed: Iterable[Edge], ablated: Mapping[str, Tensor]) -> Tensor:
    """Logits with the ``removed`` edges' writes replaced by ``ablated[str(writer)]`` at their readers."""
    return _run(model, tokens, removed=removed, ablated=ablated)[0]


def _run(model: Any, tokens: Tensor, *, removed: Iterable[Edge], ablated: Mapping[str, Tensor]):
    W, a = model.weights, model.arch
    assert a.norm == "none", "this helper reads the residual directly: norm-free models only"
    by_reader: dict[str, list[str]] = {}
    for e in removed:
        by_reader.setdefault(str(e.reader), []).append(str(e.writer))
    writes: dict[str, Tensor] = {}
    resid_pre: dict[int, Tensor] = {}

    def delta(reader: str) -> Any:
        ws = by_reader.get(reader, [])
        return sum((writes[w] - ablated[w] for w in ws), torch.zeros(()))

    def keep(name: str):
        def hook(t: Tensor, hook: Any) -> None:
            writes[name] = t.detach().clone()

        return hook

    def keep_resid(l: int):
        def hook(t: Tensor, hook: Any) -> None:
            resid_pre[l] = t.detach().clone()

        return hook

    def heads_out(l: int):
        def hook(z: Tensor, hook: Any) -> None:  # z [batch, pos, n_heads, d_head]
            for h in range(a.n_heads):
                writes[str(Head(l, h))] = z[:, :, h].detach() @ W.W_O[l, h]

        return hook

    def mlp_out(l: int):
        def hook(t: Tensor, hook: Any) -> None:
            writes[str(Mlp(l))] = t.detach() - W.b_out[l]

        return hook

    def qkv(l: int, which: str):
        M, b = {"q": (W.W_Q, W.b_Q), "k": (W.W_K, W.b_K), "v": (W.W_V, W.b_V)}[which]

        def hook(t: Tensor, hook: Any) -> Tensor:  # [batch, pos, n_heads, d_head]
            out = t.clone()
            for h in range(t.shape[2]):
                reader = str(HeadInput(l, which, h))
                if reader in by_reader:
                    out[:, :, h] = (resid_pre[l] - delta(reader)) @ M[l, h] + b[l, h]
            return out

        return hook

    def reads(reader: str):
        def hook(t: Tensor, hook: Any) -> Tensor:
            return t - delta(reader) if reader in by_reader else t

        return hook

    hooks = [("embed.hook_out", keep("embed")), ("pos_embed.hook_out", keep("pos_embed"))]
    for l in range(a.n_layers):
        hooks.append((f"blocks.{l}.hook_in", keep_resid(l)))
        hooks += [(f"blocks.{l}.attn.{w}.hook_out", qkv(l, w)) for w in "qkv"]
        hooks.append((f"blocks.{l}.attn.hook_z", heads_out(l)))
        if not a.attn_only:
            hooks.append((f"blocks.{l}.mlp.hook_in", reads(str(MlpInput(l, "in")))))
            hooks.append((f"blocks.{l}.mlp.hook_out", mlp_out(l)))
    hooks.append(("unembed.hook_in", reads("unembed")))
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=hooks):
        logits = model.bridge(tokens.to(model.device))
    return logits, writes
