"""Circuit evaluation's forward: every reader's input its own (:class:`AblatedForward`).

A forward in which reader r's input is the stream with every ablated edge w → r's write replaced,

    x_r = Σ_w [(1 − K_wr) a_w + K_wr ã_w] + biases,

with a_w this run's write, ã_w its ablated value (:class:`interp.edges.internal.EdgeWrites`), and every norm
recomputed (a normed stream, post-norm: along r's own copy of the stream, every Add & Norm on the way). Each
layer is the model's block (:attr:`interp.models.Model.block`) interpreted step by step
(:func:`interp.models.internal.run_block`): by :class:`_Mixed` where the stream is the sum of the writes, by
:class:`_Copies` where it is normed after each join. The block maths (norms, projections, attention, MLP,
output norms) is the engine's (:class:`interp.engine.internal.Engine`); what is this module's own is the bookkeeping
that gives each reader its input in a few large products.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any, Optional

import torch
from torch import Tensor

from interp.edges._writes import Acts, EdgeWrites
from interp.models.internal import run_block

__all__ = ["AblatedForward"]

#: one layer's readers (:meth:`AblatedForward._specs`): the first writer of the layer ``nw``, the coefficients
#: C [top, cols] and complement flags comp [cols] of its reader columns, and the columns ``sel`` whose input
#: is not the clean stream (0 … n − 1 the q/k/v readers, n the MLP's; the metric's: 0)
Spec = tuple[int, Tensor, Tensor, list[int]]


class AblatedForward:
    """The metric of a run in which each edge's reader sees its ablated edges' writes replaced (module
    docstring): :meth:`__call__` with K [W, R] (1 = ablated)."""

    #: the inputs of a block of this many layers' readers come from one pass over the writers before it
    LAYERS_PER_PRODUCT = 4

    def __init__(self, writes: EdgeWrites):
        self.ew, self.e, self.a, self.w = writes, writes.e, writes.a, writes.w

    def __call__(
        self, tokens: Tensor, mask: Tensor, abl: Optional[Acts], K: Tensor, read: Any, prompt: Tensor
    ) -> Tensor:
        """The metric [P] of prompts ``prompt`` (``tokens`` [P, T] theirs) with every edge's reader seeing
        (1 − K_wr) a_w + K_wr ã_w (module docstring).

        ``abl`` the ablated writes (None: zero); ``K`` [W, R] (1 = the edge is ablated); ``read`` a
        :class:`interp.engine.internal.MetricReader`.
        """
        ew = self.ew
        K = (K.to(ew.model.dtype) * ew.g.mask.to(K.device)).to(tokens.device)
        with torch.inference_mode():
            parts = self.e.embed_parts(tokens)
            if ew.block.normed_stream:
                return self._copies(tokens, mask, parts, abl, K, read, prompt)
            return self._buffered(tokens, mask, parts, abl, K, read, prompt)

    # ------------------------------------------------------------------ a stream that sums the writes

    def _buffered(
        self,
        tokens: Tensor,
        mask: Tensor,
        parts: dict[str, Tensor],
        abl: Optional[Acts],
        K: Tensor,
        read: Any,
        prompt: Tensor,
    ) -> Tensor:
        """Pre-norm and parallel blocks (any block whose stream is the sum of the writes): one buffer
        B [2 + W, P, T, d] holds the clean stream x, S = Σ D_w over the writers so far and each
        D_w = ã_w − a_w(this run), writer-major, so that the inputs of a layer's readers,
        x_r = x + comp_r S + Σ_w C_wr D_w (:meth:`_coef`), are one product Cᵀ B over B's rows (:meth:`_mix`)
        and each reader's norm is applied after its projection (:meth:`_read_qkv`). Each layer: its readers'
        inputs (:meth:`_Mixed.inputs`), then the block's steps (:class:`_Mixed`)."""
        B = self._buffer(parts, abl, tokens)
        specs = self._specs(K, tokens.device)
        run = _Mixed(self, B, specs, abl, mask)
        x = B[0]
        for l in range(self.a.n_layers):
            run.inputs(l)
            x = run_block(self.ew.block, run, x)
        X = run.inputs(self.a.n_layers)
        return read(x if X is None else X[0].view(x.shape), prompt)

    def _buffer(self, parts: dict[str, Tensor], abl: Optional[Acts], tokens: Tensor) -> Tensor:
        """B = [x, S, D_0, D_1, …] [2 + W, P, T, d] with the embedding's rows filled: x the embedded stream,
        D_w = ã_w − a_w of each embedding part, S their sum (the layers' rows are filled as the walk reaches
        them)."""
        ew = self.ew
        P, T = tokens.shape
        B = torch.empty(2 + ew.W, P, T, self.a.d_model, dtype=ew.model.dtype, device=tokens.device)
        x, S, D = B[0], B[1], B[2:]  # updated in place: B's rows are what the products read
        x.copy_(self.e.embed(parts))
        for site, i in ew.embed_idx.items():
            if abl is not None:
                torch.sub(abl.embed[site], parts[site], out=D[i])
            else:
                torch.neg(parts[site], out=D[i])
        torch.sum(D[: ew.n_embed], 0, out=S)
        return B

    def _specs(self, K: Tensor, dev: torch.device) -> list[Spec]:
        """Each layer's readers (the metric's as layer L, :data:`Spec`): the writers they may read are those
        before the layer, and this layer's heads too where the block's MLP reads after the attention's add
        (``block.sees("mlp", "attn")``: sequential blocks, not parallel ones)."""
        ew = self.ew
        vis = ew.g.mask.to(dev)
        n, L = ew.H + 2 * ew.Hkv, self.a.n_layers
        mlp_sees_heads = ew.block.sees("mlp", "attn")
        specs: list[Spec] = []
        for l in range(L + 1):
            if l < L:
                cols = list(range(ew.q0[l], ew.q0[l] + n)) + ([ew.mlp_r[l]] if ew.has_mlp else [])
                nw = ew.head0[l]
                top = nw + (ew.H if mlp_sees_heads else 0)
            else:
                cols, nw, top = [ew.out_r], ew.W, ew.W
            C, comp = self._coef(K[:top, cols], vis[:top, cols])
            own = (comp | (C != 0).any(0)).tolist()
            if l == L:
                sel = [0] if own[0] else []
            else:
                sel = (list(range(n)) if any(own[:n]) else []) + ([n] if ew.has_mlp and own[n] else [])
            specs.append((nw, C, comp, sel))
        return specs

    def _block(self, B: Tensor, specs: list[Spec], l0: int, l1: int, out: Tensor) -> list[Optional[Tensor]]:
        """The inputs [|sel|, P T, d] of layers l0 … l1 − 1's own readers (``specs``: nw, C, comp, sel) from the
        writers before layer l0 (x and S as they are now), one product (None: a layer without such readers)."""
        nw0 = specs[l0][0]
        Cs, comps, sizes = [], [], []
        for nw, C, comp, sel in specs[l0:l1]:
            Cs.append(C[:nw0, sel])
            comps.append(comp[sel])
            sizes.append(len(sel))
        if not sum(sizes):
            return [None] * (l1 - l0)
        X = self._mix(B, torch.cat(Cs, 1), torch.cat(comps), nw0, out[: sum(sizes)])
        return [t if t.shape[0] else None for t in X.split(sizes)]

    def _coef(self, Kc: Tensor, vis: Tensor) -> tuple[Tensor, Tensor]:
        """(C, comp) for readers' columns ``Kc`` [w, n]: a reader whose edges are mostly ablated uses the
        complement, x_r = x + S − Σ_w (1 − K_wr) D_w (comp True, C = K − 1 on its edges), else
        x_r = x + Σ_w K_wr D_w (C = K): the product runs over whichever set of writers is smaller."""
        n_vis = vis.sum(0)
        comp = Kc.sum(0) > n_vis / 2
        C = torch.where(comp[None], (Kc - 1) * vis, Kc)
        return C, comp

    def _mix(self, B: Tensor, C: Tensor, comp: Tensor, hi: int, out: Optional[Tensor] = None) -> Tensor:
        """x + comp_r S + Σ_{w < hi} C[w, r] D_w for each column r of C, [n, P T, d], as one product over the
        rows of B = [x, S, D_0, D_1, …] (evaluate's buffer): the rows it uses gathered when they are few, else
        B's leading rows in place, up to the last writer used."""
        Cx = torch.cat([torch.ones_like(C[:1]), comp[None].to(C.dtype), C[:hi]])  # [2 + hi, n]
        rows = torch.nonzero((Cx[2:] != 0).any(1)).flatten()
        P, T, d = B.shape[1:]
        if rows.numel() <= hi // 4:
            idx = torch.cat([torch.arange(2, device=rows.device), rows + 2])
            Bv, Cx = B.index_select(0, idx), Cx[idx]
        else:
            Bv = B[: int(rows[-1]) + 3]
            Cx = Cx[: Bv.shape[0]]
        Cx = Cx.T.to(B.dtype)
        if out is None:
            return torch.mm(Cx, Bv.view(Bv.shape[0], -1)).view(-1, P * T, d)
        return torch.mm(Cx, Bv.view(Bv.shape[0], -1), out=out).view(-1, P * T, d)

    def _read_qkv(self, l: int, norm: Optional[str], X: Tensor, P: int, T: int) -> Tensor:
        """q | k | v [P, T, H + 2 Hkv, dh] from each q/k/v reader's own input X [n, P T, d] (changed in
        place) through the readers' norm ``norm`` (None: raw): N(x_r) W_r + b_r
        (:meth:`interp.engine.internal.Engine.norm`, fused into the projection). A norm in full precision:
        ((x_r − μ) ⊙ γ) W_r / σ_r + β W_r + b_r (RMS: no μ, no β) — the norm's gain folded into W and its
        scale applied after the product, on d_head columns."""
        ew, e = self.ew, self.e
        n, PT, d = X.shape
        W = e.W_qkv[l].view(d, n, ew.dh).permute(1, 0, 2)  # [n, d, dh]
        b = e.b_qkv[l].view(n, ew.dh) if e.b_qkv is not None else torch.zeros(n, ew.dh, dtype=X.dtype, device=X.device)
        kind = self.a.norm
        if norm is None or X.dtype in (torch.float16, torch.bfloat16):
            out = torch.bmm(e.norm_at(norm, l, X), W)
        else:
            gain, beta = e.norm_weights(norm, l)
            if kind == "layernorm":
                X.sub_(X.mean(-1, keepdim=True))
                if beta is not None:
                    b = b + (beta @ e.W_qkv[l]).view(n, ew.dh)
            ms = torch.linalg.vector_norm(X, dim=-1, keepdim=True).square_().div_(d)  # mean square, [n, P T, 1]
            out = torch.bmm(X, W * gain[:, None] if gain is not None else W)
            out.mul_(ms.add_(self.a.norm_eps).rsqrt_())
        return out.view(n, P, T, ew.dh).permute(1, 2, 0, 3) + b  # [P, T, n, dh]

    # ------------------------------------------------------------------ a normed stream

    def _copies(
        self,
        tokens: Tensor,
        mask: Tensor,
        parts: dict[str, Tensor],
        abl: Optional[Acts],
        K: Tensor,
        read: Any,
        prompt: Tensor,
    ) -> Tensor:
        """A normed stream (post-norm): each reader with an ablated edge reads its own copy V_r of the stream,
        replayed with its ablated writers' values and every Add & Norm recomputed on it (:class:`_Copies`)."""
        ew, e, w = self.ew, self.e, self.w
        P, T = tokens.shape
        D = torch.empty(P, ew.W, T, self.a.d_model, dtype=ew.model.dtype, device=tokens.device)  # ã_w − a_w
        for site, i in ew.embed_idx.items():
            D[:, i] = (abl.embed[site] - parts[site]) if abl is not None else -parts[site]
        special = [r for r in range(ew.R) if bool((K[:, r] != 0).any())]
        run = _Copies(self, D, K[:, torch.tensor(special, dtype=torch.long, device=K.device)], special, abl, mask)
        x0 = reduce(operator.add, parts.values())  # Σ in order, without sum()'s leading 0
        V = run.joined(x0[:, None].expand(P, len(special), T, self.a.d_model), 0, ew.n_embed)
        if w.ln_emb_w is not None:
            V, x = (e.norm(t, w.ln_emb_w, w.ln_emb_b, "layernorm") for t in (V, x0))
        else:
            x = x0
        for l in range(self.a.n_layers):
            run.l = l
            x, V = run_block(ew.block, run, (x, V))
        return read(run.inputs((x, V), [ew.out_r])[:, :, 0], prompt)


