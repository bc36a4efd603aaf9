"""The optimisation inside :func:`interp.features.train_transcoders`: the parameters, their initialisation, one
training step and the budget (learning rate, passes).

All layers' transcoders are trained together, on activations scaled to unit RMS coordinates (x / s_x, y / s_y)::

    pre = x W_encᵀ + b_enc      f = TopK(relu(pre))      ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l'] (+ x W_skipᵀ)

(a per-layer transcoder writes only to its own layer: W_dec[l → l]). The recipe (measured on smollm2 layers 3, 15,
26 at width 1024, k 16, 32,768 tokens: docs/scaling.md):

* **initialisation** as sparsify initialises transcoders — the encoder as torch's ``nn.Linear`` (uniform ±1/√d), its
  bias centring the pre-activations on the first batch (b_enc = −x̄ W_encᵀ, so every feature is above its median
  about half the time and TopK picks among all of them), every decoder **zero**, b_dec = ȳ. The decoders are free
  (no norm constraint: TopK has no sparsity penalty whose scale a decoder norm could game). Gao et al.'s SAE
  initialisation (encoder = the decoder's transpose, unit-norm decoder rows) reads and writes one space; a
  transcoder's input and output are different spaces, and tied unit-norm decoders measured 74 % of features never
  active on held-out text against 7 % for zero decoders (Adam, the same budget): a feature picked early writes a
  unit vector at once, its large error drives its encoder down and it never fires again.
* **loss** per output layer, summed: the batch's FVU Σ‖y − ŷ‖² / Σ‖y − ȳ‖², plus ``aux_alpha`` × the AuxK loss
  (Gao et al. 2024, sparsify's): the features that have not fired for ``dead_after`` training tokens are dead; the
  ``aux_k`` largest of their pre-activations reconstruct the residual y − ŷ, and that reconstruction's FVU is
  added, so dead features get a gradient (a cross-layer transcoder's through their own layer's decoder).
* **Adam** with a linear warm-up over the first 5 % of the updates, at :func:`default_lr`, ``passes`` updates per
  batch read (:func:`default_passes`). Adam's first moments of parameters that stop receiving gradient (a dead
  feature's decoder) decay by β₁ per update into the subnormal range, where a CPU's arithmetic is tens of times
  slower (the cause of a run's tokens/s falling as it trained): moments below 1e-20 (an update of < 1e-12 · lr)
  are flushed to zero every 32 updates.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder, fvu

__all__ = ["TrainState", "default_lr", "default_passes", "flush_moments", "init_state", "lr_at", "train_step"]


class TrainState:
    """All layers' parameters: W_enc [n, F, d], b_enc [n, F], b_dec [n, d] stacked; ``W_dec[i]`` [F, m_i, d] encoder
    i's decoder to the m_i output layers i..i + m_i − 1 (m_i = 1 per-layer, n − i cross-layer); ``W_skip`` [n, d, d]
    (or None) — on the host, where the training steps run. ``since`` counts the training tokens since each feature
    last fired; ``sx``, ``sy`` [n, 1, 1] are the scales x and y are divided by while training."""

    def __init__(self, n: int, d: int, width: int, gen: torch.Generator, cross: bool = False, skip: bool = False):
        bound = 1.0 / math.sqrt(d)  # nn.Linear's default init for the encoder
        self.cross = cross
        self.W_enc = ((torch.rand(n, width, d, generator=gen, device="cpu") * 2 - 1) * bound).requires_grad_()
        self.b_enc = torch.zeros(n, width, requires_grad=True, device="cpu")
        self.W_dec = [
            torch.zeros(width, (n - i) if cross else 1, d, device="cpu", requires_grad=True) for i in range(n)
        ]
        self.b_dec = torch.zeros(n, d, requires_grad=True, device="cpu")
        self.W_skip = torch.zeros(n, d, d, requires_grad=True, device="cpu") if skip else None
        self.since = torch.zeros(n, width, dtype=torch.long, device="cpu")
        self.sx = torch.ones(n, 1, 1, device="cpu")
        self.sy = torch.ones(n, 1, 1, device="cpu")

    def params(self) -> list[Tensor]:
        return [self.W_enc, self.b_enc, *self.W_dec, self.b_dec] + ([] if self.W_skip is None else [self.W_skip])

    def _dec(self, i: int) -> Tensor:
        """Encoder i's decoder on the model's scale: W_dec[i][:, t] · s_y of output layer i + t."""
        m = self.W_dec[i].shape[1]
        return self.W_dec[i] * self.sy[i : i + m, 0, 0][None, :, None]

    def _skip(self) -> Optional[Tensor]:
        """W_skip on the model's scale: W_skip · s_y / s_x (y/s_y = (x/s_x) W_skipᵀ)."""
        return None if self.W_skip is None else self.W_skip * (self.sy / self.sx)

    def transcoders(self, k: int, layers: list[int], context_length: Optional[int] = None) -> list[Transcoder]:
        """The trained per-layer transcoders of ``layers`` on the model's own scale: W_enc / s_x, W_dec · s_y,
        b_dec · s_y, W_skip · s_y / s_x."""
        with torch.no_grad():
            skip = self._skip()
            return [
                Transcoder(
                    self.W_enc[i] / self.sx[i],
                    self.b_enc[i].clone(),
                    self._dec(i)[:, 0],
                    self.b_dec[i] * self.sy[i, 0],
                    W_skip=None if skip is None else skip[i],
                    activation="topk",
                    k=k,
                    context_length=context_length,
                    layer=l,
                )
                for i, l in enumerate(layers)
            ]

    def clt(self, k: int, layers: list[int], context_length: Optional[int] = None) -> CrossLayerTranscoder:
        """The trained cross-layer transcoder of ``layers`` on the model's own scale (as :meth:`transcoders`)."""
        with torch.no_grad():
            return CrossLayerTranscoder(
                self.W_enc / self.sx,
                self.b_enc.clone(),
                tuple(self._dec(i) for i in range(len(layers))),
                self.b_dec * self.sy[:, 0],
                activation="topk",
                k=k,
                context_length=context_length,
                layers=tuple(layers),
            )


