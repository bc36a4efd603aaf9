"""The load-time self-check: interp's forward of a model against the model's own, on a short probe.

Every analysis that re-runs a model runs :class:`~interp.engine.internal.Engine`, built from the model's frozen
weights and its :class:`~interp.models.ArchInfo` capabilities. A quirk of a checkpoint that no
capability describes would make those analyses silently wrong, so a model is checked when it is loaded:
the residual stream entering every block and the logits (encoders: the final hidden state) of the
engine's forward are compared with the model's own forward (the bridge's hooks on the Hugging Face
module) on two prompts of 12 token ids. The first point whose max |difference| exceeds the tolerance,
relative to that tensor's largest magnitude (1e-4 in float32/float64; 12 unit roundoffs in half precision:
4.7e-2 bfloat16, 5.9e-3 float16), refuses
the model with :class:`~interp.errors.EngineMismatchError` naming the block, the quantity and both sizes.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import torch
from torch import Tensor

from interp.engine._forward import Engine
from interp.engine._readout import readout
from interp.errors import EngineMismatchError, UnsupportedArchitectureError
from interp.models import Model
from interp.models.internal import load_progress, load_step
from interp.models import load_model_unchecked, model_from_hf_unchecked

__all__ = ["load_model", "model_from_hf", "self_check"]

PROBE_PROMPTS, PROBE_TOKENS = 2, 12


#: the self-check's tolerance in half precision, in units of the dtype's unit roundoff u (2^-8 bfloat16, 2^-11
#: float16): two forwards of the same maths in different op orders differ by their roundings, which grow with
#: depth like a random walk; measured 2.2-2.7 u on the tiny models and 6.9 u (2.7e-2) on a 16-layer 1B model in
#: bfloat16, so 12 u (4.7e-2 bfloat16, 5.9e-3 float16) keeps ~1.7x over that while any real quirk (a gain
#: convention, a scale, a soft-cap: O(1) relative) is still refused (docs/math.md, "Precision")
HALF_TOLERANCE_ROUNDOFFS = 12


def _tolerance(dtype: torch.dtype) -> float:
    if dtype in (torch.float32, torch.float64):
        return 1e-4
    return HALF_TOLERANCE_ROUNDOFFS * torch.finfo(dtype).eps / 2  # eps = 2u (bfloat16 2^-7, float16 2^-10)


def _probe(model: Model) -> Tensor:
    """[2, 12] token ids spread over the vocabulary (BOS first where the model prepends one)."""
    a = model.arch
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, a.d_vocab, (PROBE_PROMPTS, PROBE_TOKENS), generator=g, device="cpu")  # same ids everywhere
    tok = model.tokenizer
    bos = getattr(tok, "bos_token_id", None) if tok is not None else None
    if model.prepend_bos and bos is not None:
        ids[:, 0] = bos
    return ids.to(model.device)


def self_check(model: Model, *, tol: Optional[float] = None) -> float:
    """The largest relative difference between the engine's forward and the model's own on the probe;
    raises :class:`EngineMismatchError` at the first block input (or the output) beyond ``tol``."""
    a = model.arch
    tol = _tolerance(model.dtype) if tol is None else tol
    ids = _probe(model)
    mask = torch.ones_like(ids)
    names = [f"blocks.{l}.hook_resid_pre" for l in range(a.n_layers)]
    last = f"blocks.{a.n_layers - 1}.hook_resid_post"  # an encoder's own final hidden state
    store: dict[str, Tensor] = {}

    def keep(name: str) -> Any:  # keyed by the name asked for (the bridge reports aliases by their target)
        def hook(x: Tensor, hook: Any = None) -> Tensor:
            store[name] = x.detach()
            return x

        return hook

    with torch.inference_mode(), model.bridge.hooks(fwd_hooks=[(n, keep(n)) for n in [*names, last]]):
        out = model.bridge(ids, attention_mask=mask)
    missing = [n for n in [*names, last] if n not in store]
    if missing:
        raise UnsupportedArchitectureError(
            f"model {model.name!r}: its bridge fired no hook {missing[0]!r}, so "
            "interp cannot check its forward against the model's own"
        )
    theirs_final: Optional[Tensor] = store[last]
    engine = Engine.of(model)
    with torch.inference_mode():
        run = engine.run(ids, mask)
        if a.has_logits:
            mine_final = readout(model, run.final)
            theirs_final = out if isinstance(out, Tensor) else out.logits
        else:
            mine_final = run.final
    worst = 0.0
    pairs = [
        (f"the residual stream entering block {l}", run.resid_pre[l], store.get(names[l])) for l in range(a.n_layers)
    ]
    pairs.append(("the logits" if a.has_logits else "the final hidden state", mine_final, theirs_final))
    for what, mine, theirs in pairs:
        if theirs is None:
            continue
        scale = float(theirs.abs().max()) or 1.0
        diff = float((mine.to(theirs.dtype) - theirs).abs().max())
        rel = diff / scale if diff == diff else float("inf")  # NaN → inf
        if rel > tol:
            raise EngineMismatchError(
                f"model {model.name!r} ({a.family}): interp's forward differs from the model's own at {what}: "
                f"max |difference| {diff:.3g} against a largest magnitude of {scale:.3g} ({rel:.2g} relative; "
                f"allowed {tol:g}). The checkpoint has a quirk interp does not implement, so every analysis that "
                "re-runs it would be wrong; it is refused. Please report the model id."
            )
        worst = max(worst, rel)
    return worst


def load_model(
    name_or_path: Union[str, "os.PathLike[str]"],
    *,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
    cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    trust_remote_code: bool = False,
    device_map: Optional[Union[str, dict[str, Any]]] = None,
    max_memory: Optional[dict[Any, Union[int, str]]] = None,
    offload_folder: Optional[Union[str, "os.PathLike[str]"]] = None,
    progress: Optional[bool] = None,
) -> Model:
    """Load a model by catalog name, local HF folder, local ``.gguf`` file or hub id
    (:func:`interp.models.load_model_unchecked`), then :func:`self_check` it: a model whose forward interp does not
    reproduce is refused with :class:`EngineMismatchError`. With ``device_map`` (and ``max_memory``,
    ``offload_folder``) accelerate places the model and the check streams its blocks one at a time. ``progress``:
    a bar naming each step (None: only for a first load, which builds a cache entry; True: always; False: never);
    each step's time is logged at INFO by the logger ``interp.models``."""
    with load_progress(str(name_or_path), progress):
        model = load_model_unchecked(
            name_or_path,
            device=device,
            dtype=dtype,
            cache_dir=cache_dir,
            trust_remote_code=trust_remote_code,
            device_map=device_map,
            max_memory=max_memory,
            offload_folder=offload_folder,
            progress=progress,
        )
        with load_step("self-check interp's forward against the model's own"):
            self_check(model)
    return model


def model_from_hf(
    hf_model: Any,
    tokenizer: Any,
    *,
    name: str,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
    has_unembed: bool = True,
    source: str = "",
    provenance: str = "",
) -> Model:
    """:func:`interp.models.model_from_hf_unchecked` (wrap a loaded Hugging Face model), then :func:`self_check` it."""
    model = model_from_hf_unchecked(
        hf_model,
        tokenizer,
        name=name,
        device=device,
        dtype=dtype,
        has_unembed=has_unembed,
        source=source,
        provenance=provenance,
    )
    self_check(model)
    return model