def _layer_acts(l: int, z: Tensor) -> Acts:
    """An :class:`Acts` whose layer l's z is ``z`` (all :meth:`EdgeWrites.head_delta` reads of this run; the other
    entries are placeholders)."""
    return Acts(embed={}, z=[z] * (l + 1), mlp=[])


class _Mixed:
    """:meth:`AblatedForward._buffered`'s interpreter of the block (:class:`interp.models.internal.BlockOps`) on the
    buffer B = [x, S, D_0, …] (the stream ``x`` is B's first row, updated in place): each sublayer reads its
    readers' own inputs X where some edge into them is ablated (:meth:`inputs`), the clean stream elsewhere;
    each sublayer's output, as it joins the stream, gives its writers' rows D_w = ã_w − a_w."""

    def __init__(self, f: AblatedForward, B: Tensor, specs: list[Spec], abl: Optional[Acts], mask: Tensor):
        self.f, self.ew, self.e, self.B, self.specs, self.abl, self.mask = f, f.ew, f.e, B, specs, abl, mask
        self.x, self.S, self.D = B[0], B[1], B[2:]
        P, T, d = self.x.shape
        self.n = f.ew.H + 2 * f.ew.Hkv
        self.mlp_sees_heads = f.ew.block.sees("mlp", "attn")  # the MLP reads after the attention's add
        self.heads_normed = f.ew.block.out_norm("attn") is not None  # an output norm on the attention
        blk = f.LAYERS_PER_PRODUCT
        self.dx = torch.zeros_like(self.x)  # x − x at the product's first layer
        self.ws = torch.empty(blk * (self.n + 1), P * T * d, dtype=B.dtype, device=B.device)  # its room, reused
        self.Xs: list[Optional[Tensor]] = []
        self.l = self.l0 = 0
        self.X: Optional[Tensor] = None
        self.z: Optional[Tensor] = None
        self.attn: Optional[Tensor] = None

    def inputs(self, l: int) -> Optional[Tensor]:
        """Layer l's readers' own inputs X [|sel|, P T, d] (None: every reader reads the clean stream): from the
        product over the writers before the first layer of its group of layers (:meth:`AblatedForward._block`),
        plus x's change and the writers since."""
        f, D, blk = self.f, self.D, self.f.LAYERS_PER_PRODUCT
        nw, C, comp, sel = self.specs[l]
        if l % blk == 0:
            self.l0, self.Xs = l, f._block(self.B, self.specs, l, min(l + blk, len(self.specs)), self.ws)
            self.dx.zero_()
        X = self.Xs[l - self.l0]
        if X is not None and l > self.l0:  # the writers since the group's first layer: x's change and their D
            X.add_(self.dx.view(-1, X.shape[-1]))
            w0 = self.specs[self.l0][0]
            coef = C[w0:nw, sel] + comp[sel].to(D.dtype)
            X.view(len(sel), -1).addmm_(coef.T, D[w0:nw].reshape(nw - w0, -1))
        self.l, self.X = l, X
        return X

    def point(self, site: str, v: Tensor) -> Tensor:
        if site == "attn_out":
            self.attn = v
            self._head_deltas()
        elif site == "mlp_out":
            i = self.ew.mlp_w[self.l]
            if self.abl is not None:
                torch.sub(self.abl.mlp[self.l], v, out=self.D[i])  # type: ignore[arg-type]
            else:
                torch.neg(v, out=self.D[i])
        return v

    def _head_deltas(self) -> None:
        """D_h = ã_h − a_h of the layer's heads, into their rows of D: through Δz, one product with W_O; under
        an output norm on the attention each head's image at its run's σ' (:meth:`EdgeWrites.head_delta`)."""
        ew, l, z, abl = self.ew, self.l, self.z, self.abl
        assert z is not None
        nw, H = ew.head0[l], ew.H
        Dh = self.D[nw : nw + H]
        if self.heads_normed:
            Dh.copy_(ew.head_delta(l, abl, _layer_acts(l, z)).transpose(0, 1))
        else:
            P, T = z.shape[:2]
            dz = (abl.z[l] - z) if abl is not None else -z
            torch.bmm(dz.permute(2, 0, 1, 3).reshape(H, P * T, ew.dh), ew.w.W_O[l], out=Dh.view(H, P * T, -1))

    def read(self, sub: str, norm: Optional[str], stream: Tensor) -> Tensor:
        """The attention: its q|k|v (the projection fused into the mixed readers' norm, :meth:`_read_qkv`); the
        MLP: its input through its norm."""
        ew, e, l, X, n = self.ew, self.e, self.l, self.X, self.n
        sel = self.specs[l][3]
        if sub == "attn":
            if X is not None and sel[0] == 0:  # the q/k/v readers' own inputs
                return self.f._read_qkv(l, norm, X[:n], *stream.shape[:2])
            return e.project_qkv(l, e.norm_at(norm, l, stream))
        h_in = stream
        if X is not None and sel[-1] == n:  # the MLP's own input: X's last row
            h_in = X[-1].view(stream.shape)
            if self.mlp_sees_heads:  # + attn + comp Σ_h D_h + Σ_h C_h D_h, the heads' part one product
                assert self.attn is not None
                nw, C, comp, _ = self.specs[l]
                h_in.add_(self.attn)
                ch = C[nw : nw + ew.H, n] + comp[n].to(h_in.dtype)
                if bool((ch != 0).any()):
                    h_in.view(1, -1).addmm_(ch[None], self.D[nw : nw + ew.H].reshape(ew.H, -1))
        return e.norm_at(norm, l, h_in)

    def apply(self, sub: str, h: Tensor) -> Tensor:
        if sub == "attn":
            self.z = self.e.attention(self.l, h, self.mask)
            return self.e.attn_out(self.l, self.z)
        return self.e.mlp(self.l, h)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        return self.e.norm_at(norm, self.l, out)

    def add(self, sub: str, stream: Tensor, out: Tensor) -> Tensor:
        """x and dx gain the output; S the writers' D_w."""
        ew = self.ew
        if sub == "attn":
            nw = ew.head0[self.l]
            self.S.add_(self.D[nw : nw + ew.H].sum(0))
        else:
            self.S.add_(self.D[ew.mlp_w[self.l]])
        self.dx.add_(out)
        return stream.add_(out)

    def norm(self, norm: str, stream: Tensor) -> Tensor:
        raise AssertionError("a stream normed after each join takes the readers' own copies (_Copies)")


