"""QK attribution: why a head attends where it does, in the nodes of the attribution graph.

In the replacement model (attention patterns and norm scales frozen at the real forward, each MLP write held
as its transcoder's features plus the error node) the stream entering layer l is affine in the graph's
sources — token embeddings, feature activations, error nodes — so it is Σ_i c_i + c_0 at every position. A
head's query at position t and its key at position s are affine images of those streams: the projection
(q = N1(x_t) W_Q^h + b_Q), the QK-norm with its scale σ frozen at the real forward (q ↦ γ ⊙ q / σ_q), and
the rotary rotation R_t (linear; R_s for the key). Hence, with q_i the image of source i's contribution to
x_t (and q_0 that of every constant: biases, b_dec, norm offsets, b_Q) and k_j likewise at s,

    score(t, s) = scale · q · k = Σ_{i, j ∈ sources ∪ {bias}} scale · q_i · k_j,

exactly (bilinear, no cross terms left out). Each q_i and k_j is computed by one batched backward pass per
side (a one-hot gradient per coordinate of the head's rotated q and k), never by materialising Jacobians.
With a cross-layer transcoder (CLT) a feature of layer k writes a_f W_dec[k → j][f] into the MLP output of every
layer j ≥ k: its image at layer l sums those writes over k ≤ j < l (the stream entering layer l holds the MLP
outputs of the layers below it), and layer j's error node is the MLP's write minus the CLT's joint reconstruction.
Where the model soft-caps its scores (Gemma 2: c·tanh(score / c)) the decomposed score is the one before
the cap, and the result holds both. docs/math.md §29.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_int_range, check_not_inference_mode
from interp.engine.internal import allowed_keys, apply_rotary
from interp.errors import ArgumentError
from interp.features._prompt import one_prompt
from interp.features._replacement import RealRun, check_replaceable, real_forward
from interp.dictionaries import CrossLayerTranscoder, Transcoder
from interp.labels import Feature, FeatureError, Head
from interp.models import Model
from interp.stream.internal import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["QKAttribution", "qk_attribution"]


def qk_attribution(
    model: Model,
    prompt: Union[str, Tensor],
    transcoders: Union[list[Transcoder], CrossLayerTranscoder],
    layer: int,
    head: int,
    query_pos: int = -1,
    key_pos: int = 0,
) -> "QKAttribution":
    """The pre-softmax score of head ``head`` of layer ``layer`` at (``query_pos``, ``key_pos``) split into
    query-side × key-side terms of the attribution graph's nodes (module docstring): features and error
    nodes of the layers below ``layer``, token embeddings, and ``bias`` (every constant). ``transcoders``: one per
    layer, or a :class:`~interp.features.CrossLayerTranscoder` (a feature's image sums its writes into the layers
    below ``layer``). The pair must be one the head attends to (causal, inside a sliding window)."""
    # 1. the arguments, and a pair the head attends to
    require_model(model)
    check_not_inference_mode("qk_attribution")
    check_replaceable(model, transcoders)
    tokens, mask = one_prompt(model, prompt)
    layer, head, qp, kp = _pair(model, tokens.shape[1], layer, head, query_pos, key_pos, tokens.device)
    # 2. the real forward read for the replacement model, and the head's query and key maps with its frozen scales
    real = real_forward(model, tokens, mask, transcoders, capture={"q", "k"})
    h = _HeadMaps.of(real, layer, head, qp, kp)
    # 3. the model's own score, from the engine's q and k (live QK-norm)
    score = h.score()
    # 4. every node's image (scale · q_i, k_i): the constants, then the sources by one batched backward
    labels, V = _images(real, h, _source_grads(real, h))
    # 5. the terms: the nodes with a nonzero image on each side, their products and the closure
    dh = model.arch.d_head
    with torch.no_grad():
        Q, K = V[:, :dh], V[:, dh:]
        qi = (Q != 0).any(1).nonzero(as_tuple=True)[0]
        ki = (K != 0).any(1).nonzero(as_tuple=True)[0]
        Q, K = Q[qi], K[ki]
        M = Q @ K.T
        closure = abs(float(M.sum()) - score)
        relative = closure / max(float(M.abs().sum()), torch.finfo(real.dtype).tiny)
    c = model.arch.attn_softcap
    return QKAttribution(
        q_terms=Q,
        k_terms=K,
        q_labels=[labels[i] for i in qi.tolist()],
        k_labels=[labels[i] for i in ki.tolist()],
        score=score,
        capped_score=(float(c * torch.tanh(torch.tensor(score / c))) if c else score),
        softcap=float(c),
        closure_error=closure,
        relative_error=relative,
        layer=layer,
        head=head,
        query_pos=qp,
        key_pos=kp,
        tokens=tokens[0].tolist(),
        model_name=model.name,
    )


def _pair(
    model: Model, n: int, layer: Any, head: Any, query_pos: Any, key_pos: Any, device: Any
) -> tuple[int, int, int, int]:
    """(layer, head, query position, key position) validated, positions made non-negative; a pair the head does not
    attend to (a later key, or one outside its sliding window) is an :class:`ArgumentError`."""
    a = model.arch
    layer = check_int_range("layer", layer, 0, a.n_layers)
    head = check_int_range("head", head, 0, a.n_heads)
    qp = check_int_range("query_pos", query_pos, -n, n) % n
    kp = check_int_range("key_pos", key_pos, -n, n) % n
    ok = allowed_keys(n, n, causal=a.causal, window=a.window(layer), device=device)
    if not bool(ok[qp, kp]):
        win = f", and within its sliding window of {a.window(layer)}" if a.window(layer) else ""
        raise ArgumentError(
            f"key_pos={kp} is not attended from query_pos={qp} by layer {layer} (keys must be at or before "
            f"the query{win}); the score there is masked"
        )
    return layer, head, qp, kp


@dataclass
class _HeadMaps:
    """One head's query at ``qp`` and key at ``kp`` as maps of what the attention reads (N1 of the frozen stream):
    the projection, the QK-norm with its scale σ frozen at the real forward (``sq``, ``sk``; None without QK-norm)
    and the rotation. ``q_raw`` / ``k_raw``: the real forward's q and k [n, heads, d_head] before QK-norm and
    rotation."""

    real: RealRun
    layer: int
    head: int
    kvh: int
    qp: int
    kp: int
    scale: float
    cos_sin: Optional[tuple[Tensor, Tensor]]
    q_raw: Tensor
    k_raw: Tensor
    args_q: tuple[Any, ...]
    args_k: tuple[Any, ...]

    @classmethod
    def of(cls, real: RealRun, layer: int, head: int, qp: int, kp: int) -> "_HeadMaps":
        fr, dt = real.frozen, real.dtype
        a, e, w = fr.a, fr.e, fr.w
        kvh = a.kv_head(head)
        cos_sin = e.rope(real.emb.shape[0], layer) if a.positional == "rotary" else None
        q_raw = real.cache.acts["q"][layer][0].to(dt)  # type: ignore[index]  # [n, H, dh]
        k_raw = real.cache.acts["k"][layer][0].to(dt)  # type: ignore[index]  # [n, Hkv, dh]
        sq = sk = gq = gk = None
        if a.qk_norm:  # the QK-norm scales the real q and k had
            dims = (-1,) if getattr(a, "qk_norm_scope", "head") == "head" else (-2, -1)
            sq = (q_raw[qp].pow(2).mean(dims, keepdim=True) + a.norm_eps).sqrt()
            sk = (k_raw[kp].pow(2).mean(dims, keepdim=True) + a.norm_eps).sqrt()
            sq, sk = (sq[head] if sq.shape[0] > 1 else sq[0]), (sk[kvh] if sk.shape[0] > 1 else sk[0])
            gq, gk = w.q_norm_w[layer], w.k_norm_w[layer]  # type: ignore[index]
            gq, gk = (gq[head] if gq.ndim == 2 else gq), (gk[kvh] if gk.ndim == 2 else gk)
        args_q = (qp, w.W_Q[layer, head], w.b_Q[layer, head], gq, sq)
        args_k = (kp, w.W_K[layer, kvh], w.b_K[layer, kvh], gk, sk)
        return cls(real, layer, head, kvh, qp, kp, e.scales[layer], cos_sin, q_raw, k_raw, args_q, args_k)

    def side(self, x: Tensor, p: int, W: Tensor, b: Tensor, gain: Optional[Tensor], sigma: Optional[Tensor]) -> Tensor:
        """One head's rotated (QK-normed) query or key at position p from the frozen stream's N1 [B, n, d]."""
        a, dt = self.real.frozen.a, self.real.dtype
        v = x[:, p] @ W + b  # [B, dh]
        if sigma is not None:  # QK-norm with its scale frozen at the real forward
            v = v / sigma * gain  # type: ignore[operator]  # gain is set with sigma
        if self.cos_sin is not None:
            cos, sin = self.cos_sin
            v = apply_rotary(v, cos[p].to(dt), sin[p].to(dt), interleaved=a.rotary_interleaved)
        return v

    def images(self, h1: Tensor) -> Tensor:
        """(scale · q, k) [2 d_head] of what the attention reads, h1 [1, n, d]."""
        return torch.cat([self.scale * self.side(h1, *self.args_q)[0], self.side(h1, *self.args_k)[0]])

    def score(self) -> float:
        """The model's own score scale · q · k, from the engine's q and k with its QK-norm (live scales) and
        rotation."""
        a, e, w, dt = self.real.frozen.a, self.real.frozen.e, self.real.frozen.w, self.real.dtype
        qp, kp, layer = self.qp, self.kp, self.layer
        with torch.no_grad():
            qr, kr = self.q_raw[qp][None], self.k_raw[kp][None]
            if a.qk_norm:
                qr, kr = e.head_norm(qr.clone(), w.q_norm_w[layer]), e.head_norm(kr.clone(), w.k_norm_w[layer])  # type: ignore[index]
            qr, kr = qr[0, self.head], kr[0, self.kvh]
            if self.cos_sin is not None:
                cos, sin = self.cos_sin
                qr = apply_rotary(qr, cos[qp].to(dt), sin[qp].to(dt), interleaved=a.rotary_interleaved)
                kr = apply_rotary(kr, cos[kp].to(dt), sin[kp].to(dt), interleaved=a.rotary_interleaved)
            return float(self.scale * (qr @ kr))


def _source_grads(real: RealRun, h: _HeadMaps) -> tuple[Optional[Tensor], ...]:
    """∂(scale · q, k)/∂source for the embeddings and each MLP leaf of the layers below the head's, [2 d_head, 1, n,
    d] each: one batched backward of the 2·d_head coordinates."""
    fr = real.frozen
    with torch.enable_grad():  # also under a caller's torch.set_grad_enabled(False)
        src_e = real.emb.detach()[None].clone().requires_grad_(True)
        leaves = [lv.detach()[None].clone().requires_grad_(True) for lv in real.leaves()[: h.layer]]
        y = h.images(fr.attn_input(h.layer, fr.resid(src_e, leaves, h.layer)))  # [2 dh]
        go_ = torch.eye(y.shape[0], dtype=real.dtype, device=y.device)
        return torch.autograd.grad(y, [src_e, *leaves], grad_outputs=go_, is_grads_batched=True, allow_unused=True)


def _feature_images(real: RealRun, grads: tuple[Optional[Tensor], ...], k: int, layer: int) -> Optional[Tensor]:
    """The images [m, 2 d_head] of layer k's active features: a_f Σ_j ∂y/∂m_{j,p} · W_dec[k → j][f] over the layers
    j < ``layer`` the feature writes to (its own; with a CLT the later ones too). None: no write reaches the head."""
    p_idx, f_idx = real.feats[k]
    total: Optional[Tensor] = None
    for j, W in real.writes(k, f_idx):
        g = grads[1 + j] if j < layer else None
        if g is None:
            continue
        term = (g[:, 0][:, p_idx] * W).sum(-1)
        total = term if total is None else total + term
    return None if total is None else (total * real.acts[k]).T


def _images(real: RealRun, h: _HeadMaps, grads: tuple[Optional[Tensor], ...]) -> tuple[list[str], Tensor]:
    """Every node's label and image (scale · q_i | k_i) [nodes, 2 d_head]: per layer below the head's its features
    and error nodes, then the token embeddings, then ``bias`` (the frozen model with every source zero)."""
    fr, n = real.frozen, real.emb.shape[0]
    labels: list[str] = []
    vecs: list[Tensor] = []
    with torch.no_grad():
        for l in range(h.layer):
            feats = _feature_images(real, grads, l, h.layer)
            if feats is not None:
                p_idx, f_idx = real.feats[l]
                labels += [str(Feature(l, f, p)) for p, f in zip(p_idx.tolist(), f_idx.tolist())]
                vecs.append(feats)
            g = grads[1 + l]
            if g is not None:
                labels += [str(FeatureError(l, p)) for p in range(n)]
                vecs.append((g[:, 0] * real.errs[l]).sum(-1).T)
        labels += [f"embed@{p}" for p in range(n)]
        vecs.append((grads[0][:, 0] * real.emb).sum(-1).T)  # type: ignore[index]
        zero = torch.zeros(1, n, real.emb.shape[1], dtype=real.dtype, device=real.emb.device)
        labels.append("bias")
        vecs.append(h.images(fr.attn_input(h.layer, fr.resid(zero, [zero] * h.layer, h.layer)))[None])
    return labels, torch.cat(vecs)


@dataclass(frozen=True)
class QKAttribution(Result):
    """A head's pre-softmax score at one (query, key) pair split into query-side × key-side node terms
    (:func:`qk_attribution`). ``q_terms`` [Nq, d_head]: each node's image in the head's rotated, QK-normed
    query times the score scale; ``k_terms`` [Nk, d_head] in its key; :attr:`matrix` = q_terms k_termsᵀ
    [Nq, Nk] sums to ``score`` (the score before any soft-cap; ``capped_score`` = c·tanh(score/c) with
    ``softcap`` c, else the score), to ``closure_error`` (``relative_error`` divides it by Σ|terms|). Rows of
    the table: one per (query node, key node) pair, labelled ``"<query node> · <key node>"``."""

    q_terms: Tensor
    k_terms: Tensor
    q_labels: list[str]
    k_labels: list[str]
    score: float
    capped_score: float
    softcap: float
    closure_error: float
    relative_error: float
    layer: int
    head: int
    query_pos: int
    key_pos: int
    tokens: list[int]
    model_name: str

    label_column: ClassVar[str] = "pair"
    default_by: ClassVar[str] = "value"
    default_absolute: ClassVar[bool] = True

    @property
    def matrix(self) -> Tensor:
        """[Nq, Nk]: the term scale · q_i · k_j of each pair."""
        return self.q_terms @ self.k_terms.T

    def __repr__(self) -> str:
        """A short summary: the head, the pair, the score, the closure and the three largest terms."""
        top = self.top(3)
        terms = ", ".join(f"{p} ({v:.3g})" for p, v in zip(top["pair"], top["value"]))
        cap = f" (capped {self.capped_score:.4g})" if self.softcap else ""
        return (
            f"QKAttribution({self.model_name!r}, {Head(self.layer, self.head)} query {self.query_pos} → key "
            f"{self.key_pos}: score {self.score:.4g}{cap} = {len(self.q_labels)} × {len(self.k_labels)} terms; "
            f"closure_error={self.closure_error:.2e}, relative_error={self.relative_error:.2e}; largest: {terms})"
        )

    @property
    def labels(self) -> list[str]:
        return [f"{q} · {k}" for q in self.q_labels for k in self.k_labels]

    def to_dataframe(self) -> pd.DataFrame:
        Nq, Nk = len(self.q_labels), len(self.k_labels)
        return pd.DataFrame(
            {
                "pair": self.labels,
                "query_node": [q for q in self.q_labels for _ in range(Nk)],
                "key_node": self.k_labels * Nq,
                "value": self.matrix.reshape(-1).tolist(),
            }
        )

    def _row(self, index: int) -> Any:
        Nk = len(self.k_labels)
        i, j = divmod(index, Nk)
        return {
            "pair": f"{self.q_labels[i]} · {self.k_labels[j]}",
            "query_node": self.q_labels[i],
            "key_node": self.k_labels[j],
            "value": float(self.matrix[i, j]),
        }

    def top(self, k: int = 10, *, by: Optional[str] = None, absolute: Optional[bool] = None) -> pd.DataFrame:
        """The ``k`` pairs with the largest term (|term| by default), ranked on the matrix without building the
        full table; other ``by`` columns rank the table as every result does."""
        if by not in (None, "value"):
            return super().top(k, by=by, absolute=absolute)
        from interp._validate import check_bool, check_positive_int

        check_positive_int("k", k)
        if absolute is not None:
            check_bool("absolute", absolute)
        M = self.matrix.reshape(-1)
        key = M.abs() if (self.default_absolute if absolute is None else absolute) else M
        order = torch.sort(key, descending=True, stable=True).indices[:k].tolist()
        return pd.DataFrame([self._row(i) for i in order], columns=["pair", "query_node", "key_node", "value"])

    def query_side(self) -> pd.DataFrame:
        """Each query-side node's share of the score, Σ_j term(i, j) (its query part against the whole key)."""
        return pd.DataFrame({"node": self.q_labels, "value": self.matrix.sum(1).tolist()})

    def key_side(self) -> pd.DataFrame:
        """Each key-side node's share of the score, Σ_i term(i, j)."""
        return pd.DataFrame({"node": self.k_labels, "value": self.matrix.sum(0).tolist()})

    def plot(self, *, max_nodes: int = 30) -> "go.Figure":
        """Heatmap of the terms between the ``max_nodes`` query-side and key-side nodes with the largest shares
        (:func:`interp.plots.qk_attribution_figure`)."""
        from interp.plots import qk_attribution_figure

        return qk_attribution_figure(self, max_nodes=max_nodes)
