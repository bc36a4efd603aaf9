"""The decoding loop of :func:`interp.features.generate`: one batch of prompts of one length generated token by token
with a key/value cache per layer, the interventions of each pass (features' changes added to the MLP writes,
steering vectors to the residual stream) and — the prompt pass of a frozen run — the baseline's patterns and norm
scales (the module docstring of :mod:`interp.features._generate` states the regimes)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from interp._norms import apply_frozen
from interp.engine import Engine, unembed
from interp.features._intervention import Intervention, _apply
from interp.dictionaries import Transcoder
from interp.models import run_block

__all__ = ["Run", "Writes", "generate_tokens"]

#: (k, W_dec[k → l] [F, d]) — the writes into one layer l of the features of the intervened layers k ≤ l
Writes = list[tuple[int, Tensor]]


def _frozen_norm(e: Engine, norm: str, l: Optional[int], x: Tensor, sigma: Tensor) -> Tensor:
    """x through norm ``norm`` of layer ``l`` ("lnf": the final norm) with its scale held at ``sigma``:
    γ ⊙ centre(x) / σ + β (:func:`interp._norms.apply_frozen`)."""
    kind = e.arch.norm
    if kind == "none":
        return x
    if l is None:
        gain, bias = e.w.lnf_w, e.w.lnf_b
    else:
        gain, bias = e.norm_weights(norm, l)
    return apply_frozen(x, gain, sigma, kind, bias=bias)


class Run:
    """One generation of a batch of prompts of one length: the key/value cache per layer, the baseline's kept values
    (``record``: the prompt pass's patterns and norm scales), the intervened layers' encoders and decoder writes
    (:func:`_for_run`), the interventions and the steering vectors."""

    def __init__(
        self,
        e: Engine,
        enc: dict[int, Transcoder],
        into: dict[int, Writes],
        ivs: list[Intervention],
        steers: list[tuple[str, int, Tensor]],
        positions: str,
        *,
        record: bool = False,
        frozen: Optional[dict[Any, Tensor]] = None,
    ):
        self.e, self.enc, self.into, self.positions = e, enc, into, positions
        self.ivs, self.steers = ivs, steers
        self.kv: list[Optional[tuple[Tensor, Tensor]]] = [None] * e.L
        self.record: Optional[dict[Any, Tensor]] = {} if record else None
        self.frozen = frozen

    def logits(self, ids: Tensor, t0: int) -> Tensor:
        """The logits [B, d_vocab] at the last of ``ids`` [B, N], running positions t0…N−1 (t0 = 0: the prompt
        pass)."""
        e = self.e
        prompt_pass = t0 == 0
        parts = {k: v[:, t0:] for k, v in e.embed_parts(ids).items()}
        x = e.embed(parts)
        p = _Pass(self, t0, ids.shape[1], prompt_pass)
        for l in range(e.L):
            p.l = l
            x = run_block(e.block, p, x)
        last = x[:, -1]
        if prompt_pass and self.record is not None:
            self.record["final"] = e.norm_scale(x)
        if prompt_pass and self.frozen is not None:
            y = _frozen_norm(e, "lnf", None, last, self.frozen["final"][:, -1])
        else:
            y = e.norm(last, e.w.lnf_w, e.w.lnf_b)
        return unembed(y, e.w.need("W_U"), e.w.b_U, e.arch.final_softcap)


class _Pass:
    """The block interpreter (:class:`interp.models.BlockOps`) of one pass of a :class:`Run` over positions
    t0…N−1, layer by layer (``l``): the engine's live maths, the interventions of this pass, and — the prompt pass of
    a frozen run — the baseline's patterns and norm scales."""

    def __init__(self, run: Run, t0: int, N: int, prompt_pass: bool):
        self.run, self.e, self.t0, self.N, self.prompt_pass = run, run.e, t0, N, prompt_pass
        self.l = 0
        self.frozen = run.frozen if prompt_pass else None
        self.h2: Optional[Tensor] = None
        self.dfs: dict[int, Tensor] = {}  # Δf_k [B, T, F] of the layers intervened on in this pass, as met
        dev = run.e.model.device
        self.mask = torch.ones(1, N, dtype=torch.long, device=dev)
        self.rows = torch.zeros(1, dtype=torch.long, device=dev)
        every = prompt_pass or run.positions == "all"  # do the every-position interventions act in this pass?
        self.ivs: dict[int, list[Intervention]] = {}
        for it in run.ivs:
            if (it.pos is None and every) or (it.pos is not None and prompt_pass):
                self.ivs.setdefault(it.layer, []).append(it)
        self.steers: dict[tuple[str, int], Tensor] = {}
        if every:
            for site, l, v in run.steers:
                self.steers[site, l] = self.steers[site, l] + v if (site, l) in self.steers else v

    def _norm(self, norm: Optional[str], x: Tensor, *, freeze: bool = True) -> Tensor:
        if norm is None:
            return x
        if self.run.record is not None and self.prompt_pass:
            self.run.record[norm, self.l] = self.e.norm_scale(x)
        if self.frozen is not None and freeze:
            return _frozen_norm(self.e, norm, self.l, x, self.frozen[norm, self.l])
        return self.e.norm_at(norm, self.l, x)

    def point(self, site: str, v: Tensor) -> Tensor:
        add = self.steers.get((site, self.l))
        if add is not None:
            v = v + add
        if site == "mlp_out":
            change = self._feature_change()
            if change is not None:
                v = v + change.to(v.dtype)
        return v

    def _feature_change(self) -> Optional[Tensor]:
        """The intervened features' change of layer l's write, Σ_{k ≤ l} Δf_k W_dec[k → l] [B, T, d] (None where no
        feature writing into l is intervened on), Δf_k = f̃_k − f_k of this pass's MLP input at layer k — computed
        here at layer k and kept for the later layers a CLT's features write to."""
        l, run = self.l, self.run
        ivs = self.ivs.get(l)
        if ivs:
            assert self.h2 is not None
            tc = run.enc[l]
            f = tc.encode(self.h2.to(tc.W_enc.dtype))  # [B, T, F]: the features this run's MLP input gives
            self.dfs[l] = torch.stack([_apply(row, ivs) for row in f]) - f
        out: Optional[Tensor] = None
        for k, W in run.into.get(l, ()):
            df = self.dfs.get(k)
            if df is not None:
                term = df @ W
                out = term if out is None else out + term
        return out

    def read(self, sub: str, norm: Optional[str], stream: Tensor) -> Tensor:
        h = self._norm(norm, stream)
        if sub == "mlp":
            self.h2 = h
        return h

    def apply(self, sub: str, h: Tensor) -> Tensor:
        return self._attention(h) if sub == "attn" else self.e.mlp(self.l, h)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        return self._norm(norm, out, freeze=sub == "attn")  # the MLP's output norm stays live (as in intervene)

    def add(self, sub: str, stream: Tensor, out: Tensor) -> Tensor:
        return stream + out

    def norm(self, norm: str, stream: Tensor) -> Tensor:  # post-norm blocks: live steering only (generate checks)
        return self.e.norm_at(norm, self.l, stream)

    def _attention(self, h1: Tensor) -> Tensor:
        """Layer l's attention output on what it read, h1 [B, T, d]: q, k, v projected (QK-norm, rotation), this
        pass's keys and values appended to the cache, the pattern over every cached key — the baseline's (frozen
        prompt pass), explicit (a prompt pass: kept by the baseline) or fused (a generated position)."""
        e, l, run = self.e, self.l, self.run
        H, Hkv = e.H, e.Hkv
        qkv = e.project_qkv(l, h1)
        qk = e.position_qk(l, qkv[:, :, : H + Hkv], self.t0)
        q, k = qk[:, :, :H].transpose(1, 2), qk[:, :, H:].transpose(1, 2)
        v = qkv[:, :, H + Hkv :].transpose(1, 2)
        cached = run.kv[l]
        if self.t0:
            assert cached is not None
            k, v = torch.cat([cached[0], k], dim=2), torch.cat([cached[1], v], dim=2)
        run.kv[l] = (k, v)
        if self.frozen is not None:
            z = e.weigh(self.frozen["pattern", l], v)
        else:
            allowed = e.allowed(self.mask, self.rows, self.t0, h1.shape[1], e.arch.window(l))
            if self.prompt_pass:
                A = e.pattern(l, q, k, allowed)
                if run.record is not None:
                    run.record["pattern", l] = A
                z = e.weigh(A, v)
            else:
                z = e.attend(l, q, k, v, allowed)
        return e.attn_out(l, z)


def _choose(z: Tensor, temperature: float, gens: list[torch.Generator]) -> Tensor:
    """The next token of each row of z [B, d_vocab], [B]: argmax (temperature 0), else a draw from softmax(z_b / T)
    with row b's own generator."""
    if not temperature:
        return z.argmax(-1)
    draws = [
        torch.multinomial(torch.softmax(z[b].double() / temperature, dim=-1), 1, generator=g)
        for b, g in enumerate(gens)
    ]
    return torch.cat(draws)


def generate_tokens(run: Run, ids: Tensor, steps: int, temperature: float, seed: int) -> tuple[Tensor, Tensor]:
    """(generated ids [B, steps], logits [B, steps, d_vocab]) of ``run`` from the prompts ``ids`` [B, n] (one
    length); each row samples with its own generator seeded ``seed``, as it would alone."""
    gens = [torch.Generator(device=ids.device).manual_seed(seed) for _ in range(ids.shape[0])] if temperature else []
    n = ids.shape[1]
    out, zs = [], []
    for s in range(steps):
        z = run.logits(ids, 0 if s == 0 else n + s - 1)
        t = _choose(z, temperature, gens)
        zs.append(z)
        out.append(t)
        ids = torch.cat([ids, t[:, None].to(ids.dtype)], dim=1)
    return torch.stack(out, 1), torch.stack(zs, 1)
