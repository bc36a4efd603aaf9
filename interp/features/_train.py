"""Training TopK transcoders — per-layer, or one cross-layer transcoder — on a model's own activations, streamed
from an English corpus.

For each chosen layer l the transcoder learns the MLP's map x ↦ y, where x is what the MLP reads (the block's
MLP read: through its read norm, or the stream raw; ``_transcoder.mlp_input``) and y the MLP's write as it
joins the stream (after the MLP's output norm where the block has one), both read from
:class:`interp.engine.Engine`'s forward::

    f = TopK(relu(x W_encᵀ + b_enc))     ŷ = f W_dec + b_dec

With ``cross_layer=True`` one :class:`CrossLayerTranscoder` is trained instead: layer l's features also write to
every later chosen layer's MLP output, ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l'], and the loss below is the
joint one over all output layers. Both are one code path: encoder l's decoder is [F, m_l, d], writing to the m_l
layers from l on (m_l = 1 per-layer, L − l cross-layer); a CLT starts as the per-layer transcoders (its decoders
to later layers zero).

Loss (per output layer, summed over layers): the batch's fraction of variance unexplained

    FVU = Σ_tokens ‖y − ŷ‖² / Σ_tokens ‖y − ȳ‖²        (ȳ the batch mean of y)

plus ``aux_alpha`` × the AuxK loss (EleutherAI sparsify's): the features that have not fired for
``dead_after`` training tokens are *dead*; the ``aux_k`` largest of their pre-activations reconstruct the
residual y − ŷ, and that reconstruction's FVU is added, so dead features get a gradient. Adam; each feature's
decoder (its rows to all the layers it writes to, concatenated) is kept at unit norm (the gradient's component
along it is removed before the step and it is renormalised after it). The corpus is cut into sequences of ``seq_len``
tokens; position 0 of each sequence (the attention sink, whose activations are outliers) is neither trained on nor
evaluated.

Activations are computed batch by batch (``batch_size`` sequences) and never all kept. Every
``checkpoint_every`` steps the whole state (weights, Adam moments, dead-feature counters, step) is written
atomically to ``<cache>/transcoders/<model>/<config hash>/checkpoint.pt``; a run with the same
configuration resumes from it and ends with the same weights as an uninterrupted run (a checkpoint of the per-layer
training from before cross-layer training, its decoders one stacked W_dec [n, F, d], is read in today's per-encoder
layout: the same keys, the same run). The finished
dictionaries (``layer_{l}.safetensors``; a CLT in circuit-tracer's layout, ``W_enc_{i}`` / ``W_dec_{i}.safetensors``
and ``config.yaml``) and their held-out metrics (``metrics.json``) are cached there and returned without training
next time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from interp._io import atomic_write
from interp._validate import check_bool, check_finite_float, check_positive_float, is_int
from interp.engine import Engine
from interp.errors import (
    ArgumentError,
    ResultFormatError,
    UnsupportedArchitectureError,
    UnsupportedOperationError,
    warn_user,
)
from interp.features._corpus import CORPUS_LICENCE, CORPUS_NAME, CORPUS_SOURCE, english_corpus
from interp.features._formats import clt_files, read_clt
from interp.features._transcoder import CrossLayerTranscoder, Transcoder, fvu, mlp_input
from interp.features._warnings import DictionaryQualityWarning
from interp.models import Model, default_cache_dir
from interp.stream import require_model

__all__ = ["TrainedCrossLayerTranscoder", "TrainedTranscoders", "train_transcoders"]

_FORMAT = 2  # bump when the training maths changes: old caches are not reused (2: the lr schedule)


@dataclass(kw_only=True)
class _Trained:
    """What a training run reports, per-layer or cross-layer: ``fvu[i]`` = Σ‖y − ŷ‖² / Σ‖y − ȳ‖² of the MLP output
    of layer ``layers[i]`` over the held-out tokens (ȳ their mean: predicting the mean scores 1), ``l0[i]`` the mean
    number of layer ``layers[i]``'s features active per held-out token, ``dead[i]`` the fraction of them never active
    there. ``tokens`` counts training tokens (sequence positions, position 0 included), ``eval_tokens`` the
    held-out tokens scored. ``tokens_per_second`` is the training run's throughput (activations + optimisation;
    None when the run was resumed), ``from_cache`` whether this call trained nothing, ``path`` the cache directory.
    """

    model_name: str
    layers: list[int]
    fvu: list[float]
    l0: list[float]
    dead: list[float]
    tokens: int
    eval_tokens: int
    config: dict[str, Any]
    path: Path
    tokens_per_second: Optional[float] = None
    train_seconds: Optional[float] = None
    from_cache: bool = False
    corpus: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        raise NotImplementedError

    def to_dataframe(self) -> Any:
        """One row per layer: layer, fvu, l0, dead, n_features, k."""
        import pandas as pd

        n, k = self._widths()
        return pd.DataFrame(
            {"layer": self.layers, "fvu": self.fvu, "l0": self.l0, "dead": self.dead, "n_features": n, "k": k}
        )

    def __repr__(self) -> str:
        mean = sum(self.fvu) / len(self.fvu)
        return (
            f"{type(self).__name__}({self.model_name!r}: {len(self.layers)} layers, width "
            f"{self.config['width']}, k={self.config['k']}, {self.tokens} tokens; held-out FVU mean {mean:.3f}, "
            f"L0 mean {sum(self.l0) / len(self.l0):.1f})"
        )


@dataclass(kw_only=True, repr=False)
class TrainedTranscoders(_Trained):
    """Trained per-layer transcoders and their held-out metrics (:class:`_Trained`): ``transcoders[i]`` belongs to
    layer ``layers[i]``."""

    transcoders: list[Transcoder]

    def __getitem__(self, layer: int) -> Transcoder:
        """The transcoder of ``layer`` (a model layer index, not a position in ``layers``)."""
        if layer not in self.layers:
            raise ArgumentError(f"layer={layer!r} was not trained; trained layers: {self.layers}")
        return self.transcoders[self.layers.index(layer)]

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        return [t.n_features for t in self.transcoders], [t.k for t in self.transcoders]


@dataclass(kw_only=True, repr=False)
class TrainedCrossLayerTranscoder(_Trained):
    """A trained cross-layer transcoder (``clt``, its encoders at ``layers``) and its held-out metrics per layer
    (:class:`_Trained`; ``fvu[i]`` of the joint reconstruction of layer ``layers[i]``'s MLP output, ``l0[i]`` of
    its encoder's features). ``transcoders`` is ``clt`` too, so that the analyses read the same for both kinds:
    ``attribution_graph(model, prompt, trained.transcoders)``."""

    clt: CrossLayerTranscoder

    @property
    def transcoders(self) -> CrossLayerTranscoder:
        return self.clt

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        n = len(self.layers)
        return [self.clt.n_features] * n, [self.clt.k] * n


# ---------------------------------------------------------------------------------------------- inputs


def _int(name: str, v: Any, lo: int, hi: Optional[int] = None, why: str = "") -> int:
    if not is_int(v) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ArgumentError(f"{name}={v!r} must be an int {rng}{why}")
    return int(v)


def _check_layers(model: Model, layers: Any) -> list[int]:
    L = model.arch.n_layers
    if layers == "all":
        return list(range(L))
    if is_int(layers):
        layers = [int(layers)]
    if not isinstance(layers, (list, tuple, range)) or len(layers) == 0:
        raise ArgumentError(
            f"layers={layers!r} must be 'all', a layer index or a non-empty list of layer indices in [0, {L - 1}]"
        )
    out = []
    for l in layers:
        if not is_int(l) or not 0 <= l < L:
            raise ArgumentError(f"layers contains {l!r}; layer indices of model {model.name!r} are in [0, {L - 1}]")
        out.append(int(l))
    if len(set(out)) != len(out):
        raise ArgumentError(f"layers={list(layers)!r} repeats a layer")
    return sorted(out)


def _documents(corpus: Optional[Sequence[str]]) -> tuple[list[str], list[str], str]:
    """(train docs, held-out docs, corpus id)."""
    if corpus is None:
        tr, ho = english_corpus()
        return tr, ho, CORPUS_NAME
    if (
        isinstance(corpus, str)
        or not isinstance(corpus, (list, tuple))
        or len(corpus) < 2
        or not all(isinstance(d, str) and d.strip() for d in corpus)
    ):
        raise ArgumentError(
            "corpus must be None (the bundled English corpus) or a list of at least 2 non-empty "
            f"strings (documents; every tenth, and at least the last, is held out), got {type(corpus).__name__}"
        )
    docs = list(corpus)
    held = [i for i in range(len(docs)) if i % 10 == 9] or [len(docs) - 1]
    digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()[:16]
    return ([d for i, d in enumerate(docs) if i not in held], [docs[i] for i in held], f"custom-{digest}")


def _sequences(model: Model, docs: list[str], seq_len: int, n_seq: int) -> Tensor:
    """The first ``n_seq`` sequences [n_seq, seq_len] of the documents' concatenated token ids (fewer if
    the documents run out); documents are tokenized one by one until enough."""
    tok = model.tokenizer
    if tok is None:
        raise UnsupportedOperationError(f"model {model.name!r} has no tokenizer; training reads text")
    ids: list[int] = []
    eos = getattr(tok, "eos_token_id", None)
    need = n_seq * seq_len
    for d in docs:
        ids.extend(tok(d, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(int(eos))
        if len(ids) >= need:
            break
    n = min(n_seq, len(ids) // seq_len)
    return torch.tensor(ids[: n * seq_len], dtype=torch.long, device="cpu").view(n, seq_len)


def _fingerprint(model: Model) -> str:
    w = model.weights
    vals = [float(w.W_E.double().sum()), float(w.W_out.double().sum()), float(w.W_in.double().abs().sum())]
    return hashlib.sha256(repr(vals).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- activations


def _activations(e: Engine, ids: Tensor, layers: list[int]) -> tuple[Tensor, Tensor]:
    """MLP inputs and outputs [n_layers, batch·(seq_len − 1), d_model] of ``layers`` for sequences ``ids``
    (position 0 dropped), from the engine's forward up to the last chosen layer."""
    a = e.arch
    B, T = ids.shape
    mask = torch.ones_like(ids)
    prompt = torch.arange(B, device=ids.device)
    xs, ys = [], []
    with torch.inference_mode():
        x = e.embed(e.embed_parts(ids))
        for l in range(max(layers) + 1):
            store: dict[str, Tensor] = {}
            resid = x
            x = e.layer(l, x, prompt=prompt, mask=mask, capture={"resid_mid", "mlp_out"}, store=store)
            if l in layers:
                h2 = mlp_input(e, resid, store.get("resid_mid"), l)  # the MLP's input, as the graph reads it
                xs.append(h2[:, 1:].reshape(-1, a.d_model).float())
                ys.append(store["mlp_out"][:, 1:].reshape(-1, a.d_model).float())
    return torch.stack(xs), torch.stack(ys)


