"""Circuit evaluation's forward: every reader's input its own (:class:`AblatedForward`).

A forward in which reader r's input is the stream with every ablated edge w → r's write replaced,

    x_r = Σ_w [(1 − K_wr) a_w + K_wr ã_w] + biases,

with a_w this run's write, ã_w its ablated value (:class:`interp.edges.EdgeWrites`), and every norm
recomputed (post-norm: along r's own copy of the stream, every Add & Norm on the way). The block maths
(norms, projections, attention, MLP, sandwich norms) is the engine's (:class:`interp.engine.Engine`);
what is this module's own is the bookkeeping that gives each reader its input in a few large products.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any, Optional

import torch
from torch import Tensor

from interp.edges._writes import Acts, EdgeWrites

__all__ = ["AblatedForward"]


class AblatedForward:
    """The metric of a run in which each edge's reader sees its ablated edges' writes replaced (module
    docstring): :meth:`__call__` with K [W, R] (1 = ablated)."""

    def __init__(self, writes: EdgeWrites):
        self.ew, self.e, self.a, self.w = writes, writes.e, writes.a, writes.w

    def _ln1(self, l: int, x: Tensor) -> Tensor:
        return self.e.read_norm(x, l, "attn")

    def _ln2(self, l: int, x: Tensor) -> Tensor:
        return self.e.read_norm(x, l, "mlp")

    def __call__(self, tokens: Tensor, mask: Tensor, abl: Optional[Acts], K: Tensor, read: Any, prompt: Tensor
                 ) -> Tensor:
        """The metric [P] of prompts ``prompt`` (``tokens`` [P, T] theirs) with every edge's reader seeing
        (1 − K_wr) a_w + K_wr ã_w (module docstring).

        ``abl`` the ablated writes (None: zero); ``K`` [W, R] (1 = the edge is ablated); ``read`` a
        :class:`interp.causal.MetricReader`.

        Pre-norm and parallel blocks: one buffer B [2 + W, P, T, d] holds the clean stream x, S = Σ D_w over
        the writers so far and each D_w = ã_w − a_w(this run), writer-major, so that the inputs of a layer's
        readers, x_r = x + comp_r S + Σ_w C_wr D_w (:meth:`_coef`), are one product Cᵀ B over B's rows
        (:meth:`_mix`) and each reader's norm is applied after its projection (:meth:`_read_qkv`).
        """
        ew, e, a, w = self.ew, self.e, self.a, self.w
        P, T = tokens.shape
        d = a.d_model
        K = (K.to(ew.model.dtype) * ew.g.mask.to(K.device)).to(tokens.device)
        dev, dt = tokens.device, ew.model.dtype
        H, Hkv = ew.H, ew.Hkv

        def head_delta(l: int, z: Tensor) -> Tensor:
            return ew.head_writes(l, (abl.z[l] - z) if abl is not None else -z)

        sandwich = w.ln1_post_w is not None

        def mlp_delta(l: int, m: Tensor) -> Tensor:
            return (abl.mlp[l] - m) if abl is not None else -m  # type: ignore[operator]

        with torch.inference_mode():
            parts = e.embed_parts(tokens)
            if ew.post:
                Dp = torch.empty(P, ew.W, T, d, dtype=dt, device=dev)  # ã_w − a_w(this run)
                for site, i in ew.embed_idx.items():
                    Dp[:, i] = (abl.embed[site] - parts[site]) if abl is not None else -parts[site]
                return self._post(tokens, mask, parts, Dp, head_delta, mlp_delta, K, read, prompt)
            B = torch.empty(2 + ew.W, P, T, d, dtype=dt, device=dev)
            x, S, D = B[0], B[1], B[2:]  # updated in place: B's rows are what the products read
            x.copy_(e.embed(parts))
            for site, i in ew.embed_idx.items():
                if abl is not None:
                    torch.sub(abl.embed[site], parts[site], out=D[i])
                else:
                    torch.neg(parts[site], out=D[i])
            torch.sum(D[: ew.n_embed], 0, out=S)
            vis = ew.g.mask.to(dev)
            n = H + 2 * Hkv
            L = a.n_layers
            # each layer's readers (the metric's as layer L): C, comp and the columns whose input is not x
            specs: list[tuple[int, Tensor, Tensor, list[int]]] = []
            for l in range(L + 1):
                if l < L:
                    cols = list(range(ew.q0[l], ew.q0[l] + n)) + ([ew.mlp_r[l]] if ew.has_mlp else [])
                    nw = ew.head0[l]
                    top = nw + (H if ew.has_mlp and not a.parallel_attn_mlp else 0)  # the MLP may read this layer's heads
                else:
                    cols, nw, top = [ew.out_r], ew.W, ew.W
                C, comp = self._coef(K[:top, cols], vis[:top, cols])
                own = (comp | (C != 0).any(0)).tolist()
                if l == L:
                    sel = [0] if own[0] else []
                else:
                    sel = (list(range(n)) if any(own[:n]) else []) + ([n] if ew.has_mlp and own[n] else [])
                specs.append((nw, C, comp, sel))
            blk = 4  # the inputs of a block of layers' readers from one pass over the writers before it
            dx = torch.zeros_like(x)  # x − x at the block's start
            ws = torch.empty(blk * (n + 1), P * T * d, dtype=dt, device=dev)  # their room, reused block to block
            Xs: list[Optional[Tensor]] = []
            l0 = 0
            for l in range(L + 1):
                nw, C, comp, sel = specs[l]
                if l % blk == 0:
                    l0, Xs = l, self._block(B, specs, l, min(l + blk, L + 1), ws)
                    dx.zero_()
                X = Xs[l - l0]
                if X is not None and l > l0:  # the writers since the block's start: x's change and their D
                    X.add_(dx.view(P * T, d))
                    w0 = specs[l0][0]
                    coef = C[w0:nw, sel] + comp[sel].to(dt)
                    X.view(len(sel), -1).addmm_(coef.T, D[w0:nw].reshape(nw - w0, -1))
                if l == L:
                    return read(x if X is None else X[0].view(P, T, d), prompt)
                mix_qkv, mix_mlp = bool(sel) and sel[0] == 0, bool(sel) and sel[-1] == n
                if mix_qkv:
                    qkv = self._read_qkv(l, X[:n], P, T)  # type: ignore[index]
                else:
                    qkv = e.project_qkv(l, self._ln1(l, x))
                z = e.attention(l, qkv, mask)
                Dh = D[nw: nw + H]
                if sandwich:  # each head's image at its run's σ' (see head_delta)
                    this_l = Acts(embed={}, z=[z if i == l else z[:0] for i in range(l + 1)], mlp=[])
                    Dh.copy_(ew.head_delta(l, abl, this_l).transpose(0, 1))
                else:
                    dz = (abl.z[l] - z) if abl is not None else -z
                    torch.bmm(dz.permute(2, 0, 1, 3).reshape(H, P * T, ew.dh), w.W_O[l], out=Dh.view(H, P * T, d))
                attn = e.joined(l, e.attn_out(l, z), "attn")
                if not ew.has_mlp:
                    S.add_(Dh.sum(0))
                    x.add_(attn)
                    dx.add_(attn)
                    continue
                if a.parallel_attn_mlp:  # reads x and S before this layer's heads
                    h_in = X[-1].view(P, T, d) if mix_mlp else x  # type: ignore[index]
                elif mix_mlp:  # x + attn + comp (S + Σ_h D_h) + Σ_w C_w D_w, the heads' part as one product
                    h_in = X[-1].view(P, T, d)  # type: ignore[index]
                    h_in.add_(attn)
                    ch = C[nw: nw + H, n] + comp[n].to(dt)
                    if bool((ch != 0).any()):
                        h_in.view(1, -1).addmm_(ch[None], Dh.reshape(H, -1))
                else:
                    h_in = x + attn
                S.add_(Dh.sum(0))
                m = e.joined(l, e.mlp(l, self._ln2(l, h_in)), "mlp")
                i = ew.mlp_w[l]
                if abl is not None:
                    torch.sub(abl.mlp[l], m, out=D[i])  # type: ignore[arg-type]
                else:
                    torch.neg(m, out=D[i])
                S.add_(D[i])
                x.add_(attn).add_(m)
                dx.add_(attn).add_(m)
            raise AssertionError("unreachable")

    def _block(self, B: Tensor, specs: list[tuple[int, Tensor, Tensor, list[int]]], l0: int, l1: int, out: Tensor
               ) -> list[Optional[Tensor]]:
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

    def _read_qkv(self, l: int, X: Tensor, P: int, T: int) -> Tensor:
        """q | k | v [P, T, H + 2 Hkv, dh] from each q/k/v reader's own input X [n, P T, d] (changed in
        place): N(x_r) W_r + b_r (:meth:`interp.engine.Engine.norm`, fused into the projection). Pre-norm in full precision: ((x_r − μ) ⊙ γ) W_r / σ_r + β W_r + b_r (RMS: no
        μ, no β) — the norm's gain folded into W and its scale applied after the product, on d_head columns."""
        ew, e = self.ew, self.e
        n, PT, d = X.shape
        W = e.W_qkv[l].view(d, n, ew.dh).permute(1, 0, 2)  # [n, d, dh]
        b = e.b_qkv[l].view(n, ew.dh) if e.b_qkv is not None else torch.zeros(n, ew.dh, dtype=X.dtype, device=X.device)
        kind = self.a.norm
        norm = ew.block.read_norm("attn")  # the q/k/v readers' own norm, or None: they read the stream raw
        if norm is None or X.dtype in (torch.float16, torch.bfloat16):
            out = torch.bmm(self._ln1(l, X), W)
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

    def _post(self, tokens: Tensor, mask: Tensor, parts: dict[str, Tensor], D: Tensor, head_delta: Any,
              mlp_delta: Any, K: Tensor, read: Any, prompt: Tensor) -> Tensor:
        """Post-norm: each reader with an ablated edge reads its own copy V_r of the stream, replayed with
        its ablated writers' values and every Add & Norm recomputed on it."""
        ew, e, a, w = self.ew, self.e, self.a, self.w
        P, T = tokens.shape
        H, Hkv = ew.H, ew.Hkv
        special = [r for r in range(ew.R) if bool((K[:, r] != 0).any())]
        sp = torch.tensor(special, dtype=torch.long, device=K.device)
        Ks = K[:, sp]  # [W, S]

        def add(V: Tensor, i0: int, i1: int) -> Tensor:  # V += Σ_{w in [i0, i1)} K_ws D_w
            return V + torch.einsum("ws,pwtd->pstd", Ks[i0:i1], D[:, i0:i1])

        x0 = reduce(operator.add, parts.values())  # Σ in order, without sum()'s leading 0
        V = add(x0[:, None].expand(P, len(special), T, a.d_model), 0, ew.n_embed)
        if w.ln_emb_w is not None:
            V, x = (e.norm(t, w.ln_emb_w, w.ln_emb_b, "layernorm") for t in (V, x0))
        else:
            x = x0
        pos = {r: i for i, r in enumerate(special)}

        def inputs(base: Tensor, rs: list[int]) -> Tensor:  # [P, T, n, d]
            cols = [V[:, pos[r]] if r in pos else base for r in rs]
            return torch.stack(cols, dim=2)

        for l in range(a.n_layers):
            r0 = ew.q0[l]
            hn = inputs(x, list(range(r0, r0 + H + 2 * Hkv)))  # each reader's own input (post-norm: no norm)
            qkv = torch.cat([torch.einsum("pthd,hde->pthe", hn[:, :, :H], w.W_Q[l]) + w.b_Q[l],
                             torch.einsum("pthd,hde->pthe", hn[:, :, H: H + Hkv], w.W_K[l]) + w.b_K[l],
                             torch.einsum("pthd,hde->pthe", hn[:, :, H + Hkv:], w.W_V[l]) + w.b_V[l]], dim=2)
            z = e.attention(l, qkv, mask)
            nw = ew.head0[l]
            D[:, nw: nw + H] = head_delta(l, z)
            attn = e.attn_out(l, z)
            V = e.norm(add(V + attn[:, None], nw, nw + H), w.ln1_w[l], w.ln1_b[l])
            mid = e.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
            if not ew.has_mlp:
                x = mid
                continue
            h_in = inputs(mid, [ew.mlp_r[l]])[:, :, 0]
            m = e.mlp(l, h_in)
            i = ew.mlp_w[l]
            D[:, i] = mlp_delta(l, m)
            V = e.norm(add(V + m[:, None], i, i + 1), w.ln2_w[l], w.ln2_b[l])
            x = e.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
        return read(inputs(x, [ew.out_r])[:, :, 0], prompt)
