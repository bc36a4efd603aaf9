"""EAP's two steps: each reader's gradient at the stream it reads (:class:`ReaderGradients`), and the
products ΔA · Jᵀg over every edge at once (:class:`EdgeScorer`).

:class:`ReaderGradients` runs each layer as the model's block (:attr:`interp.models.Model.block`) interpreted
by :class:`_Grad` with the engine's block maths (:class:`interp.engine.internal.Engine`) under autograd, keeping each
reader's linear input (the fused q|k|v projection output, the MLP's normalised input, the
final norm's output), and returns, per reader r, the gradient g_r = ∂M/∂x_r carried to the residual
stream just before r's own norm (pre-norm) or at the stream r reads (post-norm): for a query head
g_q W_Q^{hᵀ}, then the norm's vector-Jacobian product (:meth:`interp.engine.internal.Engine.norm_vjp`).
``scale="recomputed"`` uses the norm's true Jacobian (σ varies with x); ``scale="frozen"`` holds σ at this
pass's value, the ledger's linear map γ ⊙ C(·)/σ. Optionally writes are mixed, w ← α a_w + (1 − α) ã_w (the
token embedding only, or every write): the points of EAP-IG's path. QK-norm (Gemma 3, Qwen 3) sits inside
a q/k reader, after its projection: the reader's gradient passes through it (its σ held under
``scale="frozen"``, as the reader's own norm is). Soft-capped scores and logits are computed as the model does.

Node attribution patching (:func:`interp.attribution_patch`, AtP: Δa_n · ∂M/∂a_n) is the same first-order estimate
at the writers: by the chain rule through the stream, ∂M/∂a_w = Σ_{r after w} J_{w→r}ᵀ ∂M/∂x_r, so a writer's AtP
(clean run, ``direction="noise"``) is −Σ_r of its EAP edges (``method="eap"``), to float rounding on pre-norm,
parallel and post-norm blocks (tests/edges/test_atp_is_eap_row_sum.py). The two keep their own gradient passes
because AtP's nodes are not all writers (a head's q, a KV head's k and v, attention patterns, resid points; AtP*'s
QK fix recomputes softmaxes) and it needs only ∂M/∂a at its nodes, not each reader's gradient carried through its
norm; and because ``causal`` sits below ``edges``, this pass cannot serve it from here. Under a sandwich norm a
head's edge write is its image at the output norm's σ' of the run (:class:`interp.edges.internal.EdgeWrites`), so a
head's row sum leaves out the σ' term of that norm's Jacobian, which AtP (differentiating at z) keeps.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Optional

import torch
from torch import Tensor

from interp.edges._writes import Acts, EdgeWrites
from interp.models.internal import is_streamed, run_block

__all__ = ["EdgeScorer", "GradientPass", "ReaderGradients"]


@dataclass
class GradientPass:
    """What :class:`ReaderGradients` returns: ``G`` [P, R, T, d] (each reader's gradient at the stream it
    reads, see the module docstring), this pass's writes ``acts`` (before mixing; None unless asked), the
    post-norm stream norms' inputs (for carrying gradients back through them) and ``M`` [P]; with ``delta``
    the write differences ``dA`` [P, W, T, d], with ``corrupt`` that run's writes and final stream."""

    G: Tensor
    acts: Optional[Acts]
    norm_in: dict[str, Tensor]
    M: Tensor
    dA: Optional[Tensor] = None
    corrupt: Optional[Acts] = None
    corrupt_final: Optional[Tensor] = None


@dataclass
class _Block:
    """One layer of the gradient pass: its input ``x`` (a leaf under autograd) and output ``out``, the readers'
    linear inputs ``qkv`` and ``h2`` (where their gradients are taken), and detached what the scores need."""

    x: Tensor
    out: Tensor
    qkv: Tensor
    h2: Optional[Tensor]
    z: Tensor
    m: Optional[Tensor]
    mid: Optional[Tensor]
    norm_in: dict[str, Tensor]


