"""What a family entry is: its readers, the capabilities its readers branch on, and the config attributes it
reads or knowingly ignores — every other attribute of a Hugging Face config refuses the model.

A config attribute interp neither reads nor ignores may change the block's maths (a soft-cap, a rope type, a
bidirectional mask), so it is refused by name (:class:`~interp.errors.UnsupportedArchitectureError`), never
skipped. A family's reader sees its config through :class:`DeclaredConfig`: only the attributes the family
declares it reads, so a reader cannot depend on an attribute its family file does not list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Optional

from interp.errors import UnsupportedArchitectureError

__all__ = ["COMMON_IGNORED", "Capabilities", "ConfigAttributes", "DeclaredConfig", "Family", "check_config"]

#: Attributes every ``PretrainedConfig`` may carry that do not change the forward interp re-runs: bookkeeping,
#: token ids, output switches, initialisation, caching and generation settings (the weights themselves say
#: whether the unembedding is tied: the readers read ``lm_head`` or the embedding).
COMMON_IGNORED: frozenset[str] = frozenset(
    {
        "_name_or_path",
        "_model_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "id2label",
        "label2id",
        "problem_type",
        "finetuning_task",
        "task_specific_params",
        "tokenizer_class",
        "prefix",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
        "torchscript",
        "use_cache",
        "initializer_range",
        "chunk_size_feed_forward",
        "tie_word_embeddings",
        "gradient_checkpointing",
        "max_length",
        "min_length",
        "do_sample",
        "early_stopping",
        "num_beams",
        "num_beam_groups",
        "diversity_penalty",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "repetition_penalty",
        "length_penalty",
        "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size",
        "bad_words_ids",
        "num_return_sequences",
        "output_scores",
        "return_dict_in_generate",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
    }
)

#: Attributes every config may carry whose non-default values interp does not model: attribute -> allowed values.
COMMON_REQUIRED: Mapping[str, tuple[Any, ...]] = {"is_encoder_decoder": (False,), "pruned_heads": ({},)}


@dataclass(frozen=True)
class ConfigAttributes:
    """The config attributes a family handles: ``reads`` (its config reader interprets them), ``ignores`` (known
    not to change the maths interp computes: dropouts, training-only losses, values the loaded modules carry),
    ``requires`` (attribute -> the values interp models; another value is refused)."""

    reads: frozenset[str]
    ignores: frozenset[str] = frozenset()
    requires: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def known(self) -> frozenset[str]:
        return self.reads | self.ignores | frozenset(self.requires) | COMMON_IGNORED | frozenset(COMMON_REQUIRED)


@dataclass(frozen=True)
class Capabilities:
    """What a family's readers branch on beyond its config (one answer per question, never the family's name):

    * ``gain_offset`` — the norms multiply by (offset + w) (Gemma: 1), folded into the gains at load;
    * ``embed_scale`` — the embedding is multiplied by √d_model (Gemma), folded into W_E;
    * ``qk_norm`` — RMSNorm of q and k per head ("head": Qwen 3, Gemma 3) or over the projection ("projection":
      OLMo 2); "" none;
    * ``sandwich_norms`` — a norm on each sublayer's output (Gemma 2/3, OLMo 2); ``pre_norms`` False: no input
      norms (OLMo 2);
    * ``experts`` — mixture-of-experts MLPs (Mixtral); ``softcaps`` — soft-capped scores and logits (Gemma 2/3).
    """

    gain_offset: float = 0.0
    embed_scale: bool = False
    qk_norm: Literal["", "head", "projection"] = ""
    sandwich_norms: bool = False
    pre_norms: bool = True
    experts: bool = False
    softcaps: bool = False


@dataclass(frozen=True)
class Family:
    """One line of the builder table: a Hugging Face ``model_type`` and how interp reads it.

    ``read_config(config, name=, has_unembed=, caps=) -> ArchInfo``; ``read_weights(state_dict, arch, caps) ->
    (per-layer views, global tensors)``; ``write_weights(weights, n_layers) -> HF state dict`` (None: the family
    has no writer, so ``rotate_residual`` refuses it).
    """

    model_type: str
    read_config: Callable[..., Any]
    read_weights: Callable[..., Any]
    write_weights: Optional[Callable[..., Any]]
    caps: Capabilities
    attributes: ConfigAttributes


class DeclaredConfig:
    """A view of a Hugging Face config that shows only the attributes in ``reads`` (any other one is absent, so
    ``getattr(view, name, default)`` gives the default)."""

    def __init__(self, config: Any, reads: frozenset[str]) -> None:
        self._config, self._reads = config, reads

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._reads:
            raise AttributeError(f"{name!r} is not among the attributes this family reads")
        return getattr(self._config, name)


def check_config(config: Any, family: Family, *, name: str) -> None:
    """Refuse ``config`` (UnsupportedArchitectureError naming the attribute) if it carries an attribute the family
    neither reads nor knowingly ignores, a required attribute with a value interp does not model, or a rotary
    scaling type the model's rotary module does not implement."""
    spec = family.attributes
    values = config.to_dict()
    known = spec.known()
    for key, value in values.items():
        allowed = spec.requires.get(key, COMMON_REQUIRED.get(key))
        if allowed is not None and value not in allowed:
            raise UnsupportedArchitectureError(
                f"model {name!r} (model_type {family.model_type!r}) has config {key}={value!r}; interp models "
                f"{key} in {list(allowed)} only, and another value changes the block's maths"
            )
        if key not in known:
            raise UnsupportedArchitectureError(
                f"model {name!r} (model_type {family.model_type!r}) has config attribute {key}={value!r}, which "
                f"interp's {family.model_type} reader neither reads nor knowingly ignores (it may change the "
                f"block's maths, so the model is refused); the reader reads {sorted(spec.reads)}"
            )
    if "rope_parameters" in spec.reads:
        _check_rope(values.get("rope_parameters"), family, name)


def _check_rope(rope: Any, family: Family, name: str) -> None:
    """Every rope type in ``rope`` (one dict, or one per layer type as Gemma 3 keeps them) must be one the
    model's own rotary module computes (interp reads the tables off that module)."""
    if not rope:
        return
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    tables = rope.values() if all(isinstance(v, dict) for v in rope.values()) else [rope]
    for table in tables:
        kind = table.get("rope_type", table.get("type", "default"))
        if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
            raise UnsupportedArchitectureError(
                f"model {name!r} (model_type {family.model_type!r}) has config rope_parameters with "
                f"rope_type={kind!r}; interp reads rotary tables of the types "
                f"{['default', *sorted(ROPE_INIT_FUNCTIONS)]} only"
            )
