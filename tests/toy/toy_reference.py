"""Independent references for the toy tests: a hand-written forward pass from interp Weights,
attention capture through plain bridge hooks, and materialised circuit matrices."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def reference_forward(model, tokens):
    """Logits and patterns [L, batch, head, q, k] computed from model.weights alone (float64).

    Pre-norm attention-only block: x ← x + Σ_h softmax(mask(q kᵀ/√d_head)) v W_O + b_O.
    """
    w, a = model.weights, model.arch
    d = lambda t: t.double()  # noqa: E731
    x = d(w.W_E)[tokens]
    n = tokens.shape[1]
    if w.W_pos is not None:
        x = x + d(w.W_pos)[:n]

    def norm(x, g, b):
        if a.norm == "layernorm":
            x = (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + a.norm_eps).sqrt()
            return x * d(g) + d(b)
        if a.norm == "rmsnorm":
            return x / (x.pow(2).mean(-1, keepdim=True) + a.norm_eps).sqrt() * d(g)
        return x

    def rope(t):  # adjacent-pair rotary (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)
        dh = t.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]  # [pos, dh/2]
        cos, sin = ang.cos(), ang.sin()
        t0, t1 = t[..., 0::2], t[..., 1::2]
        return torch.stack([t0 * cos - t1 * sin, t1 * cos + t0 * sin], dim=-1).flatten(-2)

    patterns = []
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(a.n_layers):
        h_in = norm(x, w.ln1_w[l], w.ln1_b[l])
        out = d(w.b_O[l]).expand_as(x).clone()
        pats = []
        for h in range(a.n_heads):
            kv = a.kv_head(h)
            q = h_in @ d(w.W_Q[l, h]) + d(w.b_Q[l, h])
            k = h_in @ d(w.W_K[l, kv]) + d(w.b_K[l, kv])
            v = h_in @ d(w.W_V[l, kv]) + d(w.b_V[l, kv])
            if a.positional == "rotary":
                q, k = rope(q), rope(k)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(a.d_head)
            p = s.masked_fill(causal, float("-inf")).softmax(-1)
            pats.append(p)
            out = out + p @ v @ d(w.W_O[l, h])
        patterns.append(torch.stack(pats, 1))
        x = x + out
    x = norm(x, w.lnf_w, w.lnf_b)
    return x @ d(w.W_U) + d(w.b_U), torch.stack(patterns)


def capture_patterns(model, tokens):
    """Bridge logits and blocks.{l}.attn.hook_pattern for every layer, via plain bridge hooks."""
    store = {}

    def hook(t, hook):
        store[hook.name] = t.detach().clone()

    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.arch.n_layers)]
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(nm, hook) for nm in names]):
        logits = model.bridge(tokens)
    return logits, torch.stack([store[nm] for nm in names])


def repeated(batch, n, d_vocab, seed):
    """<bos> + n distinct random words (ids ≥ 2) + the same n words."""
    g = torch.Generator().manual_seed(seed)
    first = torch.stack([torch.randperm(d_vocab - 2, generator=g)[:n] + 2 for _ in range(batch)])
    return torch.cat([torch.zeros(batch, 1, dtype=torch.long), first, first], 1)


def uniform(batch, n_ctx, d_vocab, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(2, d_vocab, (batch, n_ctx), generator=g)
    x[:, 0] = 0
    return x


def ov(model, l, h):
    w, a = model.weights, model.arch
    return w.W_V[l, a.kv_head(h)].double() @ w.W_O[l, h].double()  # [d_model, d_model]


def qk(model, l, h):
    w, a = model.weights, model.arch
    return w.W_Q[l, h].double() @ w.W_K[l, a.kv_head(h)].double().T  # [d_model, d_model]


def k_composition(model, src, dst):
    """‖W_OV^src W_QK^dstᵀ‖_F / (‖W_OV^src‖_F ‖W_QK^dst‖_F) on materialised d_model² matrices."""
    A, B = ov(model, *src), qk(model, *dst).T
    return float(torch.linalg.matrix_norm(A @ B) / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B)))


def copying_score(model, l, h):
    """Σλ/Σ|λ| of the full OV circuit W_E W_OV W_U (materialised [d_vocab, d_vocab])."""
    w = model.weights
    full = w.W_E.double() @ ov(model, l, h) @ w.W_U.double()
    lam = torch.linalg.eigvals(full)
    return float(lam.real.sum() / lam.abs().sum())


def next_token_nll(logits, tokens):
    """nll[b, p] = -log P(tokens[b, p+1] | tokens[b, :p+1])."""
    return -F.log_softmax(logits.double(), -1)[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