@dataclass
class _Options:
    """How one pass runs its layers: the attention ``mask``, σ ``frozen`` or recomputed, and the mixing of the
    writes: α a_w + (1 − α) ã_w with ã the ablated writes ``abl`` (None: zero), ``every`` write or (False)
    the token embedding only."""

    mask: Tensor
    frozen: bool
    abl: Optional[Acts]
    alpha: float
    every: bool


@dataclass
class _Walk:
    """The walk down so far: the stream ``x`` (after the walk, the final stream) and the corrupt run's ``kx``
    (None without one), this pass's embedding parts before mixing ``kept`` and the corrupt run's ``k_parts``, the
    stream norms' inputs ``norm_in``; per layer its input ``xin`` (detached), its writes ``zs`` / ``ms`` and the
    corrupt run's ``kz`` / ``kms``, and ``blocks`` (each layer's graph, None where the walk up recomputes it)."""

    x: Tensor
    kx: Optional[Tensor]
    kept: dict[str, Tensor]
    k_parts: dict[str, Tensor]
    norm_in: dict[str, Tensor]
    recompute: bool
    xin: list[Tensor] = field(default_factory=list)
    zs: list[Tensor] = field(default_factory=list)
    ms: list[Optional[Tensor]] = field(default_factory=list)
    kz: list[Tensor] = field(default_factory=list)
    kms: list[Optional[Tensor]] = field(default_factory=list)
    blocks: list[Optional[_Block]] = field(default_factory=list)


