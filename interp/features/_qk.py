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
from interp.engine import allowed_keys, apply_rotary
from interp.errors import ArgumentError
from interp.features._prompt import one_prompt
from interp.features._replacement import check_replaceable, real_forward
from interp.features._transcoder import Transcoder
from interp.labels import Feature, FeatureError, Head
from interp.models import Model
from interp.stream import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["QKAttribution", "qk_attribution"]


def _int(name: str, v: Any, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ArgumentError(f"{name}={v!r} must be an int in [{lo}, {hi}]")
    return v


def qk_attribution(
    model: Model,
    prompt: Union[str, Tensor],
    transcoders: list[Transcoder],
    layer: int,
    head: int,
    query_pos: int = -1,
    key_pos: int = 0,
) -> "QKAttribution":
    """The pre-softmax score of head ``head`` of layer ``layer`` at (``query_pos``, ``key_pos``) split into
    query-side × key-side terms of the attribution graph's nodes (module docstring): features and error
    nodes of the layers below ``layer``, token embeddings, and ``bias`` (every constant). The pair must be one
    the head attends to (causal, inside a sliding window)."""
    require_model(model)
    check_replaceable(model, transcoders)
    a = model.arch
    tokens, mask = one_prompt(model, prompt)
    n = tokens.shape[1]
    layer = _int("layer", layer, 0, a.n_layers - 1)
    head = _int("head", head, 0, a.n_heads - 1)
    qp = _int("query_pos", query_pos, -n, n - 1) % n
    kp = _int("key_pos", key_pos, -n, n - 1) % n
    ok = allowed_keys(n, n, causal=a.causal, window=a.window(layer), device=tokens.device)
    if not bool(ok[qp, kp]):
        win = f", and within its sliding window of {a.window(layer)}" if a.window(layer) else ""
        raise ArgumentError(
            f"key_pos={kp} is not attended from query_pos={qp} by layer {layer} (keys must be at or before "
            f"the query{win}); the score there is masked"
        )
    real = real_forward(model, tokens, mask, transcoders, capture={"q", "k"})
    fr, e, dt = real.frozen, real.frozen.e, real.dtype
    w = fr.w
    kvh = a.kv_head(head)
    scale = e.scales[layer]
    cos_sin = e.rope(n, layer) if a.positional == "rotary" else None

    def side(x: Tensor, p: int, W: Tensor, b: Tensor, gain: Optional[Tensor], sigma: Optional[Tensor]) -> Tensor:
        """One head's rotated (QK-normed) query or key at position p from the frozen stream's N1 [B, n, d]."""
        v = x[:, p] @ W + b  # [B, dh]
        if sigma is not None:  # QK-norm with its scale frozen at the real forward
            v = v / sigma * gain  # type: ignore[operator]  # gain is set with sigma
        if cos_sin is not None:
            cos, sin = cos_sin
            v = apply_rotary(v, cos[p].to(dt), sin[p].to(dt), interleaved=a.rotary_interleaved)
        return v

    # the real forward's q and k (before QK-norm and rotation), and the QK-norm scales they had
    q_raw = real.cache.acts["q"][layer][0].to(dt)  # type: ignore[index]  # [n, H, dh]
    k_raw = real.cache.acts["k"][layer][0].to(dt)  # type: ignore[index]  # [n, Hkv, dh]
    sq = sk = gq = gk = None
    if a.qk_norm:
        dims = (-1,) if getattr(a, "qk_norm_scope", "head") == "head" else (-2, -1)
        sq = (q_raw[qp].pow(2).mean(dims, keepdim=True) + a.norm_eps).sqrt()
        sk = (k_raw[kp].pow(2).mean(dims, keepdim=True) + a.norm_eps).sqrt()
        sq, sk = (sq[head] if sq.shape[0] > 1 else sq[0]), (sk[kvh] if sk.shape[0] > 1 else sk[0])
        gq, gk = w.q_norm_w[layer], w.k_norm_w[layer]  # type: ignore[index]
        gq, gk = (gq[head] if gq.ndim == 2 else gq), (gk[kvh] if gk.ndim == 2 else gk)
    args_q = (qp, w.W_Q[layer, head], w.b_Q[layer, head], gq, sq)
    args_k = (kp, w.W_K[layer, kvh], w.b_K[layer, kvh], gk, sk)

    # the model's own score, from the engine's q and k with its QK-norm and rotation (live scales)
    with torch.no_grad():
        qr, kr = q_raw[qp][None], k_raw[kp][None]
        if a.qk_norm:
            qr, kr = e.head_norm(qr.clone(), w.q_norm_w[layer]), e.head_norm(kr.clone(), w.k_norm_w[layer])  # type: ignore[index]
        qr, kr = qr[0, head], kr[0, kvh]
        if cos_sin is not None:
            cos, sin = cos_sin
            qr = apply_rotary(qr, cos[qp].to(dt), sin[qp].to(dt), interleaved=a.rotary_interleaved)
            kr = apply_rotary(kr, cos[kp].to(dt), sin[kp].to(dt), interleaved=a.rotary_interleaved)
        score = float(scale * (qr @ kr))

    # constants: the frozen model with every source zero
    dh = a.d_head
    with torch.no_grad():
        zero = torch.zeros(1, n, a.d_model, dtype=dt, device=tokens.device)
        h0 = fr.attn_input(layer, fr.resid(zero, [zero] * layer, layer))
        q0, k0 = scale * side(h0, *args_q)[0], side(h0, *args_k)[0]

    # each source's image: one batched backward of the 2·d_head coordinates of (scale · q, k)
    with torch.enable_grad():  # also under a caller's torch.set_grad_enabled(False)
        src_e = real.emb.detach()[None].clone().requires_grad_(True)
        leaves = [lv.detach()[None].clone().requires_grad_(True) for lv in real.leaves()[:layer]]
        h1 = fr.attn_input(layer, fr.resid(src_e, leaves, layer))
        y = torch.cat([scale * side(h1, *args_q)[0], side(h1, *args_k)[0]])  # [2 dh]
        go_ = torch.eye(2 * dh, dtype=dt, device=y.device)
        grads = torch.autograd.grad(y, [src_e, *leaves], grad_outputs=go_, is_grads_batched=True, allow_unused=True)

    labels: list[str] = []
    vecs: list[Tensor] = []  # [m, 2 dh] per block of nodes: their q-side images, then their k-side images
    with torch.no_grad():
        for l in range(layer):
            g = grads[1 + l]
            if g is None:
                continue
            g = g[:, 0]  # [2dh, n, d]
            p_idx, f_idx = real.feats[l]
            labels += [str(Feature(l, f, p)) for p, f in zip(p_idx.tolist(), f_idx.tolist())]
            vecs.append(((g[:, p_idx] * real.tcs[l].W_dec[f_idx]).sum(-1) * real.acts[l]).T)  # a_f (∂y/∂m_p · W_dec[f])
            labels += [str(FeatureError(l, p)) for p in range(n)]
            vecs.append((g * real.errs[l]).sum(-1).T)
        labels += [f"embed@{p}" for p in range(n)]
        vecs.append((grads[0][:, 0] * real.emb).sum(-1).T)
        labels.append("bias")
        vecs.append(torch.cat([q0, k0])[None])
        V = torch.cat(vecs)  # [nodes, 2 dh]
        Q, K = V[:, :dh], V[:, dh:]
        qi = (Q != 0).any(1).nonzero(as_tuple=True)[0]
        ki = (K != 0).any(1).nonzero(as_tuple=True)[0]
        Q, K = Q[qi].cpu(), K[ki].cpu()
        M = Q @ K.T
        total = float(M.sum())
        closure = abs(total - score)
        relative = closure / max(float(M.abs().sum()), torch.finfo(dt).tiny)
    c = a.attn_softcap
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
        """Heatmap of the terms between the ``max_nodes`` query-side and key-side nodes with the largest shares."""
        import plotly.graph_objects as go

        M = self.matrix
        qi = M.sum(1).abs().argsort(descending=True)[:max_nodes]
        ki = M.sum(0).abs().argsort(descending=True)[:max_nodes]
        sub = M[qi][:, ki]
        lim = float(sub.abs().max()) or 1.0
        fig = go.Figure(
            go.Heatmap(
                z=sub.tolist(),
                x=[self.k_labels[j] for j in ki.tolist()],
                y=[self.q_labels[i] for i in qi.tolist()],
                colorscale="RdBu",
                zmin=-lim,
                zmax=lim,
                hovertemplate="query %{y}<br>key %{x}<br>term %{z:.4g}<extra></extra>",
            )
        )
        fig.update_layout(
            title=f"QK attribution of L{self.layer}.H{self.head}, query {self.query_pos} → key "
            f"{self.key_pos} (score {self.score:.4g}; {self.model_name})",
            xaxis_title="key-side node",
            yaxis_title="query-side node",
        )
        return fig
