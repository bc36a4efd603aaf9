"""A head's OV and QK circuits, kept factored (Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits", §"Attention heads are independent and additive" / "OV and QK circuits").

Row-vector (transformer-lens) convention, for query head h of layer l reading KV head
g = h // (n_heads / n_kv_heads) (GQA; docs/math.md, conventions):

    OV^h   = W_V^g W_O^h                        [d_model, d_model], rank ≤ d_head
    QK^h   = W_Q^h W_K^gᵀ                       [d_model, d_model]; score = x_q QK x_kᵀ / sqrt(d_head)
    QK^h_Δ = W_Q^h M_Δ W_K^gᵀ                   rotary models, query Δ positions after the key
    full OV = W_E OV^h W_U                      [d_vocab, d_vocab]  (still factored: A = W_E W_V, B = W_O W_U)
              (``embedding="effective"``: W_E + MLP_0(N2_0(W_E)) in place of W_E; ``_embedding``)
    full QK = W_E QK^h W_Eᵀ                     [d_vocab, d_vocab]

with the norm folding of :mod:`interp.circuits._common` (``fold_norms=True``: read weights carry
the gain of the norm in front of them, LayerNorm models' writes are centred). The attention
scale 1/sqrt(d_head) and all biases are left out, as in transformer-lens's ``model.QK``/``.OV``.
Rotary models without ``rel_pos`` get ``Circuit.note`` = :data:`POSITION_NOTE`.
"""

from __future__ import annotations

from typing import Optional

from interp._validate import check_bool
from interp.errors import ArgumentError
from interp.circuits._common import (
    check_model,
    DEFAULT_MAX_BYTES,
    check_head,
    check_layer,
    convention,
    folded_qkv,
    fold_write,
    folded_unembed,
    post_gain,
)
from interp.circuits._embedding import effective_embedding
from interp.circuits._factored import POSITION_NOTE, Circuit
from interp.labels import Head
from interp.circuits._rotary import relative_rotation
from interp.models import Model

__all__ = ["ov_circuit", "qk_circuit"]


def ov_circuit(
    model: Model,
    layer: int,
    head: int,
    *,
    full: bool = False,
    fold_norms: bool = True,
    embedding: str = "raw",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Circuit:
    """The OV circuit of query head ``head`` in ``layer``: W_V^g W_O^h, or W_E W_V^g W_O^h W_U if ``full``.

    Returns a :class:`Circuit` (a transformer-lens FactoredMatrix); its ``.AB`` is capped at
    ``max_bytes``. ``full=True`` needs an unembedding (UnsupportedOperationError otherwise).
    ``embedding`` (``full=True`` only): ``"raw"`` starts the full circuit from the token embedding
    W_E (whose Σλ/Σ|λ| is the copying score); ``"effective"`` from
    :func:`~interp.circuits.effective_embedding`, W_E + MLP_0(N2_0(W_E)) — the token embedding
    through block 0's MLP, which is what later heads actually read.
    """
    check_model(model)
    layer, head = check_layer(model, layer), check_head(model, head)
    check_bool("full", full)
    check_bool("fold_norms", fold_norms)
    if embedding not in ("raw", "effective"):
        raise ArgumentError(
            f"embedding={embedding!r}; allowed: 'raw' (the token embedding W_E) or 'effective' "
            "(W_E + MLP_0(N2_0(W_E)), the token embedding through block 0's MLP)"
        )
    if embedding != "raw" and not full:
        raise ArgumentError(
            f"embedding={embedding!r} needs full=True: only the full circuit W_E W_OV W_U starts from an embedding"
        )
    g = model.arch.kv_head(head)
    _, _, W_V = folded_qkv(model, fold_norms, layer=layer)
    pa = post_gain(model, "attn")
    W_O = fold_write(model, model.weights.W_O[layer], fold_norms, None if pa is None else pa[layer])
    A, B = W_V[g], W_O[head]  # [d_model, d_head], [d_head, d_model]
    label = f"{Head(layer, head)} OV"
    if full:
        B = B @ folded_unembed(model, fold_norms)  # [d_head, d_vocab]
        if embedding == "effective":
            A = effective_embedding(model, fold_norms=fold_norms) @ A  # [d_vocab, d_head]
            label = f"{Head(layer, head)} full OV (W_E,eff … W_U)"
        else:
            A = fold_write(model, model.weights.W_E, fold_norms) @ A  # [d_vocab, d_head]
            label = f"{Head(layer, head)} full OV (W_E … W_U)"
    return Circuit(
        A,
        B,
        label=label,
        convention=convention(model, fold_norms),
        max_bytes=max_bytes,
        layer=layer,
        head=head,
        kv_head=g,
        embedding=embedding if full else None,
    )


def qk_circuit(
    model: Model,
    layer: int,
    head: int,
    *,
    full: bool = False,
    rel_pos: Optional[int] = None,
    fold_norms: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Circuit:
    """The QK circuit of query head ``head`` in ``layer``: W_Q^h W_K^gᵀ (× W_E on both sides if ``full``).

    ``rel_pos=Δ`` (rotary models only) folds in the RoPE rotation between a query and a key Δ
    positions apart: W_Q^h M_Δ W_K^gᵀ, so ``x_q @ circuit.AB @ x_k`` / sqrt(d_head) is the
    bias-free attention score. Rotary models without ``rel_pos`` get a ``.note`` saying that QK
    ignores position. ``rel_pos`` on a non-rotary model raises ArgumentError.

    With a QK-norm the folded circuit is W_Q^h diag(g_q^h) M_Δ diag(g_k^g) W_K^gᵀ: the score up to the
    positive per-position scalars 1/(σ_q,i σ_k,j) (docs/math.md §6). Under a projection-wide QK-norm
    (OLMo 2) σ_q is the RMS of every head's query at i, so the circuit is head h's bilinear form with the
    other heads' share of σ_q held fixed.
    """
    check_model(model)
    layer, head = check_layer(model, layer), check_head(model, head)
    check_bool("full", full)
    check_bool("fold_norms", fold_norms)
    g = model.arch.kv_head(head)
    W_Q, W_K, _ = folded_qkv(model, fold_norms, layer=layer)
    A, Bt = W_Q[head], W_K[g]  # [d_model, d_head] each
    note, label = "", f"{Head(layer, head)} QK"
    if rel_pos is not None:
        M = relative_rotation(model, rel_pos, layer).to(A.dtype).to(A.device)  # [d_head, d_head]
        A = A @ M
        label += f" (rel_pos={rel_pos})"
    elif model.arch.positional == "rotary":
        note = POSITION_NOTE
    if full:
        W_E = fold_write(model, model.weights.W_E, fold_norms)
        A, Bt = W_E @ A, W_E @ Bt  # [d_vocab, d_head]
        label = label.replace(" QK", " full QK (W_E … W_Eᵀ)")
    return Circuit(
        A,
        Bt.transpose(-2, -1),
        label=label,
        note=note,
        convention=convention(model, fold_norms),
        max_bytes=max_bytes,
        layer=layer,
        head=head,
        kv_head=g,
        rel_pos=rel_pos,
    )
