"""Every edge of an attribution graph: the frozen replacement model's Jacobian between its sources and targets.

With attention patterns and norm scales frozen and every MLP write a source, the stream is linear in the
sources, so the edge from a source s (a vector v_s written at position p_s into the stream x_{k+1} after
layer k; an embedding into x_0) to a target t (a read r_t at position p_t of the stream layer l's MLP reads,
or of the final stream for an output) is

    A[t, s] = r_t · J_{l←k}[p_t, p_s] v_s,   J = the frozen layers k+1 … l (attention, skip terms),

and each layer is x ↦ x + N1ᵀ-folded attention (where the block's MLP reads after the attention's add; a parallel
block's MLP reads x itself, so its targets and skip terms sit before the attention: the block's steps order them):

    Attn(x)_q = Σ_h Σ_k P_h[q, k] / (σ_post[q] σ1[k]) · x_k (C diag γ1 W_V^{kv(h)}) (W_O^h C diag γ_post)

(C: LayerNorm's centring, identity for RMSNorm; γ_post, σ_post only where the block norms the attention's output,
γ1, σ1 only where the attention reads through a norm). Two directions compute it: a target's gradient carried
*down* (Jᵀ r_t, one product by W_O and one by W_V per layer, the patterns transposed in between) reads off the
edges of the sources it passes; a source carried *up* (J v_s) reads off the edges of the targets it passes. Each
costs per layer and per position the same two products, so the work is Σ_t (layers down) × (positions ≤ p_t) + Σ_s
(layers up) × (positions ≥ p_s). Targets above a meeting layer m go down to x_m, sources below it go up to x_m,
and the pairs across m are one product there, A[t, s] = Σ_p (Jᵀ r_t)_p · (J v_s)_p; m is chosen to minimise the
estimated work (m = 0: every target goes down to the embeddings, the plain backward method), within a memory
budget for the sources kept at x_m. Causality bounds each pass: a target has no gradient past p_t, a source no
image before p_s, so targets are taken in position order (each pass keeps positions ≤ its last target's) and
sources in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from interp.features._replacement import FrozenReplacement

__all__ = ["Ends", "FrozenJacobian"]


@dataclass
class Ends:
    """One side of the edges: vectors [m, d] (reads r_t or writes v_s), their layer [m] (a target's: the layer
    whose MLP reads it, n_layers for an output; a source's: the layer whose MLP wrote it, −1 for an
    embedding), position [m], and their index [m] in the adjacency matrix (row or column)."""

    vecs: Tensor
    layer: Tensor
    pos: Tensor
    index: Tensor

    def take(self, i: Tensor) -> "Ends":
        return Ends(self.vecs[i.to(self.vecs.device)], self.layer[i], self.pos[i], self.index[i])


class _Packed:
    """Vectors at positions packed for one batched product per position: ``D`` [n, d, J] (slot j of position p
    holds the j-th vector at p), ``flat`` [m] each vector's index in a flattened [n J] result."""

    def __init__(self, vecs: Tensor, pos: Tensor, n: int):
        pos = pos.to(vecs.device)
        counts = torch.bincount(pos, minlength=n)
        self.J = J = max(int(counts.max()) if len(pos) else 0, 1)
        order = torch.argsort(pos, stable=True)
        slot = torch.empty_like(pos)
        slot[order] = torch.arange(len(pos), device=pos.device) - (counts.cumsum(0) - counts)[pos[order]]
        self.D = torch.zeros(n, vecs.shape[-1], J, dtype=vecs.dtype, device=vecs.device)
        self.D[pos, :, slot] = vecs
        self.flat, self.pos = pos * J + slot, pos

    def dot(self, X: Tensor, p0: int) -> tuple[Tensor, Tensor]:
        """X [R, n_x, d] covering positions p0 … p0 + n_x − 1 dotted with each packed vector at its own position:
        ([R, m'] values, the [m] mask of the vectors inside that range)."""
        n_x = X.shape[1]
        out = torch.bmm(X.transpose(0, 1), self.D[p0 : p0 + n_x])  # [n_x, R, J]
        keep = (self.pos >= p0) & (self.pos < p0 + n_x)
        return out.transpose(0, 1).reshape(X.shape[0], -1)[:, self.flat[keep] - p0 * self.J], keep