# ---------------------------------------------------------------------------------------------- the model


class _State:
    """All layers' parameters: W_enc [n, F, d], b_enc [n, F], b_dec [n, d] stacked; ``W_dec[i]`` [F, m_i, d] encoder
    i's decoder to the m_i output layers i..i + m_i − 1 (m_i = 1 per-layer, n − i cross-layer) — on the host, where
    the training steps run (on host copies of the activations). Each decoder starts as its encoder's unit rows at
    its own layer (zero at later ones)."""

    def __init__(self, n: int, d: int, width: int, gen: torch.Generator, cross: bool = False):
        bound = 1.0 / math.sqrt(d)  # nn.Linear's default init for the encoder
        self.cross = cross
        self.W_enc = ((torch.rand(n, width, d, generator=gen, device="cpu") * 2 - 1) * bound).requires_grad_()
        self.b_enc = torch.zeros(n, width, requires_grad=True, device="cpu")
        unit = self.W_enc.detach() / self.W_enc.detach().norm(dim=-1, keepdim=True)
        self.W_dec = [
            torch.cat(
                [unit[i][:, None], torch.zeros(width, (n - i - 1) if cross else 0, d, device="cpu")], 1
            ).requires_grad_()
            for i in range(n)
        ]
        self.b_dec = torch.zeros(n, d, requires_grad=True, device="cpu")
        self.since = torch.zeros(
            n, width, dtype=torch.long, device="cpu"
        )  # training tokens since each feature last fired
        self.sx = torch.ones(n, 1, 1, device="cpu")  # the scales x and y are divided by while training
        self.sy = torch.ones(n, 1, 1, device="cpu")

    def params(self) -> list[Tensor]:
        return [self.W_enc, self.b_enc, *self.W_dec, self.b_dec]

    def _dec(self, i: int) -> Tensor:
        """Encoder i's decoder on the model's scale: W_dec[i][:, t] · s_y of output layer i + t."""
        m = self.W_dec[i].shape[1]
        return self.W_dec[i] * self.sy[i : i + m, 0, 0][None, :, None]

    def transcoders(self, k: int, layers: list[int], context_length: Optional[int] = None) -> list[Transcoder]:
        """The trained per-layer transcoders of ``layers`` on the model's own scale: W_enc / s_x, W_dec · s_y,
        b_dec · s_y."""
        with torch.no_grad():
            return [
                Transcoder(
                    self.W_enc[i] / self.sx[i],
                    self.b_enc[i].clone(),
                    self._dec(i)[:, 0],
                    self.b_dec[i] * self.sy[i, 0],
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


def _init(s: _State, x: Tensor, y: Tensor, k: int) -> None:
    """From the first batch x, y [n, N, d]: s_x = RMS of x's coordinates, s_y = RMS of (y − ȳ)'s (so both
    have unit coordinates in training); b_dec = ȳ / s_y; the encoder scaled so the initial reconstruction
    ‖f W_dec‖ has the target's mean norm (TopK picks the same features at any positive scale)."""
    with torch.no_grad():
        s.sx = x.pow(2).mean((1, 2), keepdim=True).sqrt().clamp_min(1e-12)
        ym = y.mean(1, keepdim=True)
        s.sy = (y - ym).pow(2).mean((1, 2), keepdim=True).sqrt().clamp_min(1e-12)
        s.b_dec.copy_((ym / s.sy)[:, 0])
        xn, yn = x / s.sx, (y - ym) / s.sy
        vals, idx = torch.relu(torch.bmm(xn, s.W_enc.transpose(1, 2))).topk(k, dim=-1)
        out = _decode(s.W_dec, idx, vals).norm(dim=-1).mean(1)  # [n]; a CLT's later decoders are still zero
        s.W_enc.mul_((yn.norm(dim=-1).mean(1) / out.clamp_min(1e-12))[:, None, None])


def _decode(W_dec: list[Tensor], idx: Tensor, vals: Tensor) -> Tensor:
    """Output layer l': Σ_{i writing to l'} Σ_j vals[i, :, j] W_dec[i][idx[i, :, j], l' − i] for idx, vals [n, N, k]
    (encoder i's kept features) → [n, N, d] (a sparse gather-sum per encoder)."""
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
        for t in range(m):
            parts[i + t].append(out[:, t])
    return torch.stack([reduce(torch.add, p) for p in parts])


@torch.enable_grad()  # also under a caller's torch.set_grad_enabled(False), as transformer-lens's demos start
def _step(
    s: _State,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    k: int,
    aux_k: int,
    aux_alpha: float,
    dead_after: int,
    new_tokens: bool = True,
) -> Tensor:
    """One Adam step on a batch (x, y [n, N, d]); returns the per-layer FVU [n] before the step."""
    pre = torch.baddbmm(s.b_enc[:, None], x, s.W_enc.transpose(1, 2))  # [n, N, F]
    vals, idx = torch.relu(pre).topk(k, dim=-1)
    yhat = _decode(s.W_dec, idx, vals) + s.b_dec[:, None]
    err = fvu(y, yhat)
    loss = err.sum()
    with torch.no_grad():
        fired = _fired(idx, vals, s.since.shape[1])
        if new_tokens:  # a batch's first pass counts its tokens
            s.since += x.shape[1]
        s.since[fired] = 0
        dead = s.since >= dead_after
    if aux_alpha > 0 and bool(dead.any()):
        ka = min(aux_k, int(dead.sum(1).max()))
        masked = pre.masked_fill(~dead[:, None, :], float("-inf"))
        avals, aidx = masked.topk(ka, dim=-1)
        avals = torch.relu(avals)  # -inf (a layer with fewer dead features) → 0
        resid = (y - yhat).detach()
        ehat = _decode(s.W_dec, aidx, avals)
        aux = fvu(resid, ehat)
        has = dead.any(1)  # [n] encoders with dead features; an output layer's AuxK term needs one writing to it
        aux = torch.where(has.cummax(0).values if s.cross else has, aux, torch.zeros_like(aux))
        loss = loss + aux_alpha * aux.nan_to_num(0.0).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for W in s.W_dec:  # keep each feature's decoder norm: remove the gradient's component along it
            if W.grad is not None:
                W.grad -= (W.grad * W).sum((-2, -1), keepdim=True) * W
    opt.step()
    with torch.no_grad():
        for W in s.W_dec:
            W /= W.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-12)
    return err.detach()


def _fired(idx: Tensor, vals: Tensor, width: int) -> Tensor:
    """[n, F] bool: which features were active (value > 0) anywhere in the batch."""
    n = idx.shape[0]
    out = torch.zeros(n, width, dtype=torch.bool, device=idx.device)
    out.view(-1)[(idx + torch.arange(n, device=idx.device)[:, None, None] * width)[vals > 0]] = True
    return out


# ---------------------------------------------------------------------------------------------- cache


def _atomic(path: Path, write: Callable[[str], Any]) -> None:
    """Write through a temporary file in the same directory, then rename over ``path`` (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)


def _write(path: Path, tensors: dict[str, Tensor], meta: dict[str, str]) -> None:
    from safetensors.torch import save_file

    _atomic(path, lambda p: save_file({name: v.contiguous() for name, v in tensors.items()}, p, metadata=meta))


def _save_final(
    root: Path, layers: list[int], trained: Union[list[Transcoder], CrossLayerTranscoder], metrics: dict[str, Any]
) -> None:
    """Per-layer: ``layer_{l}.safetensors`` (metadata k, layer, context_length); a CLT: circuit-tracer's layout
    (``_formats.clt_files``). ``metrics.json`` is written last: its presence marks a finished cache."""
    if isinstance(trained, CrossLayerTranscoder):
        files, config = clt_files(trained)
        for name, (ts, meta) in files.items():
            _write(root / name, ts, meta)
        _atomic(root / "config.yaml", lambda p: Path(p).write_text(config))
    else:
        for l, t in zip(layers, trained):
            meta = {"k": str(t.k), "layer": str(l)} | (
                {} if t.context_length is None else {"context_length": str(t.context_length)}
            )
            _write(
                root / f"layer_{l}.safetensors",
                {"W_enc": t.W_enc, "W_dec": t.W_dec, "b_enc": t.b_enc, "b_dec": t.b_dec},
                meta,
            )
    _atomic(root / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))  # written last


def _load_final(root: Path) -> tuple[Union[list[Transcoder], CrossLayerTranscoder], dict[str, Any]]:
    from safetensors import safe_open

    try:
        metrics = json.loads((root / "metrics.json").read_text())
        if metrics["config"].get("cross_layer"):
            clt = read_clt(root)
            if list(clt.model_layers) != metrics["layers"] or clt.k != metrics["config"]["k"]:
                raise ValueError(
                    f"its files hold layers {list(clt.model_layers)}, k={clt.k}; metrics.json says "
                    f"{metrics['layers']}, k={metrics['config']['k']}"
                )
            return clt, metrics
        tcs = []
        for l in metrics["layers"]:
            with safe_open(str(root / f"layer_{l}.safetensors"), framework="pt") as f:
                t = {k: f.get_tensor(k) for k in ("W_enc", "W_dec", "b_enc", "b_dec")}
            tcs.append(
                Transcoder(
                    t["W_enc"],
                    t["b_enc"],
                    t["W_dec"],
                    t["b_dec"],
                    activation="topk",
                    k=metrics["config"]["k"],
                    context_length=metrics["config"].get("seq_len"),
                    layer=l,
                )
            )
    except Exception as e:  # OSError, JSON and safetensors' own errors, a bad shape
        raise ResultFormatError(
            f"the cached transcoders in {str(root)!r} are damaged ({type(e).__name__}: {e}); "
            "delete that directory to retrain"
        ) from None
    return tcs, metrics


# ---------------------------------------------------------------------------------------------- the budget


def default_passes(steps: int) -> int:
    """Adam steps per batch read when not given: 4 for a run of up to 16 batches, falling to 1 by 64 batches
    (ceil(64 / steps), within [1, 4]). On a CPU a batch's forward costs more than a step: a short run learns
    more per token read, while a long one sees enough data without repeats."""
    return max(1, min(4, math.ceil(64 / max(steps, 1))))


def default_lr(width: int, updates: int) -> float:
    """The learning rate when not given: 1e-2 up to 500 Adam updates, then 1e-2 · √(500 / updates), and at least
    sparsify's 2e-4 / √(width / 2¹⁴) (tuned for runs of millions of tokens, and far too small for a short one: a
    budget of a few dozen updates needs a large step to move the encoder at all)."""
    return max(2e-4 / math.sqrt(width / 2**14), min(1e-2, 1e-2 * math.sqrt(500 / max(updates, 1))))


def _lr_at(peak: float, i: int, total: int) -> float:
    """The schedule: a linear warm-up over the first 5% of the ``total`` updates (at least one), then ``peak``. (A
    decay to a tenth at the end was measured worse for these short runs: tiny Llama, 100 steps at 1e-2, held-out
    FVU 0.48 / 0.59 against 0.31 / 0.39 at a constant rate.)"""
    return peak * min(1.0, (i + 1) / max(1, total // 20))


#: a layer warns when its held-out FVU is at least this (predicting the mean scores 1) ...
FVU_WARN = 1.0
#: ... or when more than this fraction of its features never fired on the held-out tokens
DEAD_WARN = 0.5


def _warn_quality(
    name: str, layers: list[int], fvu: list[float], dead: list[float], tokens: int, lr: float, passes: int
) -> None:
    """A :class:`DictionaryQualityWarning` naming the layers with held-out FVU ≥ :data:`FVU_WARN` or a dead
    fraction > :data:`DEAD_WARN`, and what to change."""
    bad_fvu = [f"layer {l} (FVU {f:.2f})" for l, f in zip(layers, fvu) if not f < FVU_WARN]
    bad_dead = [f"layer {l} ({d:.0%} dead)" for l, d in zip(layers, dead) if d > DEAD_WARN]
    if not bad_fvu and not bad_dead:
        return
    what = []
    if bad_fvu:
        what.append(
            f"held-out FVU ≥ {FVU_WARN:g} at {', '.join(bad_fvu)}: no better than predicting the mean, so an "
            "attribution graph over these layers is mostly error nodes"
        )
    if bad_dead:
        what.append(
            f"most features never fire on held-out text at {', '.join(bad_dead)}: the dictionary uses a "
            "fraction of its width"
        )
    warn_user(
        f"train_transcoders({name!r}): {'; '.join(what)}. Train on more tokens (tokens={tokens} now) or with "
        f"a smaller width; lr={lr:.3g} and passes={passes} were used (leave them None for the defaults scaled "
        "to the budget)",
        DictionaryQualityWarning,
    )


# ---------------------------------------------------------------------------------------------- the function


def train_transcoders(
    model: Model,
    *,
    layers: Union[str, int, Sequence[int]],
    width: int,
    k: int,
    tokens: int,
    seq_len: int = 128,
    batch_size: int = 8,
    lr: Optional[float] = None,
    aux_k: Optional[int] = None,
    aux_alpha: float = 0.03125,
    dead_after: Optional[int] = None,
    eval_tokens: int = 8192,
    seed: int = 0,
    corpus: Optional[Sequence[str]] = None,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    checkpoint_every: int = 25,
    progress: Optional[bool] = None,
    passes: Optional[int] = None,
    cross_layer: bool = False,
) -> Union[TrainedTranscoders, TrainedCrossLayerTranscoder]:
    """Train TopK transcoders (MLP input → MLP output) for ``layers`` of ``model`` (module docstring).

    ``width`` features per layer, ``k`` active per token, ``tokens`` training tokens from ``corpus`` (None:
    the bundled King James Bible, :mod:`interp.features` docs; or a list of documents, every tenth held
    out), read as sequences of ``seq_len`` tokens, ``batch_size`` sequences a step. ``lr`` is reached after a
    linear warm-up over the first 5% of the Adam updates; by default scaled to the budget, :func:`default_lr` (1e-2
    up to 500 updates, falling as 1/√updates to sparsify's 2e-4 / √(width / 2¹⁴) for long runs); ``aux_k`` (default
    d_model / 2) dead features reconstruct the residual with weight ``aux_alpha``; a feature is dead after
    ``dead_after`` tokens without firing (default tokens / 4). Metrics on ``eval_tokens`` held-out tokens. Cached under
    ``cache_dir`` (default ``$INTERP_CACHE`` or ``~/.cache/interp``)
    ``/transcoders/<model>/<hash of the configuration>/``, with a resumable checkpoint every ``checkpoint_every`` steps
    (a checkpoint written by the per-layer training of before cross-layer training resumes too);
    ``progress`` shows a tqdm bar (None: when training).
    ``passes`` Adam steps are taken on each batch read (its tokens counted once; default :func:`default_passes`:
    4 for a short run, 1 from 64 batches): where the model's forward costs more than a step, as on a CPU, a short
    run learns more per token read. A layer whose held-out FVU is ≥ 1 (no better than predicting the mean) or
    most of whose features never fire warns (:class:`DictionaryQualityWarning`, naming the layers and the fix).

    ``cross_layer=True`` trains one :class:`CrossLayerTranscoder` over ``layers`` instead (each encoder's features
    write to its layer's and every later chosen layer's MLP output; the joint loss Σ_l' FVU_l'; ``width`` and ``k``
    per layer) and returns a :class:`TrainedCrossLayerTranscoder` (per-layer held-out FVU of the joint
    reconstruction, L0 per encoder); its cache is circuit-tracer's CLT layout, readable by :func:`load_transcoders`.
    """
    # 1. the inputs checked, the configuration and its cache directory
    plan = _plan(
        model,
        layers=layers,
        width=width,
        k=k,
        tokens=tokens,
        seq_len=seq_len,
        batch_size=batch_size,
        lr=lr,
        aux_k=aux_k,
        aux_alpha=aux_alpha,
        dead_after=dead_after,
        eval_tokens=eval_tokens,
        seed=seed,
        corpus=corpus,
        cache_dir=cache_dir,
        checkpoint_every=checkpoint_every,
        progress=progress,
        passes=passes,
        cross_layer=cross_layer,
    )
    # 2. a finished run is read from its cache
    if (plan.root / "metrics.json").is_file():
        cached, m = _load_final(plan.root)
        return _result(model, plan, cached, m, True)

    # 3. the data: the first n_steps·batch_size training sequences in a seeded order; the held-out sequences
    train, held = _data(model, plan)
    gen = torch.Generator().manual_seed(plan.seed)
    order = torch.randperm(train.shape[0], generator=gen, device="cpu")

    # 4. the state: resumed from the checkpoint, or initialised (scales, b_dec, encoder scale) from the first batch
    e = Engine.of(model)
    s, opt, start = _start(e, model, plan, train, order, gen)

    # 5. the Adam steps from there on, checkpointed
    seconds = _optimise(e, model, plan, s, opt, train, order, start)

    # 6. the trained dictionaries evaluated on the held-out tokens, cached and returned
    trained = (
        s.clt(plan.k, plan.layers, plan.seq_len)
        if plan.cross_layer
        else s.transcoders(plan.k, plan.layers, plan.seq_len)
    )
    m = _evaluate(e, held, plan.layers, trained, plan.batch_size, model.device)
    m.update(
        layers=plan.layers,
        config=plan.config,
        train_seconds=seconds if start == 0 else None,
        tokens_per_second=(plan.tokens / seconds) if start == 0 and seconds > 0 else None,
    )
    _save_final(plan.root, plan.layers, trained, m)
    if plan.checkpoint.is_file():
        plan.checkpoint.unlink()
    return _result(model, plan, trained, m, False)


@dataclass(frozen=True)
class _Plan:
    """One training run's checked options (:func:`train_transcoders`), what names its cache (``config``, whose hash
    names the directory ``root``) and what the result reports of its corpus (``source``, ``licence``)."""

    model_name: str
    fingerprint: str
    layers: list[int]
    width: int
    k: int
    tokens_asked: int
    seq_len: int
    batch_size: int
    passes: int
    lr: float
    aux_k: int
    aux_alpha: float
    dead_after: int
    eval_tokens: int
    seed: int
    checkpoint_every: int
    progress: Optional[bool]
    cross_layer: bool
    train_docs: list[str]
    held_docs: list[str]
    corpus_id: str
    source: str
    licence: Optional[str]
    cache: Path

    @property
    def step_tokens(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def n_steps(self) -> int:
        return self.tokens_asked // self.step_tokens

    @property
    def tokens(self) -> int:
        """The training tokens: whole steps of batch_size · seq_len."""
        return self.n_steps * self.step_tokens

    @property
    def config(self) -> dict[str, Any]:
        """What the cache is keyed by (a per-layer run's keys are those of before cross-layer training)."""
        return dict(
            format=_FORMAT,
            model=self.model_name,
            fingerprint=self.fingerprint,
            layers=self.layers,
            width=self.width,
            k=self.k,
            tokens=self.tokens,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
            lr=self.lr,
            aux_k=self.aux_k,
            aux_alpha=self.aux_alpha,
            dead_after=self.dead_after,
            eval_tokens=self.eval_tokens,
            seed=self.seed,
            corpus=self.corpus_id,
            passes=self.passes,
            schedule="warmup",
        ) | ({"cross_layer": True} if self.cross_layer else {})

    @property
    def root(self) -> Path:
        """``<cache>/transcoders/<model>/<hash of config>``."""
        key = hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:16]
        safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model_name)
        return self.cache / "transcoders" / safe_name / key

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.pt"