class ReaderGradients:
    """Each reader's gradient at the stream it reads, one forward + one backward (module docstring).

    The pass walks the layers twice: down, the forward (and, given ``corrupt``, the corrupt run beside it, one
    layer at a time), keeping each layer's input; up, each layer's backward from the gradient at its output,
    then its readers' gradients carried to the stream and its writes' differences while its weights are in
    hand. In memory each layer's graph is kept from the walk down; on a model streamed one block at a time
    (:func:`interp.models.internal.is_streamed`) the layer is recomputed under autograd on the way up instead, so one
    block is alive at a time and each block is read twice per pass (docs/scaling.md)."""

    def __init__(self, writes: EdgeWrites):
        self.ew, self.e, self.a, self.w = writes, writes.e, writes.a, writes.w

    def __call__(
        self,
        tokens: Tensor,
        mask: Tensor,
        read: Any,
        prompt: Tensor,
        *,
        scale: str = "recomputed",
        mix: Optional[tuple[Optional[Acts], float, str]] = None,
        keep: bool = False,
        corrupt: Optional[tuple[Tensor, Tensor]] = None,
        delta: bool = False,
    ) -> GradientPass:
        """G for prompts ``prompt`` (``tokens`` [P, T] are theirs).

        ``read`` a :class:`interp.engine.internal.MetricReader`: ``read.norm(x_final)`` the final norm, ``read.head(y,
        prompt)`` M [P] from its output (the gradient is taken there, then carried through that norm). ``mix`` =
        (ablated writes, α, "inputs" | "activations"): writes mixed α a_w + (1 − α) ã_w, the token embedding
        only or every write. ``keep``: also return this pass's writes (before mixing). ``corrupt`` = (tokens,
        mask): run those prompts too, layer by layer beside this pass (no gradient), returning their writes
        and final stream. ``delta``: also return ΔA = ã_w − a_w of this pass's writes, ã the corrupt run's
        writes when ``corrupt`` is given, else ``mix``'s (None: zero ablation).
        """
        abl, alpha, which = mix if mix is not None else (None, 1.0, "")
        mixing = mix is not None and alpha != 1.0
        o = _Options(mask, scale == "frozen", abl, alpha, mixing and which == "activations")

        # 1. the embeddings, mixed along the path (the token embedding, or every part); the corrupt run's beside them
        walk = self._embed(tokens, o, mixing, corrupt)

        # 2. down: each layer under autograd, its input kept (the corrupt run's layer beside it, without gradient)
        self._down(walk, tokens, o, corrupt)

        # 3. M at the final stream, its gradient there, and the final readout's G
        G, M, g = self._metric(walk.x, tokens, read, prompt, o.frozen)

        # 4. this pass's writes (and the corrupt run's), the embeddings' differences ΔA
        this = Acts(embed=walk.kept, z=walk.zs, mlp=walk.ms)
        k_acts = Acts(embed=dict(walk.k_parts), z=walk.kz, mlp=walk.kms) if corrupt is not None else None
        ref = k_acts if corrupt is not None else abl
        dA = self.ew.delta_embed(ref, this) if delta else None

        # 5. up: each layer's backward from the gradient at its output, its readers' G and its writes' ΔA
        self._up(walk, g, G, o, dA, ref, this)
        return GradientPass(
            G=G,
            acts=this if keep else None,
            norm_in=walk.norm_in,
            M=M.detach(),
            dA=dA,
            corrupt=k_acts,
            corrupt_final=walk.kx,
        )

    def _embed(self, tokens: Tensor, o: _Options, mixing: bool, corrupt: Optional[tuple[Tensor, Tensor]]) -> _Walk:
        """The walk's start: the embedded stream (its parts mixed where ``mixing``: every part, or the token
        embedding only) and the corrupt run's; the embedding norm's input where the model has one."""
        e, w = self.e, self.w
        norm_in: dict[str, Tensor] = {}
        parts = dict(e.embed_parts(tokens))
        kept = dict(parts)
        for site in self.ew.embed_idx:
            if mixing and (o.every or site == "embed.token"):
                ab = o.abl.embed[site] if o.abl is not None else torch.zeros_like(parts[site])
                parts[site] = o.alpha * parts[site] + (1 - o.alpha) * ab
        if w.ln_emb_w is not None:
            norm_in["embed_ln"] = reduce(operator.add, parts.values()).detach()  # Σ in order, as embed sums
        with torch.no_grad():
            x = e.embed(parts)  # the graph starts at the embedded stream
            k_parts = e.embed_parts(corrupt[0]) if corrupt is not None else {}
            kx = e.embed(k_parts) if corrupt is not None else None
        return _Walk(x=x, kx=kx, kept=kept, k_parts=k_parts, norm_in=norm_in, recompute=is_streamed(w))

    def _down(self, walk: _Walk, tokens: Tensor, o: _Options, corrupt: Optional[tuple[Tensor, Tensor]]) -> None:
        """The walk down: each layer run under autograd on its (detached) input, keeping the input, the writes, the
        stream norms' inputs and (unless recomputed on the way up) the layer's graph; the corrupt run's layer beside
        it without gradient, keeping its writes."""
        every_row = torch.arange(tokens.shape[0], device=tokens.device)
        for l in range(self.a.n_layers):
            if corrupt is not None and walk.kx is not None:
                store: dict[str, Tensor] = {}
                with torch.no_grad():
                    walk.kx = self.e.layer(
                        l, walk.kx, prompt=every_row, mask=corrupt[1], capture={"z", "mlp_out"}, store=store
                    )
                walk.kz.append(store["z"])
                walk.kms.append(store.get("mlp_out"))
            walk.xin.append(walk.x.detach())
            with torch.enable_grad():  # under autograd also when recomputed: the same kernels as the walk up
                b = self._block(l, walk.x.detach().requires_grad_(True), o)
            walk.zs.append(b.z)
            walk.ms.append(b.m)
            walk.norm_in.update(b.norm_in)
            walk.blocks.append(None if walk.recompute else b)
            walk.x = b.out

    def _metric(
        self, x: Tensor, tokens: Tensor, read: Any, prompt: Tensor, frozen: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(G [P, R, T, d] with the final readout's row filled, M [P], ∂M/∂x at the final stream ``x``): the
        gradient at the final norm's output, carried through that norm where the metric's read has one."""
        ew, e, a, w = self.ew, self.e, self.a, self.w
        P, T = tokens.shape
        with torch.enable_grad():
            xf = x.detach().requires_grad_(True)
            y = read.norm(xf)
            M = read.head(y, prompt)
            gy, gx = torch.autograd.grad(M.sum(), [y, xf], allow_unused=True)
        G = torch.empty(P, ew.R, T, a.d_model, dtype=ew.model.dtype, device=tokens.device)
        if gy is None:
            G[:, ew.out_r] = 0.0
        else:
            # the metric's read has a final norm of its own (a normed stream is read as it is)
            own = not e.block.normed_stream and a.norm != "none" and w.lnf_w is not None
            G[:, ew.out_r] = e.norm_vjp(gy, xf.detach(), w.lnf_w, frozen=frozen) if own else gy
        return G, M, gx if gx is not None else torch.zeros_like(xf)

    def _up(
        self,
        walk: _Walk,
        g: Tensor,
        G: Tensor,
        o: _Options,
        dA: Optional[Tensor],
        ref: Optional[Acts],
        this: Acts,
    ) -> None:
        """The walk up from ``g`` = ∂M/∂x at the final stream: each layer's backward (its graph from the walk down, or
        recomputed) gives the gradient at its input and at its readers' linear inputs; those are carried to the
        stream into G's rows of the layer's readers, and (``dA``) the layer's write differences filled."""
        ew, e = self.ew, self.e
        n = ew.H + 2 * ew.Hkv
        mlp_norm = e.block.read_norm("mlp")  # the MLP reader's own norm, or None: it reads the stream raw
        xin = walk.xin
        for l in reversed(range(self.a.n_layers)):
            if walk.recompute:
                with torch.enable_grad():
                    b = self._block(l, xin[l].detach().requires_grad_(True), o)
            else:
                b, walk.blocks[l] = walk.blocks[l], None  # type: ignore[assignment]
            handles = [b.x, b.qkv] + ([b.h2] if b.h2 is not None else [])
            gs = torch.autograd.grad(b.out, handles, grad_outputs=g, allow_unused=True)
            g = gs[0] if gs[0] is not None else torch.zeros_like(xin[l])
            r0, gq = ew.q0[l], gs[1]
            G[:, r0 : r0 + n] = (
                0.0 if gq is None else self._qkv_grad(l, gq, xin[l], b.qkv.detach(), o.frozen).transpose(0, 1)
            )
            if ew.has_mlp:
                g2, r = gs[2], ew.mlp_r[l]
                if g2 is None:
                    G[:, r] = 0.0
                else:
                    G[:, r] = (
                        g2
                        if mlp_norm is None
                        else e.norm_vjp(g2, b.mid, e.norm_weights(mlp_norm, l)[0], frozen=o.frozen)
                    )
            if dA is not None:
                ew.delta_layer(dA, l, ref, this)
            del b, gs

    def _block(self, l: int, x: Tensor, o: _Options) -> _Block:
        """Layer l of the pass on its input x [P, T, d]: the block's steps interpreted by :class:`_Grad`
        (``o.every``: each write mixed α a_w + (1 − α) ã_w)."""
        g = _Grad(self.ew, l, o.mask, o.frozen, o.abl, o.alpha, o.every)
        out = run_block(self.e.block, g, x)
        if g.qkv is None or g.z is None:
            raise AssertionError("the gradient pass's block has no attention")
        return _Block(x=x, out=out, qkv=g.qkv, h2=g.h2, z=g.z, m=g.m, mid=g.mid, norm_in=g.norm_in)

    def _qkv_grad(self, l: int, g: Tensor, x: Tensor, qkv: Tensor, frozen: bool) -> Tensor:
        """[n, P, T, d]: each q/k/v reader's gradient g_j (at its projection's output) carried to the stream:
        W_j g_j, then (pre-norm) through ln1's Jacobian at x (:meth:`interp.engine.internal.Engine.norm_vjp`, fused into
        the projection): Jᵀu = (C(γ⊙u) − x̂ (x̂·γ⊙u)/d)/σ (frozen: the first term) — with γ folded into W_j and
        1/σ into g_j, so the d_model-sized work is one batched product over the readers and two in-place
        passes. x̂·(γ⊙W_j g_j) = ((γ⊙x̂) W_j)·g_j, and (γ⊙x̂) W is the forward's own projection ``qkv`` less
        its biases (b_qkv, and β W for LayerNorm)."""
        ew, e, a = self.ew, self.e, self.a
        P, T = g.shape[:2]
        n, dh, d = ew.H + 2 * ew.Hkv, ew.dh, a.d_model
        W = e.W_qkv[l]  # [d, n dh]
        norm = e.block.read_norm("attn")  # the q/k/v readers' own norm, or None: they read the stream raw
        plain = norm is None
        if norm is not None:
            ln = a.norm == "layernorm"
            sigma = e.norm_scale(x)  # [P, T, 1]
            gain, beta = e.norm_weights(norm, l)
            W = W if gain is None else W * gain[:, None]  # γ folded: [d, n dh]
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
            if ln and beta is not None:
                proj = proj - beta @ e.W_qkv[l]
            c = (proj.reshape(P * T, n, dh).transpose(0, 1) * gj).sum(-1) / d  # x̂·(γ⊙u)/d, [n, P T]
            out.addcmul_(xh[None], c.view(n, P, T, 1), value=-1.0)
        return out


class _Grad:
    """:meth:`ReaderGradients._block`'s interpreter of the block (:class:`interp.models.internal.BlockOps`): each step
    run under autograd, keeping what the walk up needs — the attention's fused q|k|v projection output ``qkv`` and
    the MLP's own copy of its input ``h2`` (the readers' linear inputs, where their gradients are taken), the
    stream the MLP reads ``mid``, the detached writes ``z`` and ``m``, and each stream norm's input ``norm_in``
    (keyed "{norm}.{l}"); with ``every`` each sublayer's output is mixed α a + (1 − α) ã as it joins the stream
    (after its output norm, where the block has one)."""

    def __init__(
        self, ew: EdgeWrites, l: int, mask: Tensor, frozen: bool, abl: Optional[Acts], alpha: float, every: bool
    ):
        self.e, self.w, self.l, self.mask, self.frozen = ew.e, ew.w, l, mask, frozen
        self.abl, self.alpha, self.every = abl, alpha, every
        self.qkv: Optional[Tensor] = None
        self.z: Optional[Tensor] = None
        self.h2: Optional[Tensor] = None
        self.mid: Optional[Tensor] = None
        self.m: Optional[Tensor] = None
        self.norm_in: dict[str, Tensor] = {}

    def point(self, site: str, v: Tensor) -> Tensor:
        if site == "attn_out" and self.every:
            v = self.alpha * v + (1 - self.alpha) * self._ablated_attn(v)
        elif site == "mlp_out":
            self.m = v.detach()
            if self.every:
                ab = self.abl.mlp[self.l] if self.abl is not None else torch.zeros_like(v)
                v = self.alpha * v + (1 - self.alpha) * ab  # type: ignore[operator]
        return v

    def _ablated_attn(self, attn: Tensor) -> Tensor:
        """The ablated attention output as it joins the stream: b_O alone when the ablation zeroes z; under an
        output norm its image through that norm (0 under zero ablation)."""
        e, l, abl = self.e, self.l, self.abl
        if e.block.out_norm("attn") is not None:
            return torch.zeros_like(attn) if abl is None else e.joined(l, e.attn_out(l, abl.z[l]), "attn")
        return self.w.b_O[l] if abl is None else e.attn_out(l, abl.z[l])

    def read(self, sub: str, norm: Optional[str], stream: Tensor) -> Tensor:
        if sub == "attn":
            return self.e.norm_at(norm, self.l, stream)
        self.mid = stream.detach()
        # the MLP's own copy of its input: without a norm of its own (post-norm, OLMo 2, norm-free models
        # such as tracr's) it is the stream itself, whose gradient would include the residual path past the MLP
        self.h2 = self.e.norm_at(norm, self.l, stream) if norm is not None else stream * 1.0
        return self.h2

    def apply(self, sub: str, h: Tensor) -> Tensor:
        e, l = self.e, self.l
        if sub == "attn":
            self.qkv = e.project_qkv(l, h)  # [P, T, H + 2 Hkv, dh]
            z = e.attention(l, self.qkv, self.mask, frozen=self.frozen)
            self.z = z.detach()
            return e.attn_out(l, z)
        return e.mlp(l, h)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        return self.e.norm_at(norm, self.l, out)

    def add(self, sub: str, stream: Tensor, out: Tensor) -> Tensor:
        return stream + out

    def norm(self, norm: str, stream: Tensor) -> Tensor:
        self.norm_in[f"{norm}.{self.l}"] = stream.detach()
        return self.e.norm_at(norm, self.l, stream)


class EdgeScorer:
    """[P, W, R]: Σ_{t,d} ΔA_w · J_{w→r}ᵀ g_r for every writer/reader pair that is an edge (0 elsewhere).

    A stream that is the sum of the writes (pre-norm and parallel blocks, any block without stream norms): J is
    the identity (g_r already went through r's own norm), one batched GEMM ΔA·Gᵀ, masked — cut into a few
    blocks of readers by layer, each multiplying only the writers that come before its last reader (the pairs
    of a writer after its reader are never formed). A normed stream (post-norm, :attr:`Block.normed_stream`):
    the block's steps walked last to first, g_r carried back through each stream norm between w and r (its
    Jacobian at ``norm_in``), one GEMM per sublayer's writers at its add, over the readers after it.
    """

    def __init__(self, writes: EdgeWrites):
        self.ew = writes

    def __call__(self, dA: Tensor, G: Tensor, norm_in: dict[str, Tensor], *, frozen: bool) -> Tensor:
        ew = self.ew
        P, W, T, d = dA.shape
        R = G.shape[1]
        mask = ew.g.mask.to(dA.device)
        if not ew.e.block.normed_stream:
            S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
            L = ew.a.n_layers
            cuts = sorted({0, *(round(L * k / 4) for k in range(1, 4)), L})
            for l0, l1 in zip(cuts[:-1], cuts[1:]):
                r0, r1 = ew.q0[l0], (ew.q0[l1] if l1 < L else R)
                nw = ew.head0[l1] if l1 < L else W
                S[:, :nw, r0:r1] = torch.bmm(
                    dA[:, :nw].reshape(P, nw, T * d), G[:, r0:r1].reshape(P, r1 - r0, T * d).transpose(1, 2)
                )
            return S * mask
        e, a, w = ew.e, ew.a, ew.w
        S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
        C = G.clone()

        def gemm(w0: int, w1: int, r0: int) -> None:
            S[:, w0:w1, r0:] = torch.bmm(
                dA[:, w0:w1].reshape(P, w1 - w0, -1), C[:, r0:].reshape(P, R - r0, -1).transpose(1, 2)
            )

        def back(key: str, gain: Tensor, r0: int) -> None:
            C[:, r0:] = e.norm_vjp(C[:, r0:], norm_in[key][:, None], gain, frozen=frozen)

        for l in reversed(range(a.n_layers)):
            r = ew.q0[l + 1] if l + 1 < a.n_layers else ew.out_r  # C[:, r:]: the readers after the step
            for s in e.block.walk(reverse=True):
                if s.op == "norm":
                    back(f"{s.norm}.{l}", e.norm_weights(s.norm, l)[0], r)  # type: ignore[arg-type]
                elif s.op == "add":
                    w0 = ew.head0[l] if s.sub == "attn" else ew.mlp_w[l]
                    gemm(w0, w0 + (ew.H if s.sub == "attn" else 1), r)
                elif s.op == "read":
                    r = ew.q0[l] if s.sub == "attn" else ew.mlp_r[l]
        if "embed_ln" in norm_in:
            C[:] = e.norm_vjp(C, norm_in["embed_ln"][:, None], w.ln_emb_w, frozen=frozen, kind="layernorm")
        gemm(0, ew.n_embed, 0)
        return S * mask