class FrozenJacobian:
    """The frozen model's layers as folded matrices (module docstring), and :meth:`fill`."""

    def __init__(self, fr: "FrozenReplacement", n: int):
        a, w = fr.a, fr.w
        H, Hkv, d = a.n_heads, a.n_kv_heads, a.d_model
        dh = int(w.W_O.shape[-2])
        self.fr, self.n, self.H, self.Hkv, self.dh, self.d, self.L = fr, n, H, Hkv, dh, d, a.n_layers
        self.WO: list[Tensor] = []  # [H dh, d]: W_O C diag γ_post
        self.WV: list[Tensor] = []  # [Hkv dh, d]: (C diag γ1 W_V)ᵀ
        self.P: list[Tensor] = []  # [H, n, n]: P / σ_post[q] / σ1[k]
        normed = a.norm != "none"
        out, read = fr.block.out_norm("attn"), fr.block.read_norm("attn")  # the attention's output and read norms
        for l in range(a.n_layers):
            WO, P = w.W_O[l].reshape(H * dh, d), fr.patterns[l]
            if out is not None and normed:
                WO = WO - WO.mean(-1, keepdim=True) if a.norm == "layernorm" else WO
                gain = fr.gain(out, l)
                WO = WO * gain if gain is not None else WO
                P = P / fr.sigma(out, l).reshape(1, n, 1)
            WV = w.W_V[l].transpose(1, 2).reshape(Hkv * dh, d)
            if read is not None and normed:
                gain = fr.gain(read, l)
                WV = WV * gain if gain is not None else WV
                WV = WV - WV.mean(-1, keepdim=True) if a.norm == "layernorm" else WV
                P = P / fr.sigma(read, l).reshape(1, 1, n)
            self.WO.append(WO.contiguous())
            self.WV.append(WV.contiguous())
            self.P.append(P.contiguous())

    # ------------------------------------------------------------------ one layer, both directions

    def _down(self, G: Tensor, l: int, p0: int) -> None:
        """G += Attn_lᵀ G, in place, for G [R, n_x, d] at positions p0 …: Σ_h P_hᵀ (G W_O^{hᵀ}) W_V^{kv(h)ᵀ}."""
        R, n_x = G.shape[:2]
        Gf = G.view(R * n_x, self.d)
        gz = torch.mm(self.WO[l], Gf.t())  # [H dh, R n_x]
        P = self.P[l][:, p0 : p0 + n_x, p0 : p0 + n_x]
        gv = torch.bmm(gz.view(self.H, self.dh * R, n_x), P)  # Σ_q gz[q] P[q, k]
        if self.H != self.Hkv:
            gv = gv.view(self.Hkv, self.H // self.Hkv, -1).sum(1)
        Gf.addmm_(gv.view(self.Hkv * self.dh, R * n_x).t(), self.WV[l])

    def _up(self, X: Tensor, l: int, p0: int) -> None:
        """X += Attn_l X, in place, for X [S, n_x, d] at positions p0 …: Σ_h P_h (X W_V^{kv(h)}) W_O^h."""
        S, n_x = X.shape[:2]
        Xf = X.view(S * n_x, self.d)
        v = torch.mm(self.WV[l], Xf.t()).view(self.Hkv, 1, self.dh * S, n_x)  # [Hkv, 1, dh S, n_x]
        Pt = self.P[l][:, p0 : p0 + n_x, p0 : p0 + n_x].transpose(1, 2)
        z = torch.matmul(v, Pt.reshape(self.Hkv, self.H // self.Hkv, n_x, n_x))  # Σ_k v[k] P[q, k]
        Xf.addmm_(z.view(self.H * self.dh, S * n_x).t(), self.WO[l])

    def _skip(self, X: Tensor, l: int, p0: int, *, down: bool) -> Tensor:
        """A skip transcoder's linear term through N2's frozen map: down N2ᵀ(G W_skip), up skip(N2 X)."""
        fr = self.fr
        W = fr.tcs[l].W_skip
        assert W is not None
        norm = fr.block.read_norm("mlp")
        if norm is None:
            return X @ (W if down else W.T)
        gain, sigma = fr.gain(norm, l), fr.sigma(norm, l)[p0 : p0 + X.shape[1]]
        if down:
            return fr.e.norm_vjp(X @ W, None, gain, frozen=True, sigma=sigma)
        return fr.norm(X, gain, None, sigma) @ W.T

    # ------------------------------------------------------------------ the plan and the passes

    def _meeting_layer(self, tgt: Ends, src: Ends, budget: int) -> int:
        """The m minimising the estimated work (module docstring), sources kept at x_m within ``budget`` bytes."""
        L, n = self.L, self.n
        par = not self.fr.block.sees("mlp", "attn")  # a layer's MLP reads x_l itself: its targets pass no attention
        unit = (self.H + self.Hkv) * self.dh  # one position through one layer: unit · d multiply-adds
        item = self.WO[0].element_size()
        best, best_cost = 0, float("inf")
        tl, tp = tgt.layer.double(), tgt.pos.double()
        sl, sp = src.layer.double(), src.pos.double()
        for m in range(L + 1):
            up = tl >= m
            down = sl < m
            if int(down.sum()) * n * self.d * item > budget and m > 0:
                break
            steps_t = torch.where(tl == L, float(L - m), tl - m + (0.0 if par else 1.0))[up]  # layers passed
            cost = float((steps_t * (tp[up] + 1)).sum())
            cost += float(((m - 1 - sl[down]) * (n - sp[down])).sum())
            cost += float(up.sum()) * float(down.sum()) * n / unit
            if cost < best_cost:
                best, best_cost = m, cost
        return best

    def fill(self, A: Tensor, tgt: Ends, src: Ends, batch_size: int, budget: int = 1 << 30) -> int:
        """A[tgt.index[i], src.index[j]] = the edge from source j into target i (zero where j cannot reach i);
        returns the meeting layer used."""
        m = self._meeting_layer(tgt, src, budget)
        L, n = self.L, self.n
        up, down = tgt.layer >= m, src.layer < m
        t_up, t_low, s_up, s_low = (
            tgt.take(up.nonzero()[:, 0]),
            tgt.take((~up).nonzero()[:, 0]),
            src.take((~down).nonzero()[:, 0]),
            src.take(down.nonzero()[:, 0]),
        )
        src_by = [self._pack(s_up, k) for k in range(L)]  # sources each layer's targets pass going down
        tgt_by = [self._pack(t_low, l) for l in range(L)]  # targets each layer's sources pass going up
        C = torch.zeros(len(s_low.layer), n, self.d, dtype=src.vecs.dtype, device=src.vecs.device)
        order = torch.argsort(s_low.pos, descending=True, stable=True)
        for c0 in range(0, len(order), batch_size):
            idx = order[c0 : c0 + batch_size]
            idx = idx[torch.argsort(s_low.layer[idx], stable=True)]
            self._ascend(A, s_low.take(idx), tgt_by, m, C, idx)
        C = C.view(len(s_low.layer), n * self.d)
        order = torch.argsort(t_up.pos, stable=True)
        for c0 in range(0, len(order), batch_size):
            idx = order[c0 : c0 + batch_size]
            idx = idx[torch.argsort(t_up.layer[idx], descending=True, stable=True)]
            G = self._descend(A, t_up.take(idx), src_by, m)
            if len(s_low.layer):  # the pairs across m: Σ_p (Jᵀ r_t)_p · (J v_s)_p
                cross = torch.mm(G.view(G.shape[0], -1), C[:, : G.shape[1] * self.d].t())
                A[t_up.index[idx].to(A.device)[:, None], s_low.index.to(A.device)[None]] = cross.to(A.device)
        return m

    def _pack(self, ends: Ends, layer: int) -> tuple[_Packed, Tensor]:
        sel = (ends.layer == layer).nonzero()[:, 0]
        e = ends.take(sel)
        return _Packed(e.vecs, e.pos, self.n), e.index

    def _descend(self, A: Tensor, t: Ends, src_by: list[tuple[_Packed, Tensor]], m: int) -> Tensor:
        """Targets ``t`` (sorted by layer, highest first) carried down to x_m, the edges of the sources of layers
        ≥ m read off on the way: returns Jᵀ r [R, n_x, d] at x_m (positions 0 … n_x − 1).

        Each layer walks the block's steps last to first: at the MLP's add its sources (written there) are read
        off and the skip term's gradient taken; at the attention's add the rows live there go down through the
        attention; at the MLP's read the skip term joins and the layer's own targets (read there) come in."""
        fr, L = self.fr, self.L
        R, n_x, dev = len(t.layer), int(t.pos.max()) + 1, t.vecs.device
        G = torch.zeros(R, n_x, self.d, dtype=t.vecs.dtype, device=dev)
        pos, rows = t.pos.to(dev), t.index.to(A.device)
        above = [int((t.layer > l).sum()) for l in range(L + 1)]
        r = above[L - 1]  # outputs: read at the final stream
        G[torch.arange(r, device=dev), pos[:r]] = t.vecs[:r]
        for l in range(L - 1, m - 1, -1):
            r_gt, r_ge = above[l], (above[l - 1] if l else R)  # the targets above layer l, and of layer ≥ l
            live, skip = r_gt, None
            for step in fr.block.walk(reverse=True):
                if step.op == "add" and step.sub == "mlp":
                    if r_gt:
                        packed, cols = src_by[l]
                        vals, keep = packed.dot(G[:r_gt], 0)
                        A[rows[:r_gt, None], cols[keep.cpu()].to(A.device)[None]] = vals.to(A.device)
                    if r_gt and fr.tcs[l].W_skip is not None:
                        skip = self._skip(G[:r_gt], l, 0, down=True)
                elif step.op == "add" and step.sub == "attn":
                    if live:
                        self._down(G[:live], l, 0)
                elif step.op == "read" and step.sub == "mlp":
                    if skip is not None:
                        G[:r_gt] += skip
                    new = torch.arange(r_gt, r_ge, device=dev)
                    G[new, pos[new]] = t.vecs[new]
                    live = r_ge
        return G

    def _ascend(
        self, A: Tensor, s: Ends, tgt_by: list[tuple[_Packed, Tensor]], m: int, C: Tensor, slots: Tensor
    ) -> None:
        """Sources ``s`` (sorted by layer, lowest first) carried up to x_m, the edges into the targets of layers
        < m read off on the way; their images at x_m go to C[slots] [·, n, d].

        Each layer walks the block's steps in order: at the MLP's read the layer's targets are read off and the
        skip term taken; at the attention's add the live rows go up through the attention; at the MLP's add the
        skip term joins and the layer's own sources (written there) come in."""
        fr = self.fr
        S, dev = len(s.layer), s.vecs.device
        p0 = int(s.pos.min())
        X = torch.zeros(S, self.n - p0, self.d, dtype=s.vecs.dtype, device=dev)
        pos, cols = s.pos.to(dev) - p0, s.index.to(A.device)
        below = [int((s.layer < l).sum()) for l in range(m + 1)]  # sources written before layer l's attention
        e = below[0]  # embeddings
        X[torch.arange(e, device=dev), pos[:e]] = s.vecs[:e]
        for l in range(m):
            live, skip = below[l], None
            Xl = X[:live]
            for step in fr.block.walk():
                if step.op == "read" and step.sub == "mlp":
                    if live:
                        self._read(A, Xl, tgt_by[l], cols[:live], p0)
                    if live and fr.tcs[l].W_skip is not None:
                        skip = self._skip(Xl, l, p0, down=False)
                elif step.op == "add" and step.sub == "attn":
                    if live:
                        self._up(Xl, l, p0)
                elif step.op == "add" and step.sub == "mlp":
                    if skip is not None:
                        Xl += skip
                    new = torch.arange(live, below[l + 1], device=dev)
                    X[new, pos[new]] = s.vecs[new]
        C[slots.to(C.device), p0:] = X

    @staticmethod
    def _read(A: Tensor, X: Tensor, packed_rows: tuple[_Packed, Tensor], cols: Tensor, p0: int) -> None:
        packed, rows = packed_rows
        if not len(rows):
            return
        vals, keep = packed.dot(X, p0)
        A[rows[keep.cpu()].to(A.device)[:, None], cols[None]] = vals.t().to(A.device)