def init_state(s: TrainState, x: Tensor, y: Tensor) -> None:
    """From the first batch x, y [n, N, d]: s_x = RMS of x's coordinates, s_y = RMS of (y − ȳ)'s (so both have unit
    coordinates in training); b_dec = ȳ / s_y; b_enc = −(x̄ / s_x) W_encᵀ (centred pre-activations)."""
    with torch.no_grad():
        s.sx = x.pow(2).mean((1, 2), keepdim=True).sqrt().clamp_min(1e-12)
        ym = y.mean(1, keepdim=True)
        s.sy = (y - ym).pow(2).mean((1, 2), keepdim=True).sqrt().clamp_min(1e-12)
        s.b_dec.copy_((ym / s.sy)[:, 0])
        s.b_enc.copy_(-torch.bmm(x.mean(1, keepdim=True) / s.sx, s.W_enc.transpose(1, 2))[:, 0])


def decode(W_dec: list[Tensor], idx: Tensor, vals: Tensor) -> Tensor:
    """Output layer l': Σ_{i writing to l'} Σ_j vals[i, :, j] W_dec[i][idx[i, :, j], l' − i] for idx, vals [n, N, k]
    (encoder i's kept features) → [n, N, d]: a sparse gather-sum per encoder, k rows of [m_i · d] per token (never a
    dense [F, m, d] product)."""
    n, N, k = idx.shape
    if all(w.shape[1] == 1 for w in W_dec):  # per-layer: one gather-sum over the stacked tables
        F_ = W_dec[0].shape[0]
        flat = (idx + torch.arange(n, device=idx.device)[:, None, None] * F_).reshape(n * N, k)
        table = torch.stack(W_dec).reshape(n * F_, -1)
        return F.embedding_bag(flat, table, per_sample_weights=vals.reshape(n * N, k), mode="sum").view(n, N, -1)
    parts: list[list[Tensor]] = [[] for _ in range(n)]
    for i, w in enumerate(W_dec):
        F_, m, d = w.shape
        out = F.embedding_bag(idx[i], w.reshape(F_, m * d), per_sample_weights=vals[i], mode="sum").view(N, m, d)
        for t, o in enumerate(out.unbind(1)):  # unbind's backward stacks once; out[:, t]'s zero-fills [N, m, d] per t
            parts[i + t].append(o)
    return torch.stack([reduce(torch.add, p) for p in parts])


def _aux_loss(s: TrainState, pre: Tensor, resid: Tensor, dead: Tensor, aux_k: int) -> Tensor:
    """The AuxK loss summed over output layers: for each layer l with dead features, the FVU of the residual
    ``resid[l]`` [N, d] reconstructed by the min(aux_k, n_dead_l) largest pre-activations (ReLU'd) of encoder l's dead
    features through their decoders to layer l itself. Each layer takes its own dead features only — the top-k runs
    over those columns and decodes min(aux_k, n_dead_l) rows per token — so a layer with many dead features (a
    model's last layer) does not make every other layer decode aux_k rows (padding every layer to the largest count
    cost 12 % of a 30-layer update: 2.17 against 1.90 CPU-s, smollm2's shapes, one layer 43 % dead). A cross-layer
    transcoder's dead features are revived through their own layer's decoder only: decoding aux_k (d_model / 2)
    features into every later layer cost more than the model's forward and grew as features died — the cause of a
    CLT run's tokens/s falling sixfold as it trained. Where the kept rows are at least a quarter of the dead columns
    the reconstruction is one dense GEMM over the dead columns (the unkept coefficients zero); otherwise a gather-sum
    of the kept rows: the same sum, the cheaper way (266 dead of 512, aux_k 320, d 640, 1,016 tokens: 0.022 against
    0.145 CPU-s forward and backward)."""
    total = pre.new_zeros(())
    for i in torch.nonzero(dead.any(1)).flatten().tolist():
        cols = torch.nonzero(dead[i]).flatten()
        own = s.W_dec[i][:, 0]  # [F, d]: encoder i's decoder to its own layer
        p = pre[i][:, cols]  # [N, n_dead]
        if aux_k >= cols.numel():  # every dead feature kept
            rec = torch.relu(p) @ own[cols]
        else:
            avals, j = p.topk(aux_k, dim=-1)
            if cols.numel() <= 4 * aux_k:  # most dead columns kept: a dense GEMM, 3-7x faster than the gather-sum
                rec = torch.zeros_like(p).scatter(-1, j, torch.relu(avals)) @ own[cols]
            else:  # a few of many: the gather-sum of aux_k rows per token
                rec = F.embedding_bag(cols[j], own, per_sample_weights=torch.relu(avals), mode="sum")
        total = total + fvu(resid[i : i + 1], rec[None]).nan_to_num(0.0).sum()
    return total