class _Copies:
    """:meth:`AblatedForward._copies`'s interpreter of the block (:class:`interp.models.internal.BlockOps`) on the pair
    (x, V): the clean stream x [P, T, d] and the special readers' own copies V [P, S, T, d] (``special``: the
    readers with an ablated edge, ``Ks`` [W, S] their columns of K); each join adds Σ_w K_ws D_w of the
    sublayer's writers to the copies, each norm is recomputed on both."""

    def __init__(self, f: AblatedForward, D: Tensor, Ks: Tensor, special: list[int], abl: Optional[Acts], mask: Tensor):
        self.ew, self.e, self.D, self.Ks, self.abl, self.mask = f.ew, f.e, D, Ks, abl, mask
        self.pos = {r: i for i, r in enumerate(special)}
        self.heads_normed = f.ew.block.out_norm("attn") is not None  # an output norm on the attention
        self.l = 0
        self.z: Optional[Tensor] = None

    def joined(self, V: Tensor, i0: int, i1: int) -> Tensor:
        """V + Σ_{w in [i0, i1)} K_ws D_w."""
        return V + torch.einsum("ws,pwtd->pstd", self.Ks[i0:i1], self.D[:, i0:i1])

    def inputs(self, stream: tuple[Tensor, Tensor], rs: list[int]) -> Tensor:
        """Readers ``rs``' inputs [P, T, n, d]: a special reader's own copy, the clean stream for the others."""
        x, V = stream
        return torch.stack([V[:, self.pos[r]] if r in self.pos else x for r in rs], dim=2)

    def point(self, site: str, v: Any) -> Any:
        """At a sublayer's output, its writers' D_w = ã_w − a_w (the heads' by :meth:`EdgeWrites.head_delta`)."""
        ew, l, D, abl = self.ew, self.l, self.D, self.abl
        if site == "attn_out":
            z = self.z
            assert z is not None
            nw = ew.head0[l]
            if self.heads_normed:
                D[:, nw : nw + ew.H] = ew.head_delta(l, abl, _layer_acts(l, z))
            else:  # through Δz
                D[:, nw : nw + ew.H] = ew.head_writes(l, (abl.z[l] - z) if abl is not None else -z)
        elif site == "mlp_out":
            i = ew.mlp_w[l]
            D[:, i] = (abl.mlp[l] - v) if abl is not None else -v
        return v

    def read(self, sub: str, norm: Optional[str], stream: tuple[Tensor, Tensor]) -> Tensor:
        ew, l = self.ew, self.l
        if sub == "attn":
            return self.e.norm_at(norm, l, self.inputs(stream, list(range(ew.q0[l], ew.q0[l] + ew.H + 2 * ew.Hkv))))
        return self.e.norm_at(norm, l, self.inputs(stream, [ew.mlp_r[l]])[:, :, 0])

    def apply(self, sub: str, h: Tensor) -> Tensor:
        """The attention on its readers' own inputs h [P, T, n, d] (each projected by its own head's weights)."""
        e, w, l, H, Hkv = self.e, self.ew.w, self.l, self.ew.H, self.ew.Hkv
        if sub == "mlp":
            return e.mlp(l, h)
        qkv = torch.cat(
            [
                torch.einsum("pthd,hde->pthe", h[:, :, :H], w.W_Q[l]) + w.b_Q[l],
                torch.einsum("pthd,hde->pthe", h[:, :, H : H + Hkv], w.W_K[l]) + w.b_K[l],
                torch.einsum("pthd,hde->pthe", h[:, :, H + Hkv :], w.W_V[l]) + w.b_V[l],
            ],
            dim=2,
        )
        self.z = e.attention(l, qkv, self.mask)
        return e.attn_out(l, self.z)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        return self.e.norm_at(norm, self.l, out)

    def add(self, sub: str, stream: tuple[Tensor, Tensor], out: Tensor) -> tuple[Tensor, Tensor]:
        ew, (x, V) = self.ew, stream
        w0 = ew.head0[self.l] if sub == "attn" else ew.mlp_w[self.l]
        return x + out, self.joined(V + out[:, None], w0, w0 + (ew.H if sub == "attn" else 1))

    def norm(self, norm: str, stream: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        x, V = stream
        return self.e.norm_at(norm, self.l, x), self.e.norm_at(norm, self.l, V)