def _plan(
    model: Model,
    *,
    layers: Any,
    width: Any,
    k: Any,
    tokens: Any,
    seq_len: Any,
    batch_size: Any,
    lr: Any,
    aux_k: Any,
    aux_alpha: Any,
    dead_after: Any,
    eval_tokens: Any,
    seed: Any,
    corpus: Any,
    cache_dir: Any,
    checkpoint_every: Any,
    progress: Any,
    passes: Any,
    cross_layer: Any,
) -> _Plan:
    """Step 1 of :func:`train_transcoders`: the model and every option checked (typed errors naming the argument),
    the defaults filled in."""
    require_model(model)
    a = model.arch
    if not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers to train transcoders for")
    if model.block.normed_stream:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is post-norm (its stream is normed after each join); "
            "transcoders are trained for pre-norm decoders (the models attribution "
            "graphs support)"
        )
    layers_ = _check_layers(model, layers)
    width = _int("width", width, 1)
    k = _int("k", k, 1, width, f" (at most width={width})")
    seq_len = _int("seq_len", seq_len, 2, a.n_ctx, f" (the model's context is {a.n_ctx})")
    batch_size = _int("batch_size", batch_size, 1)
    step_tokens = batch_size * seq_len
    tokens = _int("tokens", tokens, step_tokens, why=f" (at least one batch: batch_size·seq_len = {step_tokens})")
    eval_tokens = _int("eval_tokens", eval_tokens, seq_len, why=f" (at least one sequence of seq_len={seq_len})")
    checkpoint_every = _int("checkpoint_every", checkpoint_every, 1)
    seed = _int("seed", seed, 0)
    aux_k = a.d_model // 2 if aux_k is None else _int("aux_k", aux_k, 1)
    dead_after = max(1, tokens // 4) if dead_after is None else _int("dead_after", dead_after, 1)
    if lr is not None:
        check_positive_float("lr", lr)
    if check_finite_float("aux_alpha", aux_alpha) < 0:
        raise ArgumentError(f"aux_alpha={aux_alpha!r} must be a finite number >= 0")
    check_bool("progress", progress, none="automatic")
    check_bool("cross_layer", cross_layer)  # True: one cross-layer transcoder; False: per-layer transcoders
    train_docs, held_docs, corpus_id = _documents(corpus)
    n_steps = tokens // step_tokens
    passes = default_passes(n_steps) if passes is None else _int("passes", passes, 1)
    return _Plan(
        model_name=model.name,
        fingerprint=_fingerprint(model),
        layers=layers_,
        width=width,
        k=k,
        tokens_asked=tokens,
        seq_len=seq_len,
        batch_size=batch_size,
        passes=passes,
        lr=float(default_lr(width, n_steps * passes) if lr is None else lr),
        aux_k=aux_k,
        aux_alpha=float(aux_alpha),
        dead_after=dead_after,
        eval_tokens=eval_tokens,
        seed=seed,
        checkpoint_every=checkpoint_every,
        progress=progress,
        cross_layer=cross_layer,
        train_docs=train_docs,
        held_docs=held_docs,
        corpus_id=corpus_id,
        source=CORPUS_SOURCE if corpus is None else f"{len(train_docs) + len(held_docs)} documents given as corpus=",
        licence=CORPUS_LICENCE if corpus is None else None,
        cache=Path(cache_dir) if cache_dir is not None else default_cache_dir(),
    )


def _result(
    model: Model, plan: _Plan, trained: Union[list[Transcoder], CrossLayerTranscoder], m: dict[str, Any], cached: bool
) -> Union[TrainedTranscoders, TrainedCrossLayerTranscoder]:
    """The result of a run (trained now, or read from the cache) with its metrics ``m``; warns on its quality."""
    _warn_quality(model.name, plan.layers, m["fvu"], m["dead"], plan.tokens, plan.lr, plan.passes)
    kw = dict(
        model_name=model.name,
        layers=plan.layers,
        fvu=m["fvu"],
        l0=m["l0"],
        dead=m["dead"],
        tokens=plan.tokens,
        eval_tokens=m["eval_tokens"],
        config=plan.config,
        path=plan.root,
        tokens_per_second=m.get("tokens_per_second"),
        train_seconds=m.get("train_seconds"),
        from_cache=cached,
        corpus=plan.source,
        details={"licence": plan.licence, "steps": plan.n_steps},
    )
    if isinstance(trained, CrossLayerTranscoder):
        return TrainedCrossLayerTranscoder(clt=trained, **kw)
    return TrainedTranscoders(transcoders=trained, **kw)


def _data(model: Model, plan: _Plan) -> tuple[Tensor, Tensor]:
    """Step 3: the first n_steps · batch_size training sequences and the held-out sequences [n, seq_len]."""
    train = _sequences(model, plan.train_docs, plan.seq_len, plan.n_steps * plan.batch_size)
    if train.shape[0] < plan.n_steps * plan.batch_size:
        raise ArgumentError(
            f"tokens={plan.tokens_asked} is more than the corpus holds for training "
            f"({train.shape[0] * plan.seq_len} tokens in sequences of {plan.seq_len})"
        )
    held = _sequences(model, plan.held_docs, plan.seq_len, plan.eval_tokens // plan.seq_len)
    if held.shape[0] == 0:
        raise ArgumentError(
            "the held-out documents are shorter than one sequence of seq_len tokens; give a larger corpus"
        )
    return train, held


def _start(
    e: Engine, model: Model, plan: _Plan, train: Tensor, order: Tensor, gen: torch.Generator
) -> tuple[_State, torch.optim.Optimizer, int]:
    """Step 4: the parameters and Adam, and the step to start from — the checkpoint's (:func:`_resume`), or 0 with
    the scales, b_dec and the encoder's scale from the first batch (:func:`_init`)."""
    s = _State(len(plan.layers), e.arch.d_model, plan.width, gen, plan.cross_layer)
    opt = torch.optim.Adam(s.params(), lr=plan.lr)
    if plan.checkpoint.is_file():
        return s, opt, _resume(plan.checkpoint, s, opt)
    x0, y0 = _activations(e, train[order[: plan.batch_size]].to(model.device), plan.layers)
    _init(s, x0.cpu(), y0.cpu(), plan.k)
    return s, opt, 0


def _optimise(
    e: Engine,
    model: Model,
    plan: _Plan,
    s: _State,
    opt: torch.optim.Optimizer,
    train: Tensor,
    order: Tensor,
    start: int,
) -> float:
    """Step 5: steps ``start`` .. n_steps − 1, each on one batch read (``passes`` Adam steps on it at the scheduled
    learning rate), a checkpoint every ``checkpoint_every`` steps but the last; returns the seconds taken."""
    from tqdm.auto import tqdm

    n_steps, step_tokens, bs = plan.n_steps, plan.step_tokens, plan.batch_size
    show = plan.progress if plan.progress is not None else n_steps > start
    bar = tqdm(
        total=n_steps * step_tokens,
        initial=start * step_tokens,
        desc=f"transcoders {model.name}",
        unit="tok",
        unit_scale=True,
        disable=not show,
    )
    t0 = time.perf_counter()
    try:
        for step in range(start, n_steps):
            x, y = _activations(e, train[order[step * bs : (step + 1) * bs]].to(model.device), plan.layers)
            x, y = x.cpu() / s.sx, y.cpu() / s.sy
            for r in range(plan.passes):
                for g in opt.param_groups:
                    g["lr"] = _lr_at(plan.lr, step * plan.passes + r, n_steps * plan.passes)
                fvu = _step(s, opt, x, y, plan.k, plan.aux_k, plan.aux_alpha, plan.dead_after, new_tokens=r == 0)
            bar.update(step_tokens)
            bar.set_postfix(fvu=f"{float(fvu.mean()):.3f}")
            if (step + 1) % plan.checkpoint_every == 0 and step + 1 < n_steps:
                _save_checkpoint(plan.checkpoint, s, opt, step + 1)
    finally:
        bar.close()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------- checkpoints


def _save_checkpoint(path: Path, s: _State, opt: torch.optim.Optimizer, step: int) -> None:
    """The whole state after ``step`` steps (parameters, dead-feature counters, scales, Adam), atomically."""
    st = {
        "params": [p.detach() for p in s.params()],
        "since": s.since,
        "sx": s.sx,
        "sy": s.sy,
        "opt": opt.state_dict(),
        "step": step,
    }
    _atomic(path, lambda p: torch.save(st, p))


def _resume(path: Path, s: _State, opt: torch.optim.Optimizer) -> int:
    """Load the checkpoint at ``path`` into ``s`` and ``opt`` (one written by the per-layer training of before
    cross-layer training is read through :func:`_upgrade_checkpoint`); returns its step. A checkpoint that cannot
    be read, or whose tensors do not fit this run, is a :class:`ResultFormatError` (training on garbage is worse
    than starting again)."""
    try:
        st = torch.load(path, map_location="cpu", weights_only=True)
        if _old_layout(st, s):
            st = _upgrade_checkpoint(st, len(s.W_dec))
        params = s.params()
        got = [tuple(v.shape) for v in st["params"]]
        want = [tuple(p.shape) for p in params]
        if got != want:
            raise ValueError(f"its parameters have shapes {got}; this run's are {want}")
        with torch.no_grad():
            for p, v in zip(params, st["params"]):
                p.copy_(v)
        s.since, s.sx, s.sy = st["since"], st["sx"], st["sy"]
        opt.load_state_dict(st["opt"])
        return int(st["step"])
    except Exception as ex:  # a damaged checkpoint: start again rather than train on garbage
        raise ResultFormatError(
            f"checkpoint {str(path)!r} is damaged ({type(ex).__name__}: {ex}); delete it to start this run again"
        ) from None


def _old_layout(st: Any, s: _State) -> bool:
    """Whether checkpoint ``st`` is in the layout of the per-layer training before cross-layer training existed:
    four parameters W_enc [n, F, d], b_enc [n, F], W_dec [n, F, d], b_dec [n, d] (today's: W_enc, b_enc, then one
    decoder [F, m_i, d] per encoder, then b_dec)."""
    if s.cross or not isinstance(st, dict) or not isinstance(st.get("params"), list) or len(st["params"]) != 4:
        return False
    n, F_, d = s.W_enc.shape
    W_dec = st["params"][2]
    return isinstance(W_dec, Tensor) and tuple(W_dec.shape) == (n, F_, d) and n * F_ > 1


def _upgrade_checkpoint(st: dict[str, Any], n: int) -> dict[str, Any]:
    """An old-layout checkpoint (:func:`_old_layout`) in today's: the stacked W_dec [n, F, d] split into encoder i's
    decoder W_dec[i][:, None] [F, 1, d], and its Adam moments alike (parameter 2 becomes parameters 2 .. n + 1, b_dec
    parameter n + 2). Adam's update is elementwise and the decoder's norm is per feature, so the run continues as it
    would have: the same weights as an uninterrupted run."""
    W_enc, b_enc, W_dec, b_dec = st["params"]
    new_of = {0: [0], 1: [1], 2: list(range(2, 2 + n)), 3: [n + 2]}  # old parameter index → today's
    state: dict[int, dict[str, Any]] = {}
    for old, per in st["opt"]["state"].items():
        for i, new in enumerate(new_of[int(old)]):
            state[new] = {
                name: (v[i][:, None] if int(old) == 2 and v.ndim == 3 else v).clone() if isinstance(v, Tensor) else v
                for name, v in per.items()
            }
    (group,) = st["opt"]["param_groups"]
    return dict(
        st,
        params=[W_enc, b_enc, *(W_dec[i][:, None] for i in range(n)), b_dec],
        opt={"state": state, "param_groups": [dict(group, params=list(range(n + 3)))]},
    )


def _evaluate(
    e: Engine,
    held: Tensor,
    layers: list[int],
    trained: Union[list[Transcoder], CrossLayerTranscoder],
    batch_size: int,
    device: torch.device,
) -> dict[str, Any]:
    """Held-out FVU per output layer (Σ‖y − ŷ‖² / Σ‖y − ȳ‖², ȳ the held-out mean; sums accumulated over batches; a
    CLT's ŷ its joint reconstruction), L0 and the fraction of features never active per encoder layer."""
    n = len(layers)
    widths = [trained.n_features] * n if isinstance(trained, CrossLayerTranscoder) else [t.n_features for t in trained]
    sse = torch.zeros(n, dtype=torch.float64, device="cpu")
    sy = torch.zeros(n, e.arch.d_model, dtype=torch.float64, device="cpu")
    syy = torch.zeros(n, dtype=torch.float64, device="cpu")
    active = torch.zeros(n, dtype=torch.float64, device="cpu")
    ever = [torch.zeros(w, dtype=torch.bool, device="cpu") for w in widths]
    N = 0
    with torch.no_grad():
        for b in range(0, held.shape[0], batch_size):
            x, y = _activations(e, held[b : b + batch_size].to(device), layers)
            x, y = x.cpu(), y.cpu()
            N += x.shape[1]
            if isinstance(trained, CrossLayerTranscoder):
                fs = trained.encode(x)
                yhat = trained.decode(fs, x)
            else:
                fs = torch.stack([t.encode(x[i]) for i, t in enumerate(trained)])
                yhat = torch.stack([t.decode(fs[i]) for i, t in enumerate(trained)])
            for i in range(n):
                r = y[i] - yhat[i]
                sse[i] += r.double().pow(2).sum()
                sy[i] += y[i].double().sum(0)
                syy[i] += y[i].double().pow(2).sum()
                nz = fs[i] != 0
                active[i] += nz.sum()
                ever[i] |= nz.any(0)
    var = syy - sy.pow(2).sum(1) / N  # Σ‖y − ȳ‖² = Σ‖y‖² − N‖ȳ‖²
    return dict(
        fvu=(sse / var).tolist(),
        l0=(active / N).tolist(),
        dead=[1.0 - float(v.float().mean()) for v in ever],
        eval_tokens=N,
    )
