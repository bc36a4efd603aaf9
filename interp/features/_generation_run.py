"""The decoding loop of :func:`interp.features.generate`: one batch of prompts of one length generated token by token
with a key/value cache per layer, the interventions of each pass (features' changes added to the MLP writes,
steering vectors to the residual stream) and — the prompt pass of a frozen run — the baseline's patterns and norm
scales (the module docstring of :mod:`interp.features._generate` states the regimes)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

import functools

from interp.engine import readout, unembed
from interp.engine.internal import Engine, MLPWrite, Patch
from interp.features._intervention import Intervention, _apply
from interp.dictionaries import Transcoder

__all__ = ["Run", "Writes", "generate_tokens"]

#: (k, W_dec[k → l] [F, d]) — the writes into one layer l of the features of the intervened layers k ≤ l
Writes = list[tuple[int, Tensor]]


class Run:
    """One generation of a batch of prompts of one length on the engine's layers (:meth:`Engine.layer`): the
    key/value cache per layer, the baseline's kept values (``record``: the prompt pass's patterns and norm scales),
    the intervened layers' encoders and decoder writes (:func:`_for_run`), the interventions and the steering
    vectors — a steer an added ``resid_*`` patch, a feature change an added MLP write made from the layer's own MLP
    input (:class:`~interp.engine.MLPWrite`), the frozen prompt pass the baseline's patterns as ``pattern`` patches
    and its norm scales held."""

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
        B, N = ids.shape
        x = e.embed({k: v[:, t0:] for k, v in e.embed_parts(ids).items()})
        dev = x.device
        rows = torch.arange(B, device=dev)
        mask = torch.ones(1, N, dtype=torch.long, device=dev)
        every = prompt_pass or self.positions == "all"  # do the every-position interventions act in this pass?
        ivs: dict[int, list[Intervention]] = {}
        for it in self.ivs:
            if (it.pos is None and every) or (it.pos is not None and prompt_pass):
                ivs.setdefault(it.layer, []).append(it)
        steers: dict[tuple[str, int], Tensor] = {}
        if every:
            for site, l, v in self.steers:
                steers[site, l] = steers[site, l] + v if (site, l) in steers else v
        frozen = self.frozen if prompt_pass else None
        live_out = e.block.out_norm("mlp")  # the MLP's own output norm stays live (as in intervene)
        dfs: dict[int, Tensor] = {}  # Δf_k [B, T, F] of the layers intervened on in this pass, as met
        capture = {"kv", "pattern"} if prompt_pass else {"kv"}  # a prompt pass's pattern explicit, as recorded
        for l in range(e.L):
            patches: list[Any] = [Patch(site, l, rows, v, add=True) for (site, j), v in steers.items() if j == l]
            if ivs.get(l) or self.into.get(l):
                patches.append(MLPWrite(l, rows, functools.partial(self._feature_change, l, ivs, dfs), add=True))
            scales = None
            if frozen is not None:
                A = frozen["pattern", l]  # [B, H, T, N]: every row's every head
                H = A.shape[1]
                heads = torch.arange(H, device=dev).repeat(B)
                patches.append(Patch("pattern", l, rows.repeat_interleave(H), A.flatten(0, 1), head=heads))
                scales = {
                    key[0]: s
                    for key, s in frozen.items()
                    if isinstance(key, tuple) and key[1] == l and key[0] not in ("pattern", live_out)
                }
            record: Optional[dict[str, Tensor]] = {} if prompt_pass and self.record is not None else None
            store: dict[str, Tensor] = {}
            x = e.layer(
                l,
                x,
                prompt=rows,
                mask=mask,
                t0=t0,
                prefix=self.kv[l] if t0 else None,
                patches=patches,
                capture=capture,
                store=store,
                scales=scales,
                record=record,
            )
            k, v = store["kv_k"], store["kv_v"]
            cached = self.kv[l]
            if t0:
                assert cached is not None
                k, v = torch.cat([cached[0], k], dim=2), torch.cat([cached[1], v], dim=2)
            self.kv[l] = (k, v)
            if record is not None and self.record is not None:
                self.record.update({(n, l): s for n, s in record.items()})
                self.record["pattern", l] = store["pattern"]
        last = x[:, -1]
        if prompt_pass and self.record is not None:
            self.record["final"] = e.norm_scale(x)
        if frozen is not None:
            return readout(e.model, last, scale=frozen["final"][:, -1], weights=e.w)
        y = e.norm(last, e.w.lnf_w, e.w.lnf_b)
        return unembed(y, e.w.need("W_U"), e.w.b_U, e.arch.final_softcap)

    def _feature_change(
        self, l: int, ivs: dict[int, list[Intervention]], dfs: dict[int, Tensor], h2: Tensor
    ) -> Optional[Tensor]:
        """The intervened features' change of layer l's write, Σ_{k ≤ l} Δf_k W_dec[k → l] [B, T, d] (None where no
        feature writing into l is intervened on), Δf_k = f̃_k − f_k of this pass's MLP input h2 at layer k —
        computed here at layer k and kept in ``dfs`` for the later layers a CLT's features write to."""
        here = ivs.get(l)
        if here:
            tc = self.enc[l]
            f = tc.encode(h2.to(tc.W_enc.dtype))  # [B, T, F]: the features this run's MLP input gives
            dfs[l] = torch.stack([_apply(row, here) for row in f]) - f
        out: Optional[Tensor] = None
        for k, W in self.into.get(l, ()):
            df = dfs.get(k)
            if df is not None:
                term = df @ W
                out = term if out is None else out + term
        return out


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
