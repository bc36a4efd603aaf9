"""The edge-level forward pass: every reader's input its own, and each reader's gradient on its own.

Plain torch on the model's frozen weights, as the patching engine (:class:`interp.engine.Engine`,
whose attention scales, rotary tables, activation and embedding lookup it reuses; its norms, MLP and
rotation are re-stated here without in-place operations, so autograd can run through them), with the
one thing a node-level forward does not have: a head's q, a KV head's k and v, an MLP's input and the
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

Sandwich norms (Gemma 2/3): a head's write a_h is its image through its layer's output norm at that run's
own scale, γ' ⊙ z_h W_O^h / σ'(Σ_h z_h W_O^h + b_O) — the heads' images sum to the normed attention output,
so every edge kept is the clean run and none the ablated run, exactly; an MLP's write is its normed output.
QK-norm (Gemma 3, Qwen 3) sits inside a q/k reader, after its projection: the reader's gradient passes
through it (its σ held under ``scale="frozen"``, as the reader's own norm is). Soft-capped scores and logits
(Gemma 2) are computed as the model does.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Any, Optional

import torch
from torch import Tensor

from interp.engine import Engine, RunCache, allowed_keys, apply_rotary
from interp.errors import UnsupportedArchitectureError
from interp.edges._graph import CircuitGraph
from interp.models import Model

__all__ = ["Acts", "EdgeForward", "GradientPass", "norm_vjp"]


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
class Acts:
    """A run's writes, compactly: the embedding parts [P, T, d], each layer's z [P, T, H, d_head] (head h
    writes z_h W_O^h) and each MLP's output [P, T, d] (None without MLPs). ``None`` in place of an Acts
    means zero ablation (every write 0)."""

    embed: dict[str, Tensor]
    z: list[Tensor]
    mlp: list[Optional[Tensor]]

    @classmethod
    def of(cls, run: RunCache) -> "Acts":
        """From an engine run that captured ``z`` and ``mlp_out``."""
        z = run.acts["z"]
        if any(t is None for t in z):
            raise RuntimeError("edges: the run did not capture z")
        return cls(embed=dict(run.embed), z=list(z), mlp=list(run.acts.get("mlp_out", [None] * len(z))))  # type: ignore[arg-type]

    def select(self, idx: Tensor) -> "Acts":
        """The prompts ``idx``."""
        return Acts(embed={k: v[idx] for k, v in self.embed.items()}, z=[t[idx] for t in self.z],
                    mlp=[None if t is None else t[idx] for t in self.mlp])


@dataclass
class GradientPass:
    """What :meth:`EdgeForward.gradient` returns: ``G`` [P, R, T, d] (each reader's gradient at the
    stream it reads, see the module docstring), this pass's writes ``acts`` (before mixing; None unless
    asked), the post-norm stream norms' inputs (for carrying gradients back through them) and ``M`` [P]."""

    G: Tensor
    acts: Optional[Acts]
    norm_in: dict[str, Tensor]
    M: Tensor


