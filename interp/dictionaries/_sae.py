"""Residual-stream SAEs: a sparse dictionary that reconstructs the stream at one point, and its reconstruction report.

An SAE of layer l at site s ∈ {resid_pre, resid_mid, resid_post} reads the residual stream x at
``blocks.{l}.hook_resid_{pre|mid|post}`` and reconstructs it (the maths of :class:`interp.features.Transcoder`,
one implementation, without a skip term)::

    f  = act(x W_encᵀ + b_enc)          x̂ = f W_dec + b_dec

On a batch, with x the model's real stream at the site over the valid (unpadded) tokens t = 1..N::

    FVU = Σ_t ‖x_t − x̂_t‖² / Σ_t ‖x_t − x̄‖²      (x̄ the mean over the tokens: predicting it scores 1)
    L0  = (1/N) Σ_t #{i : f_{t,i} ≠ 0}

An SAE is not a transcoder: it writes no MLP output, so attribution graphs, interventions and QK attribution
(which replace each MLP by its transcoder) refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._result import place
from interp._validate import is_int
from interp.errors import ArgumentError, ShapeError, UnsupportedArchitectureError
from interp.dictionaries._transcoder import Dictionary
from interp.dictionaries._transcoder import fvu as _fvu
from interp.labels import Resid
from interp.models import Model
from interp.engine.internal import Engine
from interp.stream.internal import as_batch, require_model

__all__ = ["SAE", "SAE_SITES", "SAEReconstruction", "check_saes", "sae_reconstruction"]

#: the residual-stream points an SAE may read
SAE_SITES = ("resid_pre", "resid_mid", "resid_post")


@dataclass(frozen=True, kw_only=True)
class SAE(Dictionary):
    """A residual-stream SAE (module docstring): the weights of :class:`interp.features.Transcoder` without W_skip
    (W_enc [F, d], b_enc [F], W_dec [F, d], b_dec [d], ``activation``, ``threshold``, ``k``), plus ``layer`` and
    ``site`` in :data:`SAE_SITES` — it reads and reconstructs ``blocks.{layer}.hook_{site}``."""

    layer: int
    site: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.W_skip is not None:
            raise ArgumentError("an SAE reconstructs its input: W_skip must be None (a skip term is a transcoder's)")
        if not is_int(self.layer) or self.layer < 0:
            raise ArgumentError(f"layer={self.layer!r} must be a non-negative int")
        object.__setattr__(self, "layer", int(self.layer))
        if self.site not in SAE_SITES:
            raise ArgumentError(f"site={self.site!r} is not one of {SAE_SITES}")

    @property
    def hook_name(self) -> str:
        """The stream point it reads, as a transformer-lens hook name (``blocks.3.hook_resid_post``)."""
        return str(Resid(self.layer, self.site[len("resid_") :]))  # type: ignore[arg-type]  # checked: one of SAE_SITES

    def reconstruct(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """x̂ = decode(encode(x))."""
        return self.decode(self.encode(x))


def check_saes(model: Model, saes: Sequence[SAE], name: str = "saes") -> None:
    """Each SAE's layer and site exist in ``model`` and its d_model is the model's (else a typed error naming
    ``name[i]``)."""
    a = model.arch
    for i, s in enumerate(saes):
        if not isinstance(s, SAE):
            raise ArgumentError(f"{name}[{i}] is a {type(s).__name__}, not an interp.features.SAE")
        if s.layer >= a.n_layers:
            raise ShapeError(f"{name}[{i}] reads layer {s.layer}; model {model.name!r} has {a.n_layers} layers")
        if s.d_model != a.d_model:
            raise ShapeError(
                f"{name}[{i}] (layer {s.layer}, {s.site}) has d_model={s.d_model}; model "
                f"{model.name!r} has d_model={a.d_model}"
            )
        if s.site == "resid_mid" and "resid_mid" not in model.block.points:
            raise UnsupportedArchitectureError(
                f"{name}[{i}] reads resid_mid; model {model.name!r} has no point between "
                "attention and MLP (parallel or attention-only blocks)"
            )


@dataclass(frozen=True)
class SAEReconstruction:
    """What each SAE makes of the model's real stream on a batch (module docstring). Per SAE i (in the order
    given): ``resid[i]`` the stream x at ``hook_names[i]`` [batch, pos, d_model], ``features[i]`` f [batch, pos, F],
    ``reconstruction[i]`` x̂; ``fvu[i]`` and ``l0[i]`` over the tokens where ``attention_mask`` is 1."""

    hook_names: list[str]
    tokens: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]
    resid: list[Tensor]
    features: list[Tensor]
    reconstruction: list[Tensor]
    fvu: list[float]
    l0: list[float]

    def __post_init__(self) -> None:
        place(self)  # every tensor on the model's device (interp._result.place)

    def error(self, i: int) -> Tensor:
        """x − x̂ of SAE ``i``."""
        return self.resid[i] - self.reconstruction[i]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per SAE: hook, n_features, fvu, l0."""
        return pd.DataFrame(
            {
                "hook": self.hook_names,
                "n_features": [int(f.shape[-1]) for f in self.features],
                "fvu": self.fvu,
                "l0": self.l0,
            }
        )


def _stream_points(model: Model, batch: Any, saes: Sequence[SAE]) -> dict[str, Tensor]:
    """The stream x [batch, pos, d_model] at each SAE's point, by hook name, from one engine pass."""
    sites = {s.site for s in saes} - {"resid_pre"}
    run = Engine.of(model).run(batch.tokens, batch.attention_mask, capture=sites)
    return {s.hook_name: run.point(s.site, s.layer) for s in saes}


def sae_reconstruction(model: Model, inputs: Any, saes: Union[SAE, Sequence[SAE]]) -> SAEReconstruction:
    """Run ``model`` once on ``inputs`` (a prompt, prompts or token ids [batch, pos]), read the stream at each SAE's
    point (the engine's pass) and encode / reconstruct it: :class:`SAEReconstruction` with FVU and L0."""
    require_model(model)
    one = isinstance(saes, SAE)
    lst: list[SAE] = [saes] if one else list(saes) if isinstance(saes, (list, tuple)) else []  # type: ignore[list-item]
    if not lst:
        raise ArgumentError(f"saes={saes!r} must be an interp.features.SAE or a non-empty list of them")
    check_saes(model, lst, "saes")
    batch = as_batch(model, inputs)
    acts = _stream_points(model, batch, lst)
    mask = batch.attention_mask.bool()
    resid, feats, recon, fvu, l0 = [], [], [], [], []
    with torch.no_grad():
        for s in lst:
            x = acts[s.hook_name].to(device=s.W_enc.device, dtype=s.W_enc.dtype)
            f = s.encode(x)
            xh = s.decode(f)
            m = mask.to(x.device)
            resid.append(x)
            feats.append(f)
            recon.append(xh)
            fvu.append(float(_fvu(x[m][None].double(), xh[m][None].double())[0]))
            l0.append(float((f[m] != 0).sum(-1).double().mean()))
    return SAEReconstruction(
        [s.hook_name for s in lst], batch.tokens, batch.attention_mask, resid, feats, recon, fvu, l0
    )