@torch.enable_grad()  # also under a caller's torch.no_grad() / set_grad_enabled(False), as transformer-lens's demos
def train_step(
    s: TrainState,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    k: int,
    aux_k: int,
    aux_alpha: float,
    dead_after: int,
    new_tokens: bool = True,
) -> Tensor:
    """One Adam update on a batch (x, y [n, N, d], scaled); returns the per-layer FVU [n] before the update."""
    pre = torch.baddbmm(s.b_enc[:, None], x, s.W_enc.transpose(1, 2))  # [n, N, F]
    vals, idx = torch.relu(pre).topk(k, dim=-1)
    yhat = decode(s.W_dec, idx, vals) + s.b_dec[:, None]
    if s.W_skip is not None:
        yhat = yhat + torch.bmm(x, s.W_skip.transpose(1, 2))
    err = fvu(y, yhat)
    loss = err.sum()
    with torch.no_grad():
        fired = _fired(idx, vals, s.since.shape[1])
        if new_tokens:  # a batch's first pass counts its tokens
            s.since += x.shape[1]
        s.since[fired] = 0
        dead = s.since >= dead_after
    if aux_alpha > 0 and bool(dead.any()):
        loss = loss + aux_alpha * _aux_loss(s, pre, (y - yhat).detach(), dead, aux_k)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return err.detach()


def _fired(idx: Tensor, vals: Tensor, width: int) -> Tensor:
    """[n, F] bool: which features were active (value > 0) anywhere in the batch."""
    n = idx.shape[0]
    out = torch.zeros(n, width, dtype=torch.bool, device=idx.device)
    out.view(-1)[(idx + torch.arange(n, device=idx.device)[:, None, None] * width)[vals > 0]] = True
    return out


def flush_moments(opt: torch.optim.Optimizer) -> None:
    """Adam's moments below 1e-20 set to 0 (module docstring: subnormal moments slow a CPU's arithmetic)."""
    with torch.no_grad():
        for st in opt.state.values():
            for name in ("exp_avg", "exp_avg_sq"):
                v = st.get(name)
                if isinstance(v, Tensor):
                    v.masked_fill_(v.abs() < 1e-20, 0.0)


def dead_fraction(s: TrainState, seen: int, dead_after: int) -> float:
    """The fraction of features that have not fired in the last min(dead_after, seen) training tokens."""
    return float((s.since >= max(1, min(dead_after, seen))).float().mean())


# ---------------------------------------------------------------------------------------------- the budget


def default_passes(steps: int) -> int:
    """Adam updates per batch read when not given: 4 for a run of up to 16 batches, falling to 1 by 64 batches
    (ceil(64 / steps), within [1, 4]). On a CPU a batch's forward costs more than an update: a short run learns
    more per token read, while a long one sees enough data without repeats."""
    return max(1, min(4, math.ceil(64 / max(steps, 1))))


def default_lr(width: int, updates: int) -> float:
    """The learning rate when not given: 2e-3 · √(1024 / width) up to 500 Adam updates, then falling as 1/√updates to
    sparsify's Adam setting 2e-4 / √(width / 2¹⁴) (0.8e-3 at width 1024) for long runs. Measured on the modern corpus
    (smollm2 layer 15, width 1024, k 16, 32,768 tokens, 64 updates; five seeds, 2,032 held-out tokens): 3e-3 left
    5.0–6.4 % of the features never active at FVU 0.694–0.698, 2e-3 2.4–3.6 % at 0.702–0.704, 5e-3 13 %; on
    the KJV 1e-2 (the first default) left 39 %."""
    short = 2e-3 * math.sqrt(1024 / width)
    return max(2e-4 / math.sqrt(width / 2**14), min(short, short * math.sqrt(500 / max(updates, 1))))


def lr_at(peak: float, i: int, total: int) -> float:
    """The schedule: a linear warm-up over the first 5% of the ``total`` updates (at least one), then ``peak``."""
    return peak * min(1.0, (i + 1) / max(1, total // 20))
