"""EAP's two steps: each reader's gradient at the stream it reads (:class:`ReaderGradients`), and the
products ΔA · Jᵀg over every edge at once (:class:`EdgeScorer`).

:class:`ReaderGradients` runs the engine's block maths (:class:`interp.engine.Engine`) under autograd,
keeping each reader's linear input (the fused q|k|v projection output, the MLP's normalised input, the
final norm's output), and returns, per reader r, the gradient g_r = ∂M/∂x_r carried to the residual
stream just before r's own norm (pre-norm) or at the stream r reads (post-norm): for a query head
g_q W_Q^{hᵀ}, then the norm's vector-Jacobian product (:meth:`interp.engine.Engine.norm_vjp`).
``scale="recomputed"`` uses the norm's true Jacobian (σ varies with x); ``scale="frozen"`` holds σ at this
pass's value, the ledger's linear map γ ⊙ C(·)/σ. Optionally writes are mixed, w ← α a_w + (1 − α) ã_w (the
token embedding only, or every write): the points of EAP-IG's path. QK-norm (Gemma 3, Qwen 3) sits inside
a q/k reader, after its projection: the reader's gradient passes through it (its σ held under
``scale="frozen"``, as the reader's own norm is). Soft-capped scores and logits are computed as the model does.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Any, Optional

import torch
from torch import Tensor

from interp.edges._writes import Acts, EdgeWrites

__all__ = ["EdgeScorer", "GradientPass", "ReaderGradients"]


@dataclass
class GradientPass:
    """What :class:`ReaderGradients` returns: ``G`` [P, R, T, d] (each reader's gradient at the stream it
    reads, see the module docstring), this pass's writes ``acts`` (before mixing; None unless asked), the
    post-norm stream norms' inputs (for carrying gradients back through them) and ``M`` [P]."""

    G: Tensor
    acts: Optional[Acts]
    norm_in: dict[str, Tensor]
    M: Tensor


