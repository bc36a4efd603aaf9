"""The induction circuit of an attention-only toy, with its heads found from their attention patterns.

Induction (Elhage et al. 2021, "Two-Layer Attention-Only Transformers"; Olsson et al. 2022,
section 2): at a repeated token x[q] = x[j], an induction head attends to key j + 1 and copies that
token. Its key there is built by K-composition with a previous-token head (which wrote x[j] into
position j + 1); its query and value read the current token's embedding. The heads are identified
mechanically, on ``<bos>`` + n distinct random words + the same words (repeated) and on uniform random
words (random)::

    prev_token_score(h) = mean_q A^h[q, q-1]        (random, q ≥ 1)
    induction_score(h)  = mean_q A^h[q, q-n+1]      (repeated, q ∈ [n+1, 2n])

P = {h : prev_token_score(h) ≥ threshold}, I = {h : induction_score(h) ≥ threshold, h after some P}.
The circuit's edges (interp labels; the metric's read is ``unembed``)::

    P → L.attn.k[I]                 for every P earlier than I     (K-composition)
    embed → L.attn.q[I], L.attn.v[I]                                (the current token; the copied token)
    I → unembed                                                     (the prediction)
    embed → L.attn.v[P]                                             (the token P moves forward)
    pos_embed → L.attn.q[P], L.attn.k[P]                            (P's positional attention)

The last two rows make the circuit complete (P's output must carry the previous token, so P's
inputs belong to it); for rotary models positions enter q and k inside the head and P's q/k edges
come from ``embed`` instead.
"""

from __future__ import annotations

from typing import Optional

import torch

from interp.errors import ArgumentError, UnsupportedOperationError
from interp.groundtruth._edges import TrueCircuit
from interp.labels import Edge, Embed, Head, HeadInput, Output
from interp.models import Model, describe_block
from interp.toy import logits_and_patterns, random_tokens, repeated_tokens

__all__ = ["induction_circuit", "induction_scores"]

_FIRST_WORD = 2  # the toys' vocabulary: <bos>, <unk>, words…


def induction_scores(
    model: Model, *, n: Optional[int] = None, batch: int = 100, seed: int = 0
) -> dict[str, torch.Tensor]:
    """``prev_token`` and ``induction`` scores [n_layers, n_heads] (see the module docstring)."""
    arch = model.arch
    if not arch.has_logits or describe_block(arch).has_mlp:
        raise UnsupportedOperationError(
            f"model {model.name!r}: induction_circuit reads attention-only toys with logits"
        )
    n = (arch.n_ctx - 1) // 2 if n is None else n
    if not isinstance(n, int) or not 2 <= n <= (arch.n_ctx - 1) // 2 or n > arch.d_vocab - _FIRST_WORD:
        raise ArgumentError(f"n={n!r} must be an int in [2, {min((arch.n_ctx - 1) // 2, arch.d_vocab - _FIRST_WORD)}]")
    g = torch.Generator().manual_seed(seed)
    rep = repeated_tokens(batch, n, arch.d_vocab, generator=g)
    rnd = random_tokens(batch, arch.n_ctx, arch.d_vocab, generator=g)
    _, pat_rep = logits_and_patterns(model, rep)  # [n_layers, batch, n_heads, q, k]
    _, pat_rnd = logits_and_patterns(model, rnd)
    q = torch.arange(n + 1, 2 * n + 1, device=pat_rep.device)
    qr = torch.arange(1, arch.n_ctx, device=pat_rnd.device)
    return {
        "induction": pat_rep[:, :, :, q, q - n + 1].mean(dim=(1, 3)).cpu(),
        "prev_token": pat_rnd[:, :, :, qr, qr - 1].mean(dim=(1, 3)).cpu(),
    }


def induction_circuit(
    model: Model, *, threshold: float = 0.5, n: Optional[int] = None, batch: int = 100, seed: int = 0
) -> TrueCircuit:
    """The induction circuit of an attention-only toy (e.g. ``toy-attn-only-2l``); see the module docstring.

    Raises :class:`UnsupportedOperationError` if no head reaches ``threshold`` as a previous-token
    head, or none after it as an induction head.
    """
    if not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ArgumentError(f"threshold={threshold!r} must be a number in (0, 1)")
    scores = induction_scores(model, n=n, batch=batch, seed=seed)
    prev, ind = scores["prev_token"], scores["induction"]
    P = [Head(l, h) for l, h in torch.nonzero(prev >= threshold).tolist()]
    if not P:
        raise UnsupportedOperationError(
            f"model {model.name!r} has no previous-token head: the largest score is "
            f"{float(prev.max()):.3f} < threshold={threshold}"
        )
    first = min(p.layer for p in P)
    I = [Head(l, h) for l, h in torch.nonzero(ind >= threshold).tolist() if l > first]
    if not I:
        raise UnsupportedOperationError(
            f"model {model.name!r} has no induction head after layer {first}: the largest "
            f"score there is {float(ind[first + 1 :].max()) if first + 1 < len(ind) else 0:.3f}"
        )

    def pscore(h: Head) -> str:
        return f"{h} prev-token {float(prev[h.layer, h.head]):.3f}"

    def iscore(h: Head) -> str:
        return f"{h} induction {float(ind[h.layer, h.head]):.3f}"

    rows: list[tuple[Edge, str]] = []
    positions = Embed("pos") if model.arch.positional == "learned" else Embed("token")
    for p in P:
        rows.append((Edge(Embed("token"), HeadInput(p.layer, "v", p.head)), f"token moved by {pscore(p)}"))
        for which in ("q", "k"):
            rows.append((Edge(positions, HeadInput(p.layer, which, p.head)), f"positional attention of {pscore(p)}"))
    for i in I:
        for p in P:
            if p.layer < i.layer:
                rows.append(
                    (
                        Edge(p, HeadInput(i.layer, "k", model.arch.kv_head(i.head))),
                        f"K-composition: {pscore(p)} → key of {iscore(i)}",
                    )
                )
        rows.append((Edge(Embed("token"), HeadInput(i.layer, "q", i.head)), f"current token, query of {iscore(i)}"))
        rows.append(
            (
                Edge(Embed("token"), HeadInput(i.layer, "v", model.arch.kv_head(i.head))),
                f"copied token, value of {iscore(i)}",
            )
        )
        rows.append((Edge(i, Output("unembed")), f"prediction of {iscore(i)}"))
    unique = dict(rows)  # GQA: heads sharing a KV head give the same k/v edge once
    order = sorted(unique, key=lambda e: (e.reader, e.writer))
    return TrueCircuit(
        name=f"{model.name}-induction",
        edges=tuple(order),
        via=tuple(unique[e] for e in order),
        convention=(
            f"previous-token heads (score ≥ {threshold} on random words) → k of induction heads (score "
            f"≥ {threshold} on repeated words); embed → their q and v; induction heads → unembed; the "
            f"previous-token heads' own inputs (token → v, positions → q, k)"
        ),
        details={
            "previous_token_heads": [str(p) for p in P],
            "induction_heads": [str(i) for i in I],
            "prev_token_score": prev.tolist(),
            "induction_score": ind.tolist(),
            "threshold": threshold,
            "seed": seed,
            "batch": batch,
        },
    )
