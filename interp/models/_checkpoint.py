"""Refusing a checkpoint that lacks tensors of its model, from transformers' own loading report.

``from_pretrained`` initialises every parameter the checkpoint does not hold at random and reports it in
``missing_keys`` (``output_loading_info=True``; tied weights, read from the tensor they are tied to, are not
listed). A model loaded that way is half random while interp's self-check still passes (both forwards read the
same random tensors), so every analysis would explain a model that is not the checkpoint: such a load is refused.
"""

from __future__ import annotations

from typing import Any

from interp.errors import ModelLoadError

__all__ = ["from_pretrained_complete"]

#: missing tensors listed in the error; the rest are counted
_SHOWN = 12


def from_pretrained_complete(
    cls: Any, path: str, *, optional: tuple[str, ...] = (), shown: str = "", **kwargs: Any
) -> Any:
    """``cls.from_pretrained(path, **kwargs)``, refused with a :class:`ModelLoadError` listing the tensors the
    checkpoint lacks (``missing_keys`` of transformers' loading report, tied weights aside). ``optional``: name
    prefixes that may be missing (a BERT checkpoint without its MLM head ``cls.``, which interp zeroes); ``shown``:
    the path the error names (default ``path``)."""
    model, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    missing = sorted(k for k in info.get("missing_keys", ()) if not (optional and k.startswith(optional)))
    if missing:
        unexpected = sorted(info.get("unexpected_keys", ()))
        raise ModelLoadError(
            f"name_or_path={shown or path!r}: the checkpoint lacks {len(missing)} of the model's tensors "
            f"({_listed(missing)}), which transformers would initialise at random, so every analysis would explain "
            "a model that is not the checkpoint"
            + (
                f"; it holds {len(unexpected)} tensors the model does not use ({_listed(unexpected)})"
                if unexpected
                else ""
            )
            + ". Save the checkpoint again from the full model (model.save_pretrained(folder)), or rename its "
            "tensors to the names listed (an older prefix); to analyse a partly random model on purpose, load it "
            "with transformers and wrap it with interp.engine.model_from_hf(hf_model, tokenizer, name=...)"
        )
    return model


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f", … and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