class EdgeForward:
    """Forward passes of one model over its circuit graph (see the module docstring)."""

    def __init__(self, model: Model, graph: CircuitGraph, engine: Optional[Engine] = None):
        if model.arch.sandwich_norms and model.arch.attn_bias:
            raise UnsupportedArchitectureError(
                f"edge attribution and circuit evaluation: model {model.name!r} has an attention output bias under "
                "a sandwich norm (its image changes with the run's scale and is no edge), which is not implemented")
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
        H, Hkv = a.n_heads, a.n_kv_heads
        self.H, self.Hkv, self.dh = H, Hkv, a.d_head
        L, w = a.n_layers, self.w
        # the engine's fused matrices (a streamed model's read one layer at a time): W_qkv [L, m, (H + 2G) h],
        # W_O [L, (n h), m]
        self.W_qkv, self.W_O = self.e.W_qkv, self.e.W_O
        self.b_qkv = torch.cat([w.b_Q.reshape(L, -1), w.b_K.reshape(L, -1), w.b_V.reshape(L, -1)], dim=1)

    # ------------------------------------------------------------------ pieces

    # The differentiable pieces are this module's own (the engine's are written for inference and may work in
    # place); they compute what the engine computes, which is tested against the bridge.

    def norm(self, x: Tensor, gain: Optional[Tensor], bias: Optional[Tensor], kind: Optional[str] = None) -> Tensor:
        """LayerNorm / RMSNorm (``kind`` defaults to the model's) over the last axis, autograd-safe."""
        kind = kind or self.a.norm
        if kind == "none":
            return x
        d, eps = (x.shape[-1],), self.a.norm_eps
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        if kind == "layernorm":
            y = torch.nn.functional.layer_norm(xf, d, gain.to(xf.dtype) if gain is not None else None,
                                               bias.to(xf.dtype) if bias is not None else None, eps)
        else:
            y = torch.nn.functional.rms_norm(xf, d, gain.to(xf.dtype) if gain is not None else None, eps)
        return y.to(x.dtype)

    def embed(self, parts: dict[str, Tensor]) -> Tensor:
        """Σ of the embedding parts, then the embedding norm (post-norm encoders)."""
        x0 = reduce(operator.add, parts.values())  # Σ in order, without sum()'s leading 0
        w = self.w
        return x0 if w.ln_emb_w is None else self.norm(x0, w.ln_emb_w, w.ln_emb_b, "layernorm")

    def mlp(self, l: int, h: Tensor) -> Tensor:
        """The MLP of layer ``l`` on its (normalised) input: act(h W_gate) ⊙ (h W_in + b_in), or act(h W_in + b_in)."""
        w = self.w
        pre = h @ w.W_in[l] + w.b_in[l]
        if w.W_gate is not None:
            gate = h @ w.W_gate[l] + (w.b_gate[l] if w.b_gate is not None else 0.0)
            act = self.e.act(gate) * pre
        else:
            act = self.e.act(pre)
        return act @ w.W_out[l] + w.b_out[l]

    def _rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """RoPE on x [P, T, n, d_head] with cos/sin [T, rotary_dim] (:func:`interp.engine.apply_rotary`)."""
        return apply_rotary(x, cos[:, None], sin[:, None], interleaved=self.a.rotary_interleaved)

    def post_attn(self, l: int, raw: Tensor) -> Tensor:
        """Layer l's attention output as it joins the stream (through its sandwich norm, if any)."""
        g = self.w.ln1_post_w
        return raw if g is None else raw / self.e.norm_scale(raw) * g[l]

    def post_mlp(self, l: int, raw: Tensor) -> Tensor:
        """Layer l's MLP output as it joins the stream (through its sandwich norm, if any)."""
        g = self.w.ln2_post_w
        return raw if g is None else self.norm(raw, g[l], None)

    def _ln1(self, l: int, x: Tensor) -> Tensor:
        return x if self.post else self.norm(x, self.w.ln1_w[l], self.w.ln1_b[l])

    def _ln2(self, l: int, x: Tensor) -> Tensor:
        return x if self.post else self.norm(x, self.w.ln2_w[l], self.w.ln2_b[l])

    def _split(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        P, T = qkv.shape[:2]
        H, Hkv, dh = self.H, self.Hkv, self.dh
        return (qkv[..., : H * dh].view(P, T, H, dh), qkv[..., H * dh: (H + Hkv) * dh].view(P, T, Hkv, dh),
                qkv[..., (H + Hkv) * dh:].view(P, T, Hkv, dh))

    def _qk_norm(self, x: Tensor, gain: Tensor, frozen: bool) -> Tensor:
        """QK-norm: each head's vector x [..., heads, d_head] over d_head, times ``gain``; ``frozen`` holds σ
        (the reader's own norm with its scale frozen, as ``scale="frozen"`` holds ln1's)."""
        s = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.a.norm_eps)
        return x * (s.detach() if frozen else s) * gain

    def _attend(self, l: int, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, frozen: bool = False) -> Tensor:
        """z [P, T, H, dh] from pre-rotary (pre-QK-norm) q [P, T, H, dh] and k, v [P, T, Hkv, dh] (the engine's
        attention)."""
        e, a, w = self.e, self.a, self.w
        P, T = q.shape[:2]
        H, Hkv, dh = self.H, self.Hkv, self.dh
        if a.qk_norm and w.q_norm_w is not None and w.k_norm_w is not None:
            q, k = self._qk_norm(q, w.q_norm_w[l], frozen), self._qk_norm(k, w.k_norm_w[l], frozen)
        if a.positional == "rotary":
            cos, sin = (t.clone() for t in e.rope(T, l))  # the engine may have cached them in inference mode
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [P, Hkv, T, dh]
        allowed = mask[:, None, None, :].bool()  # [P, 1, 1, T] key padding
        if a.causal or a.window(l):
            allowed = allowed & allowed_keys(T, T, causal=a.causal, window=a.window(l), device=q.device)
        if e.softmax_dtype == q.dtype and not a.attn_softcap:  # fused attention, the softmax in the model's precision
            z = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=allowed,
                                                                 scale=e.scales[l], enable_gqa=Hkv < H)
            return z.transpose(1, 2)  # [P, T, H, dh]
        qg = q.view(P, T, Hkv, H // Hkv, dh).permute(0, 2, 3, 1, 4)  # [P, Hkv, H/Hkv, T, dh]
        scores = torch.matmul(qg, k[:, :, None].transpose(-1, -2)) * e.scales[l]  # [P, Hkv, H/Hkv, T, T]
        if a.attn_softcap:  # Gemma 2: c·tanh(scores / c), before the mask
            scores = torch.tanh(scores / a.attn_softcap) * a.attn_softcap
        scores = scores.to(e.softmax_dtype).masked_fill(~allowed[:, :, None], torch.finfo(e.softmax_dtype).min)
        A = torch.softmax(scores, dim=-1).to(q.dtype)
        z = torch.matmul(A, v[:, :, None])  # [P, Hkv, H/Hkv, T, dh]
        return z.permute(0, 3, 1, 2, 4).reshape(P, T, H, dh)

    def head_writes(self, l: int, z: Tensor) -> Tensor:
        """Each head's write z_h W_O^h, [P, H, T, d_model] (under a sandwich norm: its image γ' ⊙ z_h W_O^h / σ'
        at the run's own σ' — the layer's output norm, shared by its heads)."""
        out = torch.einsum("pthe,hed->phtd", z, self.w.W_O[l])
        if self.w.ln1_post_w is None:
            return out
        raw = z.reshape(*z.shape[:2], -1) @ self.W_O[l] + self.w.b_O[l]
        return out * (self.w.ln1_post_w[l] / self.e.norm_scale(raw))[:, None]

    def head_delta(self, l: int, abl: Optional[Acts], this: Acts) -> Tensor:
        """ã_h − a_h of layer l's heads, [P, H, T, d]: through Δz (one product), or under a sandwich norm the
        difference of the two runs' images (each at its own σ'; zero ablation: the image is 0)."""
        if self.w.ln1_post_w is None:
            return self.head_writes(l, (abl.z[l] - this.z[l]) if abl is not None else -this.z[l])
        mine = self.head_writes(l, this.z[l])
        return (self.head_writes(l, abl.z[l]) - mine) if abl is not None else -mine

    def delta(self, abl: Optional[Acts], this: Acts) -> Tensor:
        """ã_w − a_w for every writer, [P, W, T, d] (heads through Δz: one product per layer)."""
        ref = next(iter(this.embed.values()))
        P, T, d = ref.shape
        out = torch.empty(P, self.W, T, d, dtype=ref.dtype, device=ref.device)
        for site, i in self.embed_idx.items():
            out[:, i] = (abl.embed[site] - this.embed[site]) if abl is not None else -this.embed[site]
        for l in range(self.a.n_layers):
            out[:, self.head0[l]: self.head0[l] + self.H] = self.head_delta(l, abl, this)
            if self.mlp_w[l] >= 0:
                m = this.mlp[l]
                if m is None:
                    raise RuntimeError(f"edges: no MLP output of layer {l} in the run")
                out[:, self.mlp_w[l]] = (abl.mlp[l] - m) if abl is not None else -m  # type: ignore[operator]
        return out

    def writer_delta(self, abl: Optional[Acts], this: Acts, i: int, p: int) -> Tensor:
        """ã_w − a_w of writer ``i`` for prompt ``p``, [T, d]."""
        wi = self.g.writer_info[i]
        if wi.kind == "embed":
            a = this.embed[wi.site][p]
            return (abl.embed[wi.site][p] - a) if abl is not None else -a
        if wi.kind == "head":
            if self.w.ln1_post_w is not None:  # the images' difference (see head_delta)
                pick = torch.tensor([p], device=this.z[0].device)
                return self.head_delta(wi.layer, None if abl is None else abl.select(pick), this.select(pick))[0, wi.head]
            z = this.z[wi.layer][p, :, wi.head]
            dz = (abl.z[wi.layer][p, :, wi.head] - z) if abl is not None else -z
            return dz @ self.w.W_O[wi.layer, wi.head]
        m = this.mlp[wi.layer][p]  # type: ignore[index]
        return (abl.mlp[wi.layer][p] - m) if abl is not None else -m  # type: ignore[index]

    # ------------------------------------------------------------------ gradient pass

    def gradient(self, tokens: Tensor, mask: Tensor, read: Any, *, scale: str = "recomputed",
                 mix: Optional[tuple[Optional[Acts], float, str]] = None, keep: bool = False) -> GradientPass:
        """Each reader's gradient at the stream it reads (module docstring), one forward + one backward.

        ``read`` reads the metric: ``read.norm(x_final)`` the final norm, ``read.head(y)`` M [P] from its
        output (the metric reader's gradient is taken there, then carried through that norm). ``mix`` =
        (ablated writes, α, "inputs" | "activations"): writes mixed α a_w + (1 − α) ã_w, the token embedding
        only or every write. ``keep``: also return this pass's writes (before mixing).
        """
        e, a, w = self.e, self.a, self.w
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
            for site in self.embed_idx:
                if mixing and (every or site == "embed.token"):
                    ab = abl.embed[site] if abl is not None else torch.zeros_like(parts[site])
                    parts[site] = alpha * parts[site] + (1 - alpha) * ab
            x0 = reduce(operator.add, parts.values())  # Σ in order, without sum()'s leading 0
            if w.ln_emb_w is not None:
                norm_in["embed_ln"] = x0.detach()
            x = self.embed(parts).detach().requires_grad_(True)  # the graph starts at the embedded stream
            handles: list[Tensor] = []
            xin: list[Tensor] = []  # the stream each layer's q/k/v read (before ln1), detached
            qkvs: list[Tensor] = []  # their projections, detached
            mids: list[Tensor] = []  # the stream each MLP reads (before ln2)
            for l in range(a.n_layers):
                xin.append(x.detach())
                qkv = self._ln1(l, x) @ self.W_qkv[l] + self.b_qkv[l]
                handles.append(qkv)
                qkvs.append(qkv.detach())
                z = self._attend(l, *self._split(qkv), mask, frozen=frozen)
                zs.append(z.detach())
                attn = self.post_attn(l, z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l])
                if every:  # the ablated attention output (b_O alone when the ablation zeroes z)
                    if w.ln1_post_w is not None:  # its image through the sandwich norm (0 under zero ablation)
                        ab = torch.zeros_like(attn) if abl is None else self.post_attn(
                            l, abl.z[l].reshape(P, T, -1) @ self.W_O[l] + w.b_O[l])
                    else:
                        ab = w.b_O[l] if abl is None else abl.z[l].reshape(P, T, -1) @ self.W_O[l] + w.b_O[l]
                    attn = alpha * attn + (1 - alpha) * ab
                if self.post:
                    norm_in[f"ln1.{l}"] = (x + attn).detach()
                    mid = self.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
                elif a.parallel_attn_mlp:
                    mid = x
                else:
                    mid = x + attn
                if not self.has_mlp:
                    x = mid + attn if a.parallel_attn_mlp else mid
                    ms.append(None)
                    continue
                mids.append(mid.detach())
                # the MLP's own copy of its input: without a norm (post-norm, or norm-free models such as tracr's)
                # _ln2 would return `mid` itself, and its gradient would include the residual path past the MLP
                h2 = mid * 1.0 if self.post or a.norm == "none" else self._ln2(l, mid)
                handles.append(h2)
                m = self.post_mlp(l, self.mlp(l, h2))
                ms.append(m.detach())
                if every:
                    ab_m = abl.mlp[l] if abl is not None else torch.zeros_like(m)
                    m = alpha * m + (1 - alpha) * ab_m  # type: ignore[operator]
                if self.post:
                    norm_in[f"ln2.{l}"] = (mid + m).detach()
                    x = self.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
                elif a.parallel_attn_mlp:
                    x = x + attn + m
                else:
                    x = mid + m
            y = read.norm(x)
            M = read.head(y)
            grads = torch.autograd.grad(M.sum(), handles + [y], allow_unused=True)
        G = torch.empty(P, self.R, T, a.d_model, dtype=self.model.dtype, device=tokens.device)
        per = 2 if self.has_mlp else 1
        n = self.H + 2 * self.Hkv
        for l in range(a.n_layers):
            r0 = self.q0[l]
            gq = grads[per * l]
            G[:, r0: r0 + n] = 0.0 if gq is None else self._qkv_grad(l, gq, xin[l], qkvs[l], frozen).transpose(0, 1)
            if self.has_mlp:
                g2, r = grads[per * l + 1], self.mlp_r[l]
                if g2 is None:
                    G[:, r] = 0.0
                else:
                    G[:, r] = g2 if self.post else norm_vjp(g2, mids[l], w.ln2_w[l], a.norm, a.norm_eps, frozen=frozen)
        gy = grads[-1]
        if gy is None:
            G[:, self.out_r] = 0.0
        else:
            own = not self.post and a.norm != "none" and w.lnf_w is not None  # the metric's read has a final norm
            G[:, self.out_r] = norm_vjp(gy, x.detach(), w.lnf_w, a.norm, a.norm_eps, frozen=frozen) if own else gy
        acts = Acts(embed=kept, z=zs, mlp=ms) if keep else None
        return GradientPass(G=G, acts=acts, norm_in=norm_in, M=M.detach())

    def _qkv_grad(self, l: int, g: Tensor, x: Tensor, qkv: Tensor, frozen: bool) -> Tensor:
        """[n, P, T, d]: each q/k/v reader's gradient g_j (at its projection's output) carried to the stream:
        W_j g_j, then (pre-norm) through ln1's Jacobian at x, Jᵀu = (C(γ⊙u) − x̂ (x̂·γ⊙u)/d)/σ (frozen: the
        first term) — with γ folded into W_j and 1/σ into g_j, so the d_model-sized work is one batched
        product over the readers and two in-place passes. x̂·(γ⊙W_j g_j) = ((γ⊙x̂) W_j)·g_j, and (γ⊙x̂) W is
        the forward's own projection ``qkv`` less its biases (b_qkv, and β W for LayerNorm)."""
        a = self.a
        P, T = g.shape[:2]
        n, dh, d = self.H + 2 * self.Hkv, self.dh, a.d_model
        W = self.W_qkv[l]  # [d, n dh]
        plain = self.post or a.norm == "none"
        if not plain:
            ln = a.norm == "layernorm"
            xc = x - x.mean(-1, keepdim=True) if ln else x
            sigma = torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + a.norm_eps)  # [P, T, 1]
            W = W * self.w.ln1_w[l][:, None]  # γ folded: [d, n dh]
            g = g / sigma
        gj = g.reshape(P * T, n, dh).transpose(0, 1)  # [n, P T, dh]
        out = torch.bmm(gj, W.view(d, n, dh).permute(1, 2, 0)).view(n, P, T, d)  # W_j g_j per reader
        if plain:
            return out
        if ln:  # centre: the mean over d of each row, Σ_e mean_i(W[i, e]) g[e]
            out.sub_(torch.einsum("jxe,je->jx", gj, W.view(d, n, dh).mean(0)).view(n, P, T, 1))
        if not frozen:
            xh = xc / sigma
            proj = qkv - self.b_qkv[l]  # (γ⊙x̂ + β) W
            if ln and self.w.ln1_b[l] is not None:
                proj = proj - self.w.ln1_b[l] @ self.W_qkv[l]
            c = (proj.reshape(P * T, n, dh).transpose(0, 1) * gj).sum(-1) / d  # x̂·(γ⊙u)/d, [n, P T]
            out.addcmul_(xh[None], c.view(n, P, T, 1), value=-1.0)
        return out

    # ------------------------------------------------------------------ scores

    def scores(self, dA: Tensor, G: Tensor, norm_in: dict[str, Tensor], *, frozen: bool) -> Tensor:
        """[P, W, R]: Σ_{t,d} ΔA_w · J_{w→r}ᵀ g_r for every writer/reader pair that is an edge (0 elsewhere).

        Pre-norm and parallel blocks: J is the identity (g_r already went through r's own norm), one
        batched GEMM ΔA·Gᵀ, masked — cut into a few blocks of readers by layer, each multiplying only the
        writers that come before its last reader (the pairs of a writer after its reader are never formed).
        Post-norm: g_r is carried back through each Add & Norm between w and r (its Jacobian at
        ``norm_in``), one GEMM per stretch of writers between two norms.
        """
        P, W, T, d = dA.shape
        R = G.shape[1]
        mask = self.g.mask.to(dA.device)
        if not self.post:
            S = torch.zeros(P, W, R, dtype=dA.dtype, device=dA.device)
            L = self.a.n_layers
            cuts = sorted({0, *(round(L * k / 4) for k in range(1, 4)), L})
            for l0, l1 in zip(cuts[:-1], cuts[1:]):
                r0, r1 = self.q0[l0], (self.q0[l1] if l1 < L else R)
                nw = self.head0[l1] if l1 < L else W
                S[:, :nw, r0:r1] = torch.bmm(dA[:, :nw].reshape(P, nw, T * d), G[:, r0:r1].reshape(P, r1 - r0, T * d).transpose(1, 2))
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

    def evaluate(self, tokens: Tensor, mask: Tensor, abl: Optional[Acts], K: Tensor, read: Any) -> Tensor:
        """The metric [P] with every edge's reader seeing (1 − K_wr) a_w + K_wr ã_w (module docstring).

        ``abl`` the ablated writes (None: zero); ``K`` [W, R] (1 = the edge is ablated).

        Pre-norm and parallel blocks: one buffer B [2 + W, P, T, d] holds the clean stream x, S = Σ D_w over
        the writers so far and each D_w = ã_w − a_w(this run), writer-major, so that the inputs of a layer's
        readers, x_r = x + comp_r S + Σ_w C_wr D_w (:meth:`_coef`), are one product Cᵀ B over B's rows
        (:meth:`_mix`) and each reader's norm is applied after its projection (:meth:`_read_qkv`).
        """
        e, a, w = self.e, self.a, self.w
        P, T = tokens.shape
        d = a.d_model
        K = (K.to(self.model.dtype) * self.g.mask.to(K.device)).to(tokens.device)
        dev, dt = tokens.device, self.model.dtype
        H, Hkv = self.H, self.Hkv

        def head_delta(l: int, z: Tensor) -> Tensor:
            return self.head_writes(l, (abl.z[l] - z) if abl is not None else -z)

        sandwich = w.ln1_post_w is not None

        def mlp_delta(l: int, m: Tensor) -> Tensor:
            return (abl.mlp[l] - m) if abl is not None else -m  # type: ignore[operator]

        with torch.inference_mode():
            parts = e.embed_parts(tokens)
            if self.post:
                Dp = torch.empty(P, self.W, T, d, dtype=dt, device=dev)  # ã_w − a_w(this run)
                for site, i in self.embed_idx.items():
                    Dp[:, i] = (abl.embed[site] - parts[site]) if abl is not None else -parts[site]
                return self._evaluate_post(tokens, mask, parts, Dp, head_delta, mlp_delta, K, read)
            B = torch.empty(2 + self.W, P, T, d, dtype=dt, device=dev)
            x, S, D = B[0], B[1], B[2:]  # updated in place: B's rows are what the products read
            x.copy_(self.embed(parts))
            for site, i in self.embed_idx.items():
                if abl is not None:
                    torch.sub(abl.embed[site], parts[site], out=D[i])
                else:
                    torch.neg(parts[site], out=D[i])
            torch.sum(D[: self.n_embed], 0, out=S)
            vis = self.g.mask.to(dev)
            n = H + 2 * Hkv
            L = a.n_layers
            # each layer's readers (the metric's as layer L): C, comp and the columns whose input is not x
            specs: list[tuple[int, Tensor, Tensor, list[int]]] = []
            for l in range(L + 1):
                if l < L:
                    cols = list(range(self.q0[l], self.q0[l] + n)) + ([self.mlp_r[l]] if self.has_mlp else [])
                    nw = self.head0[l]
                    top = nw + (H if self.has_mlp and not a.parallel_attn_mlp else 0)  # the MLP may read this layer's heads
                else:
                    cols, nw, top = [self.out_r], self.W, self.W
                C, comp = self._coef(K[:top, cols], vis[:top, cols])
                own = (comp | (C != 0).any(0)).tolist()
                if l == L:
                    sel = [0] if own[0] else []
                else:
                    sel = (list(range(n)) if any(own[:n]) else []) + ([n] if self.has_mlp and own[n] else [])
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
                    return read(x if X is None else X[0].view(P, T, d))
                mix_qkv, mix_mlp = bool(sel) and sel[0] == 0, bool(sel) and sel[-1] == n
                if mix_qkv:
                    q, k, v = self._read_qkv(l, X[:n], P, T)  # type: ignore[index]
                else:
                    q, k, v = self._split(self._ln1(l, x) @ self.W_qkv[l] + self.b_qkv[l])
                z = self._attend(l, q, k, v, mask)
                Dh = D[nw: nw + H]
                if sandwich:  # each head's image at its run's σ' (see head_delta)
                    this_l = Acts(embed={}, z=[z if i == l else z[:0] for i in range(l + 1)], mlp=[])
                    Dh.copy_(self.head_delta(l, abl, this_l).transpose(0, 1))
                else:
                    dz = (abl.z[l] - z) if abl is not None else -z
                    torch.bmm(dz.permute(2, 0, 1, 3).reshape(H, P * T, self.dh), w.W_O[l], out=Dh.view(H, P * T, d))
                attn = self.post_attn(l, z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l])
                if not self.has_mlp:
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
                m = self.post_mlp(l, self.mlp(l, self._ln2(l, h_in)))
                i = self.mlp_w[l]
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

    def _read_qkv(self, l: int, X: Tensor, P: int, T: int) -> tuple[Tensor, Tensor, Tensor]:
        """q [P, T, H, dh], k, v [P, T, Hkv, dh] from each q/k/v reader's own input X [n, P T, d] (changed in
        place): N(x_r) W_r + b_r. Pre-norm in full precision: ((x_r − μ) ⊙ γ) W_r / σ_r + β W_r + b_r (RMS: no
        μ, no β) — the norm's gain folded into W and its scale applied after the product, on d_head columns."""
        n, PT, d = X.shape
        W = self.W_qkv[l].view(d, n, self.dh).permute(1, 0, 2)  # [n, d, dh]
        b = self.b_qkv[l].view(n, self.dh)
        kind = self.a.norm
        if self.post or kind == "none" or X.dtype in (torch.float16, torch.bfloat16):
            out = torch.bmm(self._ln1(l, X), W)
        else:
            gain, beta = self.w.ln1_w[l], self.w.ln1_b[l]
            if kind == "layernorm":
                X.sub_(X.mean(-1, keepdim=True))
                if beta is not None:
                    b = b + (beta @ self.W_qkv[l]).view(n, self.dh)
            ms = torch.linalg.vector_norm(X, dim=-1, keepdim=True).square_().div_(d)  # mean square, [n, P T, 1]
            out = torch.bmm(X, W * gain[:, None] if gain is not None else W)
            out.mul_(ms.add_(self.a.norm_eps).rsqrt_())
        out = out.view(n, P, T, self.dh).permute(1, 2, 0, 3) + b  # [P, T, n, dh]
        H, Hkv = self.H, self.Hkv
        return out[:, :, :H], out[:, :, H: H + Hkv], out[:, :, H + Hkv:]

    def _evaluate_post(self, tokens: Tensor, mask: Tensor, parts: dict[str, Tensor], D: Tensor, head_delta: Any,
                       mlp_delta: Any, K: Tensor, read: Any) -> Tensor:
        """Post-norm: each reader with an ablated edge reads its own copy V_r of the stream, replayed with
        its ablated writers' values and every Add & Norm recomputed on it."""
        e, a, w = self.e, self.a, self.w
        P, T = tokens.shape
        H, Hkv = self.H, self.Hkv
        special = [r for r in range(self.R) if bool((K[:, r] != 0).any())]
        sp = torch.tensor(special, dtype=torch.long, device=K.device)
        Ks = K[:, sp]  # [W, S]

        def add(V: Tensor, i0: int, i1: int) -> Tensor:  # V += Σ_{w in [i0, i1)} K_ws D_w
            return V + torch.einsum("ws,pwtd->pstd", Ks[i0:i1], D[:, i0:i1])

        x0 = reduce(operator.add, parts.values())  # Σ in order, without sum()'s leading 0
        V = add(x0[:, None].expand(P, len(special), T, a.d_model), 0, self.n_embed)
        if w.ln_emb_w is not None:
            V, x = (self.norm(t, w.ln_emb_w, w.ln_emb_b, "layernorm") for t in (V, x0))
        else:
            x = x0
        pos = {r: i for i, r in enumerate(special)}

        def inputs(base: Tensor, rs: list[int]) -> Tensor:  # [P, T, n, d]
            cols = [V[:, pos[r]] if r in pos else base for r in rs]
            return torch.stack(cols, dim=2)

        for l in range(a.n_layers):
            r0 = self.q0[l]
            hn = inputs(x, list(range(r0, r0 + H + 2 * Hkv)))
            q = torch.einsum("pthd,hde->pthe", hn[:, :, :H], w.W_Q[l]) + w.b_Q[l]
            k = torch.einsum("pthd,hde->pthe", hn[:, :, H: H + Hkv], w.W_K[l]) + w.b_K[l]
            v = torch.einsum("pthd,hde->pthe", hn[:, :, H + Hkv:], w.W_V[l]) + w.b_V[l]
            z = self._attend(l, q, k, v, mask)
            nw = self.head0[l]
            D[:, nw: nw + H] = head_delta(l, z)
            attn = z.reshape(P, T, -1) @ self.W_O[l] + w.b_O[l]
            V = self.norm(add(V + attn[:, None], nw, nw + H), w.ln1_w[l], w.ln1_b[l])
            mid = self.norm(x + attn, w.ln1_w[l], w.ln1_b[l])
            if not self.has_mlp:
                x = mid
                continue
            h_in = inputs(mid, [self.mlp_r[l]])[:, :, 0]
            m = self.mlp(l, h_in)
            i = self.mlp_w[l]
            D[:, i] = mlp_delta(l, m)
            V = self.norm(add(V + m[:, None], i, i + 1), w.ln2_w[l], w.ln2_b[l])
            x = self.norm(mid + m, w.ln2_w[l], w.ln2_b[l])
        return read(inputs(x, [self.out_r])[:, :, 0])