class ReaderGradients:
    """Each reader's gradient at the stream it reads, one forward + one backward (module docstring)."""

    def __init__(self, writes: EdgeWrites):
        self.ew, self.e, self.a, self.w = writes, writes.e, writes.a, writes.w

    def __call__(self, tokens: Tensor, mask: Tensor, read: Any, prompt: Tensor, *, scale: str = "recomputed",
                 mix: Optional[tuple[Optional[Acts], float, str]] = None, keep: bool = False) -> GradientPass:
        """G for prompts ``prompt`` (``tokens`` [P, T] are theirs).

        ``read`` a :class:`interp.causal.MetricReader`: ``read.norm(x_final)`` the final norm, ``read.head(y,
        prompt)`` M [P] from its output (the gradient is taken there, then carried through that norm). ``mix`` =
        (ablated writes, α, "inputs" | "activations"): writes mixed α a_w + (1 − α) ã_w, the token embedding
        only or every write. ``keep``: also return this pass's writes (before mixing).
        """
        ew, e, a, w = self.ew, self.e, self.a, self.w
        P, T = tokens.shape
        frozen = scale == "frozen"
        abl, alpha, which = mix if mix is not None else (None, 1.0, "")
        mixing = mix is not None and alpha != 1.0
        every = mixing and which == "activations"
        zs: list[Tensor] = []
        ms: list[Optional[Tensor]] = []
        norm_in: dict[str, Tensor] = {}
        with torch.enable_grad():
            parts = dict(e.embed_parts(tokens))
            kept = dict(parts)
            for site in ew.embed_idx:
                if mixing and (every or site == "embed.token"):
                    ab = abl.embed[site] if abl is not None else torch.zeros_like(parts[site])
                    parts[site] = alpha * parts[site] + (1 - alpha) * ab
            if w.ln_emb_w is not None:
                norm_in["embed_ln"] = reduce(operator.add, parts.values()).detach()  # Σ in order, as embed sums
            x = e.embed(parts).detach().requires_grad_(True)  # the graph starts at the embedded stream
            handles: list[Tensor] = []
            xin: list[Tensor] = []  # the stream each layer's q/k/v read (before ln1), detached
            qkvs: list[Tensor] = []  # their projections, detached
            mids: list[Tensor] = []  # the stream each MLP reads (before ln2)
            for l in range(a.n_layers):
                xin.append(x.detach())
                qkv = e.project_qkv(l, e.read_norm(x, l, "1"))  # [P, T, H + 2 Hkv, dh]
                handles.append(qkv)
                qkvs.append(qkv.detach())
                z = e.attention(l, qkv, mask, frozen=frozen)
                zs.append(z.detach())
                attn = e.joined(l, e.attn_out(l, z), "attn")
                if every:  # the ablated attention output (b_O alone when the ablation zeroes z)
                    if w.ln1_post_w is not None:  # its image through the sandwich norm (0 under zero ablation)
                        ab = torch.zeros_like(attn) if abl is None else e.joined(l, e.attn_out(l, abl.z[l]), "attn")
                    else:
                        ab = w.b_O[l] if abl is None else e.attn_out(l, abl.z[l])
                    attn = alpha * attn + (1 - alpha) * ab
                if ew.post:
                    norm_in[f"ln1.{l}"] = (x + attn).detach()
                    mid = e.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
                elif a.parallel_attn_mlp:
                    mid = x
                else:
                    mid = x + attn
                if not ew.has_mlp:
                    x = mid + attn if a.parallel_attn_mlp else mid
                    ms.append(None)
                    continue
                mids.append(mid.detach())
                # the MLP's own copy of its input: without a norm of its own (post-norm, OLMo 2, norm-free models
                # such as tracr's) it is `mid` itself, whose gradient would include the residual path past the MLP
                h2 = e.read_norm(mid, l, "2") if ew.own_norm else mid * 1.0
                handles.append(h2)
                m = e.joined(l, e.mlp(l, h2), "mlp")
                ms.append(m.detach())
                if every:
                    ab_m = abl.mlp[l] if abl is not None else torch.zeros_like(m)
                    m = alpha * m + (1 - alpha) * ab_m  # type: ignore[operator]
                if ew.post:
                    norm_in[f"ln2.{l}"] = (mid + m).detach()
                    x = e.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
                elif a.parallel_attn_mlp:
                    x = x + attn + m
                else:
                    x = mid + m
            y = read.norm(x)
            M = read.head(y, prompt)
            grads = torch.autograd.grad(M.sum(), handles + [y], allow_unused=True)
        G = torch.empty(P, ew.R, T, a.d_model, dtype=ew.model.dtype, device=tokens.device)
        per = 2 if ew.has_mlp else 1
        n = ew.H + 2 * ew.Hkv
        for l in range(a.n_layers):
            r0 = ew.q0[l]
            gq = grads[per * l]
            G[:, r0: r0 + n] = 0.0 if gq is None else self._qkv_grad(l, gq, xin[l], qkvs[l], frozen).transpose(0, 1)
            if ew.has_mlp:
                g2, r = grads[per * l + 1], ew.mlp_r[l]
                if g2 is None:
                    G[:, r] = 0.0
                else:
                    G[:, r] = e.norm_vjp(g2, mids[l], w.ln2_w[l], frozen=frozen) if ew.own_norm else g2
        gy = grads[-1]
        if gy is None:
            G[:, ew.out_r] = 0.0
        else:
            own = not ew.post and a.norm != "none" and w.lnf_w is not None  # the metric's read has a final norm
            G[:, ew.out_r] = e.norm_vjp(gy, x.detach(), w.lnf_w, frozen=frozen) if own else gy
        acts = Acts(embed=kept, z=zs, mlp=ms) if keep else None
        return GradientPass(G=G, acts=acts, norm_in=norm_in, M=M.detach())

    def _qkv_grad(self, l: int, g: Tensor, x: Tensor, qkv: Tensor, frozen: bool) -> Tensor:
        """[n, P, T, d]: each q/k/v reader's gradient g_j (at its projection's output) carried to the stream:
        W_j g_j, then (pre-norm) through ln1's Jacobian at x (:meth:`interp.engine.Engine.norm_vjp`, fused into
        the projection): Jᵀu = (C(γ⊙u) − x̂ (x̂·γ⊙u)/d)/σ (frozen: the first term) — with γ folded into W_j and
        1/σ into g_j, so the d_model-sized work is one batched product over the readers and two in-place
        passes. x̂·(γ⊙W_j g_j) = ((γ⊙x̂) W_j)·g_j, and (γ⊙x̂) W is the forward's own projection ``qkv`` less
        its biases (b_qkv, and β W for LayerNorm)."""
        ew, e, a = self.ew, self.e, self.a
        P, T = g.shape[:2]
        n, dh, d = ew.H + 2 * ew.Hkv, ew.dh, a.d_model
        W = e.W_qkv[l]  # [d, n dh]
        plain = not ew.own_norm
        if not plain:
            ln = a.norm == "layernorm"
            sigma = e.norm_scale(x)  # [P, T, 1]
            W = W * self.w.ln1_w[l][:, None]  # γ folded: [d, n dh]
            g = g / sigma[..., None]  # g [P, T, n, dh]
        gj = g.reshape(P * T, n, dh).transpose(0, 1)  # [n, P T, dh]
        out = torch.bmm(gj, W.view(d, n, dh).permute(1, 2, 0)).view(n, P, T, d)  # W_j g_j per reader
        if plain:
            return out
        if ln:  # centre: the mean over d of each row, Σ_e mean_i(W[i, e]) g[e]
            out.sub_(torch.einsum("jxe,je->jx", gj, W.view(d, n, dh).mean(0)).view(n, P, T, 1))
        if not frozen:
            xh = (x - x.mean(-1, keepdim=True) if ln else x) / sigma
            proj = qkv.reshape(P, T, n * dh)
            if e.b_qkv is not None:
                proj = proj - e.b_qkv[l]  # (γ⊙x̂ + β) W
            if ln and self.w.ln1_b[l] is not None:
                proj = proj - self.w.ln1_b[l] @ e.W_qkv[l]
            c = (proj.reshape(P * T, n, dh).transpose(0, 1) * gj).sum(-1) / d  # x̂·(γ⊙u)/d, [n, P T]
            out.addcmul_(xh[None], c.view(n, P, T, 1), value=-1.0)
        return out


