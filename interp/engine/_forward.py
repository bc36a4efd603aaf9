"""The engine: one model's forward from its frozen weights, as an interpreter of its block.

The forward is plain torch on :class:`interp.models.Weights` (TL layout). A layer is the model's block
(:attr:`interp.models.Model.block`) interpreted live (:class:`interp.engine._layer.LiveLayer`, with patch
points); :class:`Engine` holds the fused projections and the pieces each step calls — norms
(:mod:`interp._norms`), attention (learned or rotary positions: rotate-half for Hugging Face models, adjacent
pairs for the native toys, cos/sin from the model's own rotary module; GQA through a grouped matmul, query head h
reading KV head h // group; softmax in at least float32), the MLP (dense, gated or mixture of experts). Its
own jobs are elsewhere: the attention masks (:mod:`interp.engine._masks`, an explicit cache), patches
(:mod:`interp.engine._patches`) and the prefix-sharing sweep (:mod:`interp.engine._sweep`). Its outputs match
the model's own to float rounding (tests/engine/test_engine.py, and the self-check at every load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from interp._norms import apply_frozen, norm, norm_scale, norm_vjp
from interp.errors import UnsupportedArchitectureError
from interp.engine._rotary import apply_rotary
from interp.engine._layer import LiveLayer
from interp.engine._masks import KeyMasks, version
from interp.engine._patches import MLPWrite, Patch, Variant, apply_patches
from interp.engine._sweep import sweep
from interp.models import Model
from interp.models.internal import per_layer, rotary_table_index, rotary_tables, run_block

__all__ = ["Engine", "RunCache"]


@dataclass
class RunCache:
    """What a capture run kept: ``acts[site][layer]`` [batch, pos, ...], ``resid_pre[layer]``,
    the final residual ``final`` [batch, pos, d_model], rotated keys/values per layer."""

    acts: dict[str, list[Optional[Tensor]]] = field(default_factory=dict)
    resid_pre: list[Tensor] = field(default_factory=list)
    kv: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    embed: dict[str, Tensor] = field(default_factory=dict)
    final: Tensor = field(default_factory=lambda: torch.empty(0, device="cpu"))  # a placeholder: the run sets it
    scales: dict[str, list[Tensor]] = field(default_factory=dict)

    def point(self, site: str, layer: int) -> Tensor:
        """The run's tensor at ``site`` of layer ``layer`` (``resid_pre``: the layer's input, always kept; another
        site: captured by the run)."""
        x = self.resid_pre[layer] if site == "resid_pre" else self.acts[site][layer]
        if x is None:
            raise RuntimeError(f"the run kept no {site} in layer {layer}")
        return x


class Engine:
    """Forward passes of one model from its frozen weights, with patch points (see module docstring)."""

    def __init__(self, model: Model):
        self.model = model
        a, w = model.arch, model.weights
        self.arch, self.w = a, w
        self.block = model.block  # the wiring every forward of this engine interprets
        L, H, Hkv, dh = a.n_layers, a.n_heads, a.n_kv_heads, a.d_head
        self.L, self.H, self.Hkv, self.dh = L, H, Hkv, dh
        self.group = H // Hkv  # query heads per KV head
        # fused q|k|v projection per layer: [L, d_model, (H + 2 Hkv) d_head]; per_layer fuses a streamed
        # model's (interp.models.LayerStack) one layer at a time, as each is reached
        self.W_qkv = per_layer(_fuse_heads, w.W_Q, w.W_K, w.W_V)
        self.b_qkv = _nonzero(torch.cat([w.b_Q.reshape(L, -1), w.b_K.reshape(L, -1), w.b_V.reshape(L, -1)], dim=1))
        self.W_O = per_layer(lambda W: W.flatten(-3, -2), w.W_O)  # [L, (n h), m]
        self.b_O = _nonzero(w.b_O)
        self.has_mlp = model.has_mlp
        if self.has_mlp:
            from transformers.activations import ACT2FN

            if a.act_fn not in ACT2FN:
                raise UnsupportedArchitectureError(f"model {model.name!r}: activation {a.act_fn!r} is unknown")
            self.act = ACT2FN[a.act_fn]
            # gated MLPs: one GEMM for [gate | up]
            self.W_in = (
                per_layer(lambda g, u: torch.cat([g, u], dim=-1).contiguous(), w.W_gate, w.W_in)
                if w.W_gate is not None
                else w.W_in
            )
            gate_b = w.b_gate if w.b_gate is not None else torch.zeros_like(w.b_in)
            self.b_in = _nonzero(torch.cat([gate_b, w.b_in], dim=1) if w.W_gate is not None else w.b_in)
            self.b_out = _nonzero(w.b_out)
        self.masks = KeyMasks(a.causal)  # kept per key mask (an explicit cache: :meth:`of` clears it)
        self.scales = [a.attn_scale(l) for l in range(L)]
        self._rope_cache: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}
        self._rope_key = rotary_table_index(model)  # one rotary table for every layer, or one per layer type
        self.interleaved = a.rotary_interleaved
        # the attention softmax in the model's own precision: Hugging Face's Llama-shaped models compute it
        # in float32 whatever the dtype (so a float64 Llama rounds its patterns to float32 too)
        self.softmax_dtype = torch.float64 if model.dtype == torch.float64 and not a.softmax_fp32 else torch.float32

    @classmethod
    def of(cls, model: Model) -> "Engine":
        """``model``'s engine, built once (fusing its projections costs a copy of most weights) and rebuilt when
        one of its weight tensors has been changed in place (their version counters) or replaced."""
        w = model.weights
        stamp = tuple((id(t), version(t)) for t in vars(w).values() if isinstance(t, Tensor))
        engine: Engine = model.derived("_engine", stamp, lambda: cls._build(model))
        engine.masks.clear()  # keyed by a mask's address, which a later call may reuse
        return engine

    @classmethod
    def _build(cls, model: Model) -> "Engine":
        """A new engine whose fused weights are ordinary constants wherever it is built: a gradient pass may save
        them for backward even when the first call came inside ``torch.inference_mode()``."""
        with torch.inference_mode(False), torch.no_grad():
            return cls(model)

    @staticmethod
    def drop(model: Model) -> None:
        """Forget ``model``'s kept engine (:meth:`of`), freeing its fused projections."""
        model.forget("_engine")

    # ------------------------------------------------------------------ model facts

    def rope(self, n: int, layer: int = 0) -> tuple[Tensor, Tensor]:
        """(cos, sin) [n, rotary_dim] of ``layer`` for positions 0..n−1, from the model's own rotary module."""
        key = (n, self._rope_key[layer])
        if key not in self._rope_cache:
            with torch.inference_mode(False):  # ordinary tensors: a gradient pass may save them for backward
                self._rope_cache[key] = rotary_tables(self.model, n, layer)
        return self._rope_cache[key]

    def head_norm(self, x: Tensor, gain: Tensor, *, frozen: bool = False) -> Tensor:
        """QK-norm of x [..., heads, d_head] times ``gain``: scope "head" normalises each head over d_head
        (gain [d_head]); scope "projection" the whole projection over heads·d_head (gain [heads, d_head]),
        one σ per position shared by every head (OLMo 2). ``frozen`` holds σ (no gradient through it)."""
        dims = (-1,) if self.arch.qk_norm_scope == "head" else (-2, -1)
        n = x.shape[-1] if len(dims) == 1 else x.shape[-1] * x.shape[-2]
        r = torch.rsqrt(torch.linalg.vector_norm(x, 2, dim=dims, keepdim=True).square() / n + self.arch.norm_eps)
        return (x * (r.detach() if frozen else r)).mul_(gain)

    def norm_weights(self, norm: str, l: int) -> tuple[Optional[Tensor], Optional[Tensor]]:
        """(γ, β) of layer l's norm ``norm`` — a block step's norm id: "ln1" / "ln2" (a sublayer's pre-norm, or
        a post-norm block's stream norm), "ln1_post" / "ln2_post" (a sublayer's output norm, no β)."""
        gain, bias = getattr(self.w, f"{norm}_w"), getattr(self.w, f"{norm}_b", None)
        return (None if gain is None else gain[l]), (None if bias is None else bias[l])

    def norm_at(self, norm: Optional[str], l: int, x: Tensor) -> Tensor:
        """x through layer l's norm ``norm`` (a block step's norm id), or x itself for None."""
        return x if norm is None else self.norm(x, *self.norm_weights(norm, l))

    def frozen_norm_at(self, norm: str, l: int, x: Tensor, sigma: Tensor) -> Tensor:
        """x through layer l's norm ``norm`` with its scale held at ``sigma`` [..., 1]: γ ⊙ centre(x) / σ + β
        (:func:`interp._norms.apply_frozen`; x itself without norms)."""
        if self.arch.norm == "none":
            return x
        gain, bias = self.norm_weights(norm, l)
        return apply_frozen(x, gain, sigma, self.arch.norm, bias=bias)

    def read_norm(self, x: Tensor, l: int, sub: str) -> Tensor:
        """The stream x as layer l's sublayer ``sub`` ("attn" | "mlp") reads it: through its pre-norm, or x
        itself where the block reads the stream raw (post-norm, OLMo 2's output norms only)."""
        return self.norm_at(self.block.read_norm(sub), l, x)

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """RoPE on x [R, T, n, d_head] with cos/sin [T, rotary_dim] (:func:`interp.engine.internal.apply_rotary`)."""
        return apply_rotary(x, cos[:, None], sin[:, None], interleaved=self.interleaved)

    def allowed(self, mask: Tensor, prompt: Tensor, t0: int, T: int, window: int = 0) -> Optional[Tensor]:
        """The attention mask [R | 1, 1, T, N] (True = may attend) of rows ``prompt`` at positions t0…t0+T−1, or
        None when nothing is masked (:meth:`interp.engine._masks.KeyMasks.allowed`)."""
        return self.masks.allowed(mask, prompt, t0, T, window)

    def norm(self, x: Tensor, gain: Optional[Tensor], bias: Optional[Tensor], kind: Optional[str] = None) -> Tensor:
        """The model's norm (``kind``: another, e.g. an encoder's embedding LayerNorm) — :func:`interp._norms.norm`."""
        return norm(x, gain, bias, kind or self.arch.norm, self.arch.norm_eps)

    def norm_scale(self, x: Tensor, kind: Optional[str] = None) -> Tensor:
        """σ of a norm's input (the frozen scale): sqrt(var + ε) or sqrt(mean x² + ε); 1 without norms.
        Reduced in at least float32 (:func:`interp._norms.norm_scale`, the one rule), returned in ``x``'s dtype."""
        return norm_scale(x, kind or self.arch.norm, self.arch.norm_eps).to(x.dtype)

    def norm_vjp(
        self,
        g: Tensor,
        x: Optional[Tensor],
        gain: Optional[Tensor],
        *,
        frozen: bool,
        kind: Optional[str] = None,
        sigma: Optional[Tensor] = None,
    ) -> Tensor:
        """Jᵀg for the model's norm at input ``x`` (``frozen``: σ held) — :func:`interp._norms.norm_vjp`."""
        return norm_vjp(g, x, gain, kind=kind or self.arch.norm, eps=self.arch.norm_eps, frozen=frozen, sigma=sigma)

    # ------------------------------------------------------------------ forward pieces

    def embed_parts(self, tokens: Tensor) -> dict[str, Tensor]:
        """The embedding writes of ``tokens`` [R, n]: token, learned position, token type."""
        w = self.w
        n = tokens.shape[1]
        parts = {"embed.token": w.W_E[tokens]}
        if w.W_pos is not None and self.arch.positional == "learned":
            parts["embed.pos"] = w.W_pos[:n][None].expand(tokens.shape[0], n, -1)
        if w.W_type is not None:
            parts["embed.type"] = w.W_type[0][None, None].expand(tokens.shape[0], n, -1)
        return parts

    def embed(self, parts: dict[str, Tensor]) -> Tensor:
        vals = list(parts.values())
        x = vals[0]
        for t in vals[1:]:
            x = x + t
        w = self.w
        if w.ln_emb_w is not None:  # a LayerNorm whatever arch.norm (BERT's embedding norm)
            x = self.norm(x, w.ln_emb_w, w.ln_emb_b, "layernorm")
        return x

    def mlp(self, l: int, h: Tensor, *, keep: Optional[Callable[[str, Tensor], None]] = None) -> Tensor:
        """Layer l's MLP on its (normalised) input: act(h W_gate + b_gate) ⊙ (h W_in + b_in) W_out + b_out, or
        act(h W_in + b_in) W_out + b_out (one GEMM for [gate | up]; safe under autograd). ``keep("mlp_post", a)``
        is handed the hidden activation a, what W_out reads (a dense MLP's; a mixture of experts has none)."""
        if self.arch.n_experts:
            return self.experts(l, h)
        pre = _linear(h, self.W_in[l], None if self.b_in is None else self.b_in[l])
        if self.w.W_gate is not None:
            gate, up = pre.chunk(2, dim=-1)
            act = self.act(gate) * up
        else:
            act = self.act(pre)
        if keep is not None:
            keep("mlp_post", act)
        return _linear(act, self.w.W_out[l], None if self.b_out is None else self.b_out[l])

    def experts(self, l: int, h: Tensor) -> Tensor:
        """A mixture-of-experts MLP on h [..., d_model]: Σ_{e ∈ top k} r_e · MLP_e(h), r = softmax(h W_router)
        (in float32, as the model's router), its top k renormalised to sum to 1 if ``arch.router_renormalise``,
        MLP_e(h) = act(h W_gate^e) ⊙ (h W_in^e) W_out^e. Each expert runs on the tokens routed to it only."""
        w, k = self.w, self.arch.experts_per_token
        x = h.reshape(-1, h.shape[-1])
        probs = torch.softmax((x @ w.W_router[l]).float(), dim=-1)  # type: ignore[index]
        top, idx = torch.topk(probs, k, dim=-1)  # [N, k]
        top = top / top.sum(-1, keepdim=True) if self.arch.router_renormalise else top
        out = torch.zeros_like(x)
        for e in range(self.arch.n_experts):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = x[tok]
            a = self.act(xe @ w.W_gate_e[l, e]) * (xe @ w.W_in_e[l, e])  # type: ignore[index]
            out = out.index_add(0, tok, ((a @ w.W_out_e[l, e]) * top[tok, slot, None]).to(x.dtype))  # type: ignore[index]
        return out.view(h.shape)

    def project_qkv(self, l: int, h: Tensor) -> Tensor:
        """Layer l's fused projection of its (normalised) input h [R, T, d]: q | k | v, [R, T, H + 2 Hkv, d_head]."""
        qkv = _linear(h, self.W_qkv[l], None if self.b_qkv is None else self.b_qkv[l])
        return qkv.view(*h.shape[:-1], self.H + 2 * self.Hkv, self.dh)

    def position_qk(self, l: int, qk: Tensor, t0: int = 0, *, frozen: bool = False) -> Tensor:
        """q | k [R, T, H + Hkv, d_head] of positions t0… as layer l scores them: QK-normed (σ held with
        ``frozen``), then rotated (q and k in one pass); ``qk`` itself when the model does neither."""
        a, w, H = self.arch, self.w, self.H
        if a.qk_norm:  # q and k normed (per head, or over the whole projection) before the rotation
            qk = torch.cat(
                [
                    self.head_norm(qk[:, :, :H], w.q_norm_w[l], frozen=frozen),  # type: ignore[index]
                    self.head_norm(qk[:, :, H:], w.k_norm_w[l], frozen=frozen),  # type: ignore[index]
                ],
                dim=2,
            )
        if a.positional == "rotary":
            cos, sin = self.rope(t0 + qk.shape[1], l)
            qk = self.rotate(qk, cos[t0:], sin[t0:])
        return qk

    def pattern(self, l: int, q: Tensor, k: Tensor, allowed: Optional[Tensor]) -> Tensor:
        """Layer l's attention pattern A = softmax(cap(q kᵀ · scale) + mask), [R, H, T, N], from q [R, H, T, d_head]
        and k [R, Hkv, N, d_head] (query head h reads KV head h // group; cap: Gemma 2's c·tanh(s / c), before
        the mask; the softmax in at least float32)."""
        R, H, T, dh = q.shape
        N, a = k.shape[2], self.arch
        scores = (
            torch.matmul(q.reshape(R, self.Hkv, self.group, T, dh), k[:, :, None].transpose(-1, -2)) * self.scales[l]
        )
        if a.attn_softcap:
            scores = torch.tanh(scores / a.attn_softcap) * a.attn_softcap
        scores = scores.to(self.softmax_dtype)
        if allowed is not None:
            scores = scores.masked_fill(~allowed[:, :, None], torch.finfo(self.softmax_dtype).min)
        return torch.softmax(scores, dim=-1).to(q.dtype).reshape(R, H, T, N)

    def weigh(self, A: Tensor, v: Tensor) -> Tensor:
        """z = A v per head, [R, T, H, d_head], from A [R, H, T, N] and v [R, Hkv, N, d_head]."""
        R, H, T, N = A.shape
        z = torch.matmul(A.view(R, self.Hkv, self.group, T, N), v[:, :, None])  # [R, Hkv, group, T, dh]
        return z.reshape(R, H, T, -1).transpose(1, 2)

    def attend(self, l: int, q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor]) -> Tensor:
        """z [R, T, H, d_head] = :meth:`weigh` (:meth:`pattern`, v), fused (one kernel) where the softmax runs
        in the model's precision and the scores are not capped."""
        if self.softmax_dtype == q.dtype and not self.arch.attn_softcap:
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=self.scales[l], enable_gqa=self.group > 1
            )
            return z.transpose(1, 2)
        return self.weigh(self.pattern(l, q, k, allowed), v)

    def attention(self, l: int, qkv: Tensor, mask: Tensor, *, frozen: bool = False) -> Tensor:
        """z [P, T, H, d_head] of layer l for whole prompts from their projections qkv [P, T, H + 2 Hkv, d_head]
        (no patches; ``frozen`` holds the QK-norm's σ). The gradient passes and the evaluation forward use it."""
        P, T = qkv.shape[:2]
        H, Hkv = self.H, self.Hkv
        qk = self.position_qk(l, qkv[:, :, : H + Hkv], frozen=frozen)
        allowed = self.allowed(mask, torch.arange(P, device=mask.device), 0, T, self.arch.window(l))
        return self.attend(
            l, qk[:, :, :H].transpose(1, 2), qk[:, :, H:].transpose(1, 2), qkv[:, :, H + Hkv :].transpose(1, 2), allowed
        )

    def attn_out(self, l: int, z: Tensor) -> Tensor:
        """Layer l's attention output Σ_h z_h W_O^h + b_O, [R, T, d] (before a sandwich norm)."""
        return _linear(z.reshape(*z.shape[:2], -1), self.W_O[l], None if self.b_O is None else self.b_O[l])

    def joined(self, l: int, out: Tensor, sublayer: str) -> Tensor:
        """Layer l's ``sublayer`` ("attn" | "mlp") output as it joins the stream: through its output norm."""
        return self.norm_at(self.block.out_norm(sublayer), l, out)

    # ------------------------------------------------------------------ one layer

    def layer(
        self,
        l: int,
        x: Tensor,
        *,
        prompt: Tensor,
        mask: Tensor,
        t0: int = 0,
        prefix: Optional[tuple[Tensor, Tensor]] = None,
        patches: Iterable[Union[Patch, MLPWrite]] = (),
        capture: Optional[set[str]] = None,
        store: Optional[dict[str, Tensor]] = None,
        inplace: bool = False,
        scales: Optional[dict[str, Tensor]] = None,
        record: Optional[dict[str, Tensor]] = None,
    ) -> Tensor:
        r"""Layer ``l`` on rows ``x`` [R, T, d_model] holding positions t0..t0+T−1 of prompts ``prompt``: the
        model's block (:attr:`interp.models.Model.block`) interpreted live by :class:`~interp.engine._layer.LiveLayer`,
        each point and each sublayer's internal site a patch point.

        ``mask`` [n_prompts, n] is the key padding mask; ``prefix`` the base run's rotated keys and
        values [n_prompts, Hkv, n, d_head] for the positions before t0 (causal models only); ``capture`` the
        sites kept in ``store`` (and "{norm}_in": the input of a stream or output norm, its scale's source).
        ``patches`` may hold :class:`~interp.engine.MLPWrite`\ s: MLP writes made from what the MLP reads in this pass.
        ``scales`` {norm: σ [R, T, 1]}: those norms (read and output norms) applied with σ held (a frozen pass);
        ``record``: filled with {norm: σ} of every read and output norm of this pass.
        """
        by: dict[str, list[Patch]] = {}
        writes = []
        for p in patches:
            if isinstance(p, MLPWrite):
                writes.append(p)
            else:
                by.setdefault(p.site, []).append(p)
        live = LiveLayer(
            self,
            l,
            by,
            capture or set(),
            store,
            t0=t0,
            prompt=prompt,
            mask=mask,
            prefix=prefix,
            inplace=inplace,
            writes=writes,
            scales=scales,
            record=record,
        )
        return run_block(self.block, live, x)

    def attention_live(self, l: int, x: Tensor, h1: Tensor, live: LiveLayer) -> Tensor:
        """Layer l's attention output Σ_h z_h W_O^h + b_O on rows reading h1 = N1(x), with the patch points q_in,
        k_in, v_in (one reader sees x shifted), q, k, v, pattern and z (``live``: the layer's patches and keeps)."""
        w, by, keep, t0, prompt = self.w, live.by, live.keep, live.t0, live.prompt
        mask, prefix = live.mask, live.prefix
        R, T = x.shape[:2]
        H, Hkv = self.H, self.Hkv
        qkv = self.project_qkv(l, h1)  # [R, T, H + 2 Hkv, dh]
        q, k, v = qkv[:, :, :H], qkv[:, :, H : H + Hkv], qkv[:, :, H + Hkv :]
        for site, t, W, b in (("q_in", q, w.W_Q, w.b_Q), ("k_in", k, w.W_K, w.b_K), ("v_in", v, w.W_V, w.b_V)):
            for p in by.get(site, ()):  # one reader sees the residual shifted by p.value
                hh = self.read_norm(x[p.rows] + p.value, l, "attn")
                t[p.rows, :, p.head] = torch.einsum("ntm,nmh->nth", hh, W[l][p.head]) + b[l][p.head][:, None]
        for site, t in (("q", q), ("k", k), ("v", v)):  # in place: qkv is this call's own tensor
            apply_patches(t, by.get(site), t0, headed=True, inplace=True)
        q, k, v = qkv[:, :, :H], qkv[:, :, H : H + Hkv], qkv[:, :, H + Hkv :]
        keep("q", q)
        keep("k", k)
        keep("v", v)
        # from the kept q and k themselves where they are kept (a gradient by them then flows), else one slice
        qk = self.position_qk(
            l, torch.cat([q, k], dim=2) if live.wants("q") or live.wants("k") else qkv[:, :, : H + Hkv], t0
        )
        q, k = qk[:, :, :H], qk[:, :, H:]
        keep("rot_q", q)  # as the scores use them: QK-normed, rotated [R, T, heads, d_head]
        keep("rot_k", k)
        q = q.transpose(1, 2)  # [R, H, T, dh]
        k = k.transpose(1, 2)  # [R, Hkv, T, dh]
        v = v.transpose(1, 2)
        keep("kv_k", k)
        keep("kv_v", v)
        if t0 > 0:
            if prefix is None:
                raise RuntimeError("a suffix row needs the base run's keys/values")
            if prefix[0].shape[0] == 1:  # one prompt: a broadcast view, not a gather
                pk, pv = (t[:, :, :t0].expand(R, -1, -1, -1) for t in prefix)
            else:
                pk, pv = prefix[0][prompt, :, :t0], prefix[1][prompt, :, :t0]
            k = torch.cat([pk, k], dim=2)
            v = torch.cat([pv, v], dim=2)
        allowed = self.allowed(mask, prompt, t0, T, self.arch.window(l))  # [R | 1, 1, T, N] or None
        # z from the pattern where the pattern is patched, or kept in a gradient pass (a gradient by it then
        # flows); else the fused kernel, the pattern kept beside it: keeping it leaves the forward's values as they are
        if "pattern" in by or (live.wants("pattern") and torch.is_grad_enabled()):
            A = apply_patches(self.pattern(l, q, k, allowed), by.get("pattern"), t0, headed=True, pattern=True)
            keep("pattern", A)
            z = self.weigh(A, v)
        else:
            z = self.attend(l, q, k, v, allowed)
            if live.wants("pattern"):
                keep("pattern", self.pattern(l, q, k, allowed))
        z = apply_patches(z, by.get("z"), t0, headed=True)
        keep("z", z)
        return self.attn_out(l, z)

    def sweep(
        self,
        base: RunCache,
        tokens: Tensor,
        mask: Tensor,
        variants: list[Variant],
        read: Callable[[Tensor, Tensor, int], Tensor],
        *,
        batch_size: int,
        progress: bool = False,
        desc: str = "sweep",
    ) -> Tensor:
        """The metric [n_variants] of every variant by the prefix-sharing sweep (:func:`interp.engine._sweep.sweep`),
        with a progress bar named ``desc`` if ``progress``."""
        return sweep(self, base, tokens, mask, variants, read, batch_size=batch_size, progress=progress, desc=desc)

    # ------------------------------------------------------------------ whole runs

    def run(
        self,
        tokens: Tensor,
        mask: Tensor,
        *,
        capture: Iterable[str] = (),
        keep_kv: bool = False,
        keep_scales: bool = False,
    ) -> RunCache:
        """One plain forward of ``tokens`` [P, n], keeping the ``capture`` sites of every layer, every
        layer's input, the final residual (and with ``keep_kv`` the rotated keys/values)."""
        cap = set(capture)
        cache = RunCache(acts={s: [] for s in cap if not s.startswith("embed")})
        P = tokens.shape[0]
        prompt = torch.arange(P, device=tokens.device)
        with torch.inference_mode():
            parts = self.embed_parts(tokens)
            cache.embed = parts
            x = self.embed(parts)
            layer_cap = (
                cap
                | ({"kv"} if keep_kv else set())
                | ({f"{n}_in" for n in self._norms_in_block()} if keep_scales else set())
            )
            for l in range(self.L):
                cache.resid_pre.append(x)
                store: dict[str, Tensor] = {}
                x = self.layer(l, x, prompt=prompt, mask=mask, capture=layer_cap, store=store)
                for s in cache.acts:
                    cache.acts[s].append(store.get(s))
                if keep_kv:
                    cache.kv.append((store["kv_k"], store["kv_v"]))
                if keep_scales:
                    self._keep_scales(cache, store)
            cache.final = x
        return cache

    def _norms_in_block(self) -> list[str]:
        """The norms of the block that see a run-dependent input other than a read: stream norms (post-norm)
        and sublayer output norms — each one's σ is what :meth:`run` keeps with ``keep_scales``."""
        return [s.norm for s in self.block.walk() if s.op in ("norm", "out_norm") and s.norm is not None]

    def _keep_scales(self, cache: RunCache, store: dict[str, Tensor]) -> None:
        """σ of the input of each of the layer's stream and output norms (:meth:`_norms_in_block`), by norm id."""
        for norm_id in self._norms_in_block():
            inp = store.get(f"{norm_id}_in")
            cache.scales.setdefault(norm_id, []).append(None if inp is None else self.norm_scale(inp))  # type: ignore[arg-type]


def _nonzero(b: Tensor) -> Optional[Tensor]:
    """``b``, or None when it is all zeros (no bias add at all)."""
    return b if bool(b.any()) else None


def _linear(x: Tensor, W: Tensor, b: Optional[Tensor]) -> Tensor:
    """x W + b over the last axis, the bias fused into the GEMM (addmm)."""
    x2 = x.reshape(-1, x.shape[-1])
    y = x2 @ W if b is None else torch.addmm(b, x2, W)
    return y.view(*x.shape[:-1], W.shape[-1])


def _fuse_heads(*Ws: Tensor) -> Tensor:
    """[..., n, m, h] head weights side by side as one [..., m, (n h)] matrix (q | k | v), each copied once
    straight into place (a streamed model fuses every block it reads, so the copies count)."""
    lead, m = Ws[0].shape[:-3], Ws[0].shape[-2]
    widths = [W.shape[-3] * W.shape[-1] for W in Ws]
    out = torch.empty(*lead, m, sum(widths), dtype=Ws[0].dtype, device=Ws[0].device)
    c = 0
    for W, n in zip(Ws, widths):
        out[..., c : c + n].unflatten(-1, (W.shape[-3], W.shape[-1])).copy_(W.transpose(-3, -2))
        c += n
    return out
