"""The edge-level forward pass: every reader's input its own, and each reader's gradient on its own.

Built on the patching engine's pieces (:class:`interp.causal._engine.Engine`: norms, rotary, the
attention scale, the MLP, embeddings — the same numerics, tested against the bridge) with the one
thing a node-level forward does not have: a head's q, a KV head's k and v, an MLP's input and the
metric's read each get an input of their own.

Two passes:

* :meth:`EdgeForward.gradient` — a forward with autograd that keeps each reader's linear input (the
  fused q|k|v projection output, the MLP's normalised input, the final residual) and returns, per
  reader r, the gradient g_r = ∂M/∂x_r carried to the residual stream just before r's own norm
  (pre-norm) or at the stream r reads (post-norm): for a query head g_q W_Q^{hᵀ}, then the norm's
  vector-Jacobian product. ``scale="recomputed"`` uses the norm's true Jacobian (σ varies with x);
  ``scale="frozen"`` holds σ at this pass's value, the ledger's linear map γ ⊙ C(·)/σ. Optionally
  writes are mixed, w ← α a_w + (1 − α) ã_w (the token embedding only, or every write): the points
  of EAP-IG's path.
* :meth:`EdgeForward.evaluate` — a forward in which reader r's input is the stream with every
  ablated edge w → r's write replaced, x_r = Σ_w [(1 − K_wr) a_w + K_wr ã_w] + biases, with
  a_w this run's write, ã_w its ablated value, and every norm recomputed (post-norm: along r's own
  copy of the stream, every Add & Norm on the way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from interp.causal._engine import Engine, RunCache
from interp.models import Model
from interp.edges._graph import CircuitGraph

__all__ = ["EdgeForward", "GradientPass", "norm_vjp"]


def norm_vjp(g: Tensor, x: Tensor, gain: Optional[Tensor], kind: str, eps: float, *, frozen: bool) -> Tensor:
    """Jᵀg for the norm N at input ``x`` (``g`` at N's output; leading axes broadcast against ``x``).

    LayerNorm: Jᵀg = (C(γ⊙g) − x̂ (x̂·γ⊙g)/d)/σ with x̂ = C x/σ; RMSNorm: (γ⊙g − x̂ (x̂·γ⊙g)/d)/σ with
    x̂ = x/σ. ``frozen`` drops the x̂ term (σ held fixed): γ⊙C(g)/σ, the ledger's map.
    """
    if kind == "none":
        return g
    xc = x - x.mean(-1, keepdim=True) if kind == "layernorm" else x
    sigma = torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    u = g * gain if gain is not None else g
    if frozen:
        if kind == "layernorm":
            u = u - u.mean(-1, keepdim=True)
        return u / sigma
    xh = xc / sigma
    proj = (xh * u).mean(-1, keepdim=True)
    if kind == "layernorm":
        u = u - u.mean(-1, keepdim=True)
    return (u - xh * proj) / sigma


@dataclass
class GradientPass:
    """What :meth:`EdgeForward.gradient` returns: ``G`` [P, R, T, d] (each reader's gradient at the
    stream it reads, see the module docstring), the writes of this pass ``writes`` [P, W, T, d] (or
    None), the post-norm stream norms' inputs (for carrying gradients back through them) and ``M`` [P]."""

    G: Tensor
    writes: Optional[Tensor]
    norm_in: dict[str, Tensor]
    M: Tensor


class EdgeForward:
    """Forward passes of one model over its circuit graph (see the module docstring)."""

    def __init__(self, model: Model, graph: CircuitGraph, engine: Optional[Engine] = None):
        self.model, self.g = model, graph
        self.e = engine if engine is not None else Engine(model)
        a = model.arch
        self.a, self.w = a, model.weights
        self.post = a.norm_placement == "post"
        self.has_mlp = self.e.has_mlp
        self.W, self.R = len(graph.writers), len(graph.readers)
        wi, ri = graph.writer_info, graph.reader_info
        self.embed_idx = {w.site: i for i, w in enumerate(wi) if w.kind == "embed"}
        self.n_embed = len(self.embed_idx)
        self.head0 = [next(i for i, w in enumerate(wi) if w.kind == "head" and w.layer == l) for l in range(a.n_layers)]
        self.mlp_w = [next((i for i, w in enumerate(wi) if w.kind == "mlp" and w.layer == l), -1) for l in range(a.n_layers)]
        self.q0 = [next(i for i, r in enumerate(ri) if r.kind == "q" and r.layer == l) for l in range(a.n_layers)]
        self.mlp_r = [next((i for i, r in enumerate(ri) if r.kind == "mlp" and r.layer == l), -1) for l in range(a.n_layers)]
        self.out_r = self.R - 1
        H, G = a.n_heads, a.n_kv_heads
        self.H, self.G, self.dh = H, G, a.d_head
        L, w = a.n_layers, self.w
        flat = lambda W: W.permute(0, 2, 1, 3).reshape(L, a.d_model, -1)  # [L, n, m, h] -> [L, m, (n h)]
        self.W_qkv = torch.cat([flat(w.W_Q), flat(w.W_K), flat(w.W_V)], dim=2).contiguous()  # [L, m, (H + 2G) h]
        self.b_qkv = torch.cat([w.b_Q.reshape(L, -1), w.b_K.reshape(L, -1), w.b_V.reshape(L, -1)], dim=1)
        self.W_O = w.W_O.reshape(L, H * a.d_head, a.d_model)  # [L, (n h), m]

    # ------------------------------------------------------------------ pieces

    def _ln1(self, l: int, x: Tensor) -> Tensor:
        return x if self.post else self.e.norm(x, self.w.ln1_w[l], self.w.ln1_b[l])

    def _ln2(self, l: int, x: Tensor) -> Tensor:
        return x if self.post else self.e.norm(x, self.w.ln2_w[l], self.w.ln2_b[l])

    def _split(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        P, T = qkv.shape[:2]
        H, G, dh = self.H, self.G, self.dh
        return (qkv[..., : H * dh].view(P, T, H, dh), qkv[..., H * dh: (H + G) * dh].view(P, T, G, dh),
                qkv[..., (H + G) * dh:].view(P, T, G, dh))

    def _attend(self, l: int, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """z [P, T, H, dh] from pre-rotary q [P, T, H, dh] and k, v [P, T, G, dh] (the engine's attention)."""
        e, a = self.e, self.a
        P, T = q.shape[:2]
        H, G, dh = self.H, self.G, self.dh
        if a.positional == "rotary":
            cos, sin = (t.clone() for t in e.rope(T))  # the engine may have cached them in inference mode
            q, k = e._rotate(q, cos, sin), e._rotate(k, cos, sin)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [P, G, T, dh]
        allowed = mask[:, None, None, :].bool()  # [P, 1, 1, T] key padding
        if a.causal:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        if e.softmax_dtype == q.dtype:  # fused attention, the softmax in the model's precision
            z = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=allowed,
                                                                 scale=e.scales[l], enable_gqa=G < H)
            return z.transpose(1, 2)  # [P, T, H, dh]
        qg = q.view(P, T, G, H // G, dh).permute(0, 2, 3, 1, 4)  # [P, G, H/G, T, dh]
        scores = torch.matmul(qg, k[:, :, None].transpose(-1, -2)) * e.scales[l]  # [P, G, H/G, T, T]
        scores = scores.to(e.softmax_dtype).masked_fill(~allowed[:, :, None], torch.finfo(e.softmax_dtype).min)
        A = torch.softmax(scores, dim=-1).to(q.dtype)
        z = torch.matmul(A, v[:, :, None])  # [P, G, H/G, T, dh]
        return z.permute(0, 3, 1, 2, 4).reshape(P, T, H, dh)

    def head_writes(self, l: int, z: Tensor) -> Tensor:
        """Each head's write z_h W_O^h, [P, H, T, d_model]."""
        return torch.einsum("pthe,hed->phtd", z, self.w.W_O[l])

    def writes_of(self, run: RunCache) -> Tensor:
        """Every writer's value in a captured engine run (sites z, mlp_out): [P, W, T, d_model]."""
        parts = run.embed
        ref = next(iter(parts.values()))
        P, T, d = ref.shape
        out = torch.empty(P, self.W, T, d, dtype=ref.dtype, device=ref.device)
        for site, i in self.embed_idx.items():
            out[:, i] = parts[site]
        for l in range(self.a.n_layers):
            out[:, self.head0[l]: self.head0[l] + self.H] = self.head_writes(l, run.acts["z"][l])  # type: ignore[arg-type]
            if self.mlp_w[l] >= 0:
                out[:, self.mlp_w[l]] = run.acts["mlp_out"][l]  # type: ignore[index]
        return out

    # ------------------------------------------------------------------ gradient pass

    def gradient(self, tokens: Tensor, mask: Tensor, read: Any, *, scale: str = "recomputed",
                 mix: Optional[tuple[Tensor, float, str]] = None, keep_writes: bool = False) -> GradientPass:
        """Each reader's gradient at the stream it reads (module docstring), one forward + one backward.

        ``read`` reads the metric: ``read.norm(x_final)`` the final norm, ``read.head(y)`` M [P] from its
        output (the metric reader's gradient is taken there, then carried through that norm). ``mix`` =
        (ablated writes [P, W, T, d], α, "inputs" | "activations"): writes mixed α a_w + (1 − α) ã_w,
        the token embedding only or every write. ``keep_writes``: also return this pass's writes (before mixing).
        """
        e, a, w = self.e, self.a, self.w
        P, T = tokens.shape
        frozen = scale == "frozen"
        abl, alpha, which = mix if mix is not None else (None, 1.0, "")
        every = which == "activations"
        writes = torch.empty(P, self.W, T, a.d_model, dtype=self.model.dtype, device=tokens.device) if keep_writes else None
        norm_in: dict[str, Tensor] = {}
        with torch.enable_grad():
            parts = dict(e.embed_parts(tokens))
            for site, i in self.embed_idx.items():
                if writes is not None:
                    writes[:, i] = parts[site]
                if abl is not None and (every or site == "embed.token") and alpha != 1.0:
                    parts[site] = alpha * parts[site] + (1 - alpha) * abl[:, i]
            x0 = sum(parts.values())
            if w.ln_emb_w is not None:
                norm_in["embed_ln"] = x0.detach()
            x = e.embed(parts).detach().requires_grad_(True)  # the graph starts at the embedded stream
            handles: list[Tensor] = []
            xin: list[Tensor] = []  # the stream each layer's q/k/v read (before ln1), detached
            mids: list[Tensor] = []  # the stream each MLP reads (before ln2)
            for l in range(a.n_layers):
                xin.append(x.detach())
                qkv = self._ln1(l, x) @ self.W_qkv[l] + self.b_qkv[l]
                handles.append(qkv)
                z = self._attend(l, *self._split(qkv), mask)
                attn = z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l]
                hl = self.head0[l]
                if writes is not None or every:
                    hw = self.head_writes(l, z.detach())
                    if writes is not None:
                        writes[:, hl: hl + self.H] = hw
                if every and alpha != 1.0:
                    attn = alpha * attn + (1 - alpha) * (abl[:, hl: hl + self.H].sum(1) + w.b_O[l])  # type: ignore[index]
                if self.post:
                    norm_in[f"ln1.{l}"] = (x + attn).detach()
                    mid = e.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
                elif a.parallel_attn_mlp:
                    mid = x
                else:
                    mid = x + attn
                if not self.has_mlp:
                    x = mid + attn if a.parallel_attn_mlp else mid
                    continue
                mids.append(mid.detach())
                # the MLP's own copy of its input: without a norm (post-norm, or norm-free models such as tracr's)
                # _ln2 would return `mid` itself, and its gradient would include the residual path past the MLP
                h2 = mid * 1.0 if self.post or a.norm == "none" else self._ln2(l, mid)
                handles.append(h2)
                m = e.mlp(l, h2)
                if writes is not None:
                    writes[:, self.mlp_w[l]] = m.detach()
                if every and alpha != 1.0:
                    m = alpha * m + (1 - alpha) * abl[:, self.mlp_w[l]]  # type: ignore[index]
                if self.post:
                    norm_in[f"ln2.{l}"] = (mid + m).detach()
                    x = e.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
                elif a.parallel_attn_mlp:
                    x = x + attn + m
                else:
                    x = mid + m
            y = read.norm(x)
            M = read.head(y)
            grads = torch.autograd.grad(M.sum(), handles + [y], allow_unused=True)
        M = M.detach()
        G = torch.zeros(P, self.R, T, a.d_model, dtype=self.model.dtype, device=tokens.device)
        per = 2 if self.has_mlp else 1
        H, Gk = self.H, self.G
        for l in range(a.n_layers):
            gq = grads[per * l]
            if gq is not None:
                gq_, gk_, gv_ = self._split(gq)
                r0 = self.q0[l]
                G[:, r0: r0 + H] = torch.einsum("pthe,hde->phtd", gq_, w.W_Q[l])
                G[:, r0 + H: r0 + H + Gk] = torch.einsum("pthe,hde->phtd", gk_, w.W_K[l])
                G[:, r0 + H + Gk: r0 + H + 2 * Gk] = torch.einsum("pthe,hde->phtd", gv_, w.W_V[l])
                if not self.post:
                    sl = slice(r0, r0 + H + 2 * Gk)
                    G[:, sl] = norm_vjp(G[:, sl], xin[l][:, None], w.ln1_w[l], a.norm, a.norm_eps, frozen=frozen)
            if self.has_mlp and grads[per * l + 1] is not None:
                g2 = grads[per * l + 1]
                r = self.mlp_r[l]
                G[:, r] = g2 if self.post else norm_vjp(g2, mids[l], w.ln2_w[l], a.norm, a.norm_eps, frozen=frozen)
        if grads[-1] is not None:
            gy = grads[-1]
            own = not self.post and a.norm != "none" and w.lnf_w is not None  # the metric's read has a final norm
            G[:, self.out_r] = norm_vjp(gy, x.detach(), w.lnf_w, a.norm, a.norm_eps, frozen=frozen) if own else gy
        return GradientPass(G=G, writes=writes, norm_in=norm_in, M=M)

    # ------------------------------------------------------------------ scores

    def scores(self, dA: Tensor, G: Tensor, norm_in: dict[str, Tensor], *, frozen: bool) -> Tensor:
        """[P, W, R]: Σ_{t,d} ΔA_w · J_{w→r}ᵀ g_r for every writer/reader pair that is an edge (0 elsewhere).

        Pre-norm and parallel blocks: J is the identity (g_r already went through r's own norm), one
        batched GEMM ΔA·Gᵀ, masked. Post-norm: g_r is carried back through each Add & Norm between w and r
        (its Jacobian at ``norm_in``), one GEMM per stretch of writers between two norms.
        """
        P, W, T, d = dA.shape
        R = G.shape[1]
        mask = self.g.mask.to(dA.device)
        if not self.post:
            S = torch.bmm(dA.reshape(P, W, T * d), G.reshape(P, R, T * d).transpose(1, 2))
            return S * mask
        a, w = self.a, self.w
        S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
        C = G.clone()

        def gemm(w0: int, w1: int, r0: int) -> None:
            S[:, w0:w1, r0:] = torch.bmm(dA[:, w0:w1].reshape(P, w1 - w0, -1), C[:, r0:].reshape(P, R - r0, -1).transpose(1, 2))

        def back(key: str, gain: Tensor, r0: int) -> None:
            C[:, r0:] = norm_vjp(C[:, r0:], norm_in[key][:, None], gain, a.norm, a.norm_eps, frozen=frozen)

        for l in reversed(range(a.n_layers)):
            r_next = self.q0[l + 1] if l + 1 < a.n_layers else self.out_r
            if self.has_mlp:
                back(f"ln2.{l}", w.ln2_w[l], r_next)
                gemm(self.mlp_w[l], self.mlp_w[l] + 1, r_next)
                r_mid = self.mlp_r[l]
            else:
                r_mid = r_next
            back(f"ln1.{l}", w.ln1_w[l], r_mid)
            gemm(self.head0[l], self.head0[l] + self.H, r_mid)
        if "embed_ln" in norm_in:
            C[:] = norm_vjp(C, norm_in["embed_ln"][:, None], w.ln_emb_w, "layernorm", a.norm_eps, frozen=frozen)
        gemm(0, self.n_embed, 0)
        return S * mask

    # ------------------------------------------------------------------ circuit evaluation

    def evaluate(self, tokens: Tensor, mask: Tensor, abl: Optional[Tensor], K: Tensor, read: Any) -> Tensor:
        """The metric [P] with every edge's reader seeing (1 − K_wr) a_w + K_wr ã_w (module docstring).

        ``abl`` [P, W, T, d] the ablated writes (None: zero); ``K`` [W, R] (1 = the edge is ablated).
        """
        e, a, w = self.e, self.a, self.w
        P, T = tokens.shape
        d = a.d_model
        K = (K.to(self.model.dtype) * self.g.mask.to(K.device)).to(tokens.device)
        dev, dt = tokens.device, self.model.dtype
        D = torch.empty(P, self.W, T, d, dtype=dt, device=dev)  # ã_w − a_w(this run)
        H, Gk = self.H, self.G

        def abl_of(i0: int, i1: int) -> Tensor:
            return abl[:, i0:i1] if abl is not None else torch.zeros(P, i1 - i0, T, d, dtype=dt, device=dev)

        with torch.inference_mode():
            parts = e.embed_parts(tokens)
            for site, i in self.embed_idx.items():
                D[:, i] = abl_of(i, i + 1)[:, 0] - parts[site]
            if self.post:
                return self._evaluate_post(tokens, mask, parts, D, abl_of, K, read)
            x = e.embed(parts)
            S = D[:, : self.n_embed].sum(1)  # Σ D over the writers so far
            for l in range(a.n_layers):
                nw = self.head0[l]
                r0 = self.q0[l]
                rs = list(range(r0, r0 + H + 2 * Gk)) + ([self.mlp_r[l]] if a.parallel_attn_mlp and self.has_mlp else [])
                inp = self._inputs(x, D, S, K, nw, rs)
                if inp is None:
                    q, k, v = self._split(self._ln1(l, x) @ self.W_qkv[l] + self.b_qkv[l])
                else:
                    hn = self._ln1(l, inp[:, :, : H + 2 * Gk])  # [P, T, H + 2G, d], each reader's own norm
                    q = torch.einsum("pthd,hde->pthe", hn[:, :, :H], w.W_Q[l]) + w.b_Q[l]
                    k = torch.einsum("pthd,hde->pthe", hn[:, :, H: H + Gk], w.W_K[l]) + w.b_K[l]
                    v = torch.einsum("pthd,hde->pthe", hn[:, :, H + Gk: H + 2 * Gk], w.W_V[l]) + w.b_V[l]
                z = self._attend(l, q, k, v, mask)
                hw = self.head_writes(l, z)
                D[:, nw: nw + H] = abl_of(nw, nw + H) - hw
                attn = z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l]
                if not self.has_mlp:
                    S = S + D[:, nw: nw + H].sum(1)
                    x = x + attn
                    continue
                if a.parallel_attn_mlp:
                    h_in = x if inp is None else inp[:, :, -1]
                    S = S + D[:, nw: nw + H].sum(1)
                else:
                    S = S + D[:, nw: nw + H].sum(1)
                    mid = x + attn
                    one = self._inputs(mid, D, S, K, nw + H, [self.mlp_r[l]])
                    h_in = mid if one is None else one[:, :, 0]
                m = e.mlp(l, self._ln2(l, h_in))
                D[:, self.mlp_w[l]] = abl_of(self.mlp_w[l], self.mlp_w[l] + 1)[:, 0] - m
                S = S + D[:, self.mlp_w[l]]
                x = x + attn + m
            fin = self._inputs(x, D, S, K, self.W, [self.out_r])
            return read(x if fin is None else fin[:, :, 0])

    def _inputs(self, x: Tensor, D: Tensor, S: Tensor, K: Tensor, nw: int, readers: list[int]) -> Optional[Tensor]:
        """Readers' inputs [P, T, n, d] = x + Σ_w K_wr D_w over the ``nw`` writers before them (None: all
        K zero). Readers with mostly ablated edges use the complement, x + S − Σ_w (1 − K_wr) D_w, so the
        GEMM runs over whichever set of writers is smaller."""
        Kc = K[:nw, readers]  # [nw, n]
        if not bool((Kc != 0).any()):
            return None
        comp = Kc.sum(0) > nw / 2
        C = torch.where(comp[None], Kc - 1, Kc)
        rows = (C != 0).any(1)
        P, T, d = x.shape
        if bool(rows.any()):
            Dw = D[:, :nw][:, rows]  # [P, w', T, d]
            corr = torch.einsum("wr,pwx->prx", C[rows], Dw.reshape(P, Dw.shape[1], -1)).view(P, -1, T, d)
        else:
            corr = torch.zeros(P, len(readers), T, d, dtype=x.dtype, device=x.device)
        base = x[:, None] + comp.to(x.dtype)[None, :, None, None] * S[:, None]
        return (base + corr).transpose(1, 2)  # [P, T, n, d]

    def _evaluate_post(self, tokens: Tensor, mask: Tensor, parts: dict[str, Tensor], D: Tensor, abl_of: Any,
                       K: Tensor, read: Any) -> Tensor:
        """Post-norm: each reader with an ablated edge reads its own copy V_r of the stream, replayed with
        its ablated writers' values and every Add & Norm recomputed on it."""
        e, a, w = self.e, self.a, self.w
        P, T = tokens.shape
        H, Gk = self.H, self.G
        special = [r for r in range(self.R) if bool((K[:, r] != 0).any())]
        sp = torch.tensor(special, dtype=torch.long, device=K.device)
        Ks = K[:, sp]  # [W, S]

        def add(V: Tensor, i0: int, i1: int) -> Tensor:  # V += Σ_{w in [i0, i1)} K_ws D_w
            return V + torch.einsum("ws,pwtd->pstd", Ks[i0:i1], D[:, i0:i1])

        x0 = sum(parts.values())
        V = add(x0[:, None].expand(P, len(special), T, a.d_model), 0, self.n_embed)
        if w.ln_emb_w is not None:
            V, x = e._ln(V, w.ln_emb_w, w.ln_emb_b), e._ln(x0, w.ln_emb_w, w.ln_emb_b)
        else:
            x = x0
        pos = {r: i for i, r in enumerate(special)}

        def inputs(base: Tensor, rs: list[int]) -> Tensor:  # [P, T, n, d]
            cols = [V[:, pos[r]] if r in pos else base for r in rs]
            return torch.stack(cols, dim=2)

        for l in range(a.n_layers):
            r0 = self.q0[l]
            hn = inputs(x, list(range(r0, r0 + H + 2 * Gk)))
            q = torch.einsum("pthd,hde->pthe", hn[:, :, :H], w.W_Q[l]) + w.b_Q[l]
            k = torch.einsum("pthd,hde->pthe", hn[:, :, H: H + Gk], w.W_K[l]) + w.b_K[l]
            v = torch.einsum("pthd,hde->pthe", hn[:, :, H + Gk:], w.W_V[l]) + w.b_V[l]
            z = self._attend(l, q, k, v, mask)
            nw = self.head0[l]
            hw = self.head_writes(l, z)
            D[:, nw: nw + H] = abl_of(nw, nw + H) - hw
            attn = z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l]
            V = e.norm(add(V + attn[:, None], nw, nw + H), w.ln1_w[l], w.ln1_b[l])
            mid = e.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
            if not self.has_mlp:
                x = mid
                continue
            h_in = inputs(mid, [self.mlp_r[l]])[:, :, 0]
            m = e.mlp(l, h_in)
            i = self.mlp_w[l]
            D[:, i] = abl_of(i, i + 1)[:, 0] - m
            V = e.norm(add(V + m[:, None], i, i + 1), w.ln2_w[l], w.ln2_b[l])
            x = e.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
        return read(inputs(x, [self.out_r])[:, :, 0])