class EdgeScorer:
    """[P, W, R]: Σ_{t,d} ΔA_w · J_{w→r}ᵀ g_r for every writer/reader pair that is an edge (0 elsewhere).

    Pre-norm and parallel blocks: J is the identity (g_r already went through r's own norm), one batched
    GEMM ΔA·Gᵀ, masked — cut into a few blocks of readers by layer, each multiplying only the writers that
    come before its last reader (the pairs of a writer after its reader are never formed). Post-norm: g_r is
    carried back through each Add & Norm between w and r (its Jacobian at ``norm_in``), one GEMM per
    stretch of writers between two norms.
    """

    def __init__(self, writes: EdgeWrites):
        self.ew = writes

    def __call__(self, dA: Tensor, G: Tensor, norm_in: dict[str, Tensor], *, frozen: bool) -> Tensor:
        ew = self.ew
        P, W, T, d = dA.shape
        R = G.shape[1]
        mask = ew.g.mask.to(dA.device)
        if not ew.post:
            S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
            L = ew.a.n_layers
            cuts = sorted({0, *(round(L * k / 4) for k in range(1, 4)), L})
            for l0, l1 in zip(cuts[:-1], cuts[1:]):
                r0, r1 = ew.q0[l0], (ew.q0[l1] if l1 < L else R)
                nw = ew.head0[l1] if l1 < L else W
                S[:, :nw, r0:r1] = torch.bmm(dA[:, :nw].reshape(P, nw, T * d), G[:, r0:r1].reshape(P, r1 - r0, T * d).transpose(1, 2))
            return S * mask
        e, a, w = ew.e, ew.a, ew.w
        S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
        C = G.clone()

        def gemm(w0: int, w1: int, r0: int) -> None:
            S[:, w0:w1, r0:] = torch.bmm(dA[:, w0:w1].reshape(P, w1 - w0, -1), C[:, r0:].reshape(P, R - r0, -1).transpose(1, 2))

        def back(key: str, gain: Tensor, r0: int) -> None:
            C[:, r0:] = e.norm_vjp(C[:, r0:], norm_in[key][:, None], gain, frozen=frozen)

        for l in reversed(range(a.n_layers)):
            r_next = ew.q0[l + 1] if l + 1 < a.n_layers else ew.out_r
            if ew.has_mlp:
                back(f"ln2.{l}", w.ln2_w[l], r_next)
                gemm(ew.mlp_w[l], ew.mlp_w[l] + 1, r_next)
                r_mid = ew.mlp_r[l]
            else:
                r_mid = r_next
            back(f"ln1.{l}", w.ln1_w[l], r_mid)
            gemm(ew.head0[l], ew.head0[l] + ew.H, r_mid)
        if "embed_ln" in norm_in:
            C[:] = e.norm_vjp(C, norm_in["embed_ln"][:, None], w.ln_emb_w, frozen=frozen, kind="layernorm")
        gemm(0, ew.n_embed, 0)
        return S * mask
