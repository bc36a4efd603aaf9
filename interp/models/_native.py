"""The native (toy) model format: attention-only TL-native transformers as interp Models.

Build, load and save; the training recipe and the probes live in :mod:`interp.toy`.

A toy is transformer-lens's TL-native model (``TransformerBridge.boot_native`` with
``attn_only=True``), so it runs through the same ``TransformerBridge`` / hook path as the
real models. Each pre-norm block is ``x ← x + Σ_h Attn_h(N1(x))`` (Elhage et al. 2021,
"A Mathematical Framework for Transformer Circuits", section "Transformer Overview"), with
``N1`` the identity when ``norm="none"``; logits are ``N_f(x) W_U`` (no unembedding bias).

How the toys fill interp's fixed-shape records (the "no MLP / no norm" convention):

* :class:`~interp.models.ArchInfo`: ``family="native"``, ``attn_only=True``, ``d_mlp=0``,
  ``gated_mlp=False``, ``act_fn="none"``, ``norm`` in {"none", "layernorm", "rmsnorm"},
  ``positional`` in {"learned", "rotary", "none"}, ``causal=True``, ``has_unembed=True``.
* :class:`~interp.models.Weights`: MLP fields are zero-size — ``W_in [L, d_model, 0]``,
  ``b_in [L, 0]``, ``W_out [L, 0, d_model]`` — and ``b_out [L, d_model]`` is zeros, so every
  MLP term is exactly zero. ``ln2_w``/``ln2_b`` (no second norm) are ones/zeros; with
  ``norm="none"`` so are ``ln1_*`` and ``lnf_*``: gains of one and biases of zero, to be read
  together with ``arch.norm == "none"`` (there is no normalisation to undo). RMSNorm biases are
  zeros. ``W_pos`` is None for rotary and for positional="none" (whose bridge table is held at
  zero); ``b_U`` is zeros (the native head has no bias; the bridge adds a fixed zero one).

On disk a toy is a folder with ``config.json`` (format, ToyConfig, vocabulary, training
record) and ``model.safetensors`` (the native module's own parameter names).
"""

from __future__ import annotations

import dataclasses

import json
import os
from pathlib import Path
from typing import Any, Optional, Union

import einops
import torch
from torch import Tensor

from interp.errors import ArgumentError, ExportError, ModelLoadError, ModelNotFoundError
from interp.models._arch import ArchInfo
from interp.models._model import Model
from interp.models._native_config import BOS_ID, UNK_ID, ToyConfig, toy_words
from interp.models._numerics import check_device, check_dtype, full_precision_norms
from interp.models._weights import Weights

__all__ = [
    "build_toy",
    "load_toy",
    "save_toy",
    "read_toy_config",
    "toy_tokenizer",
    "toy_arch",
    "toy_weights",
    "native_state_dict",
    "default_vocab",
]

FORMAT = "interp-toy/1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def toy_tokenizer(vocab: list[str]) -> Any:
    """A whitespace word-level tokenizer over ``vocab`` ("<bos>", "<unk>", words…).

    Built in memory (``add_bos_token=True`` so transformer-lens does not reload it by name);
    unknown words become "<unk>". "<bos>" doubles as eos and pad token.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab[BOS_ID] != "<bos>" or vocab[UNK_ID] != "<unk>" or len(set(vocab)) != len(vocab):
        raise ArgumentError(f"vocab must start with '<bos>', '<unk>' and have no duplicates; got {vocab[:4]}…")
    if any(not w or any(c.isspace() for c in w) for w in vocab):
        raise ArgumentError("vocab words must be non-empty and contain no whitespace")
    t = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=t,
        bos_token="<bos>",
        eos_token="<bos>",
        pad_token="<bos>",
        unk_token="<unk>",
        add_bos_token=True,
        name_or_path="interp-toy",
    )


def default_vocab(config: ToyConfig) -> list[str]:
    """ "<bos>", "<unk>" and the config's ``n_words`` content words."""
    return ["<bos>", "<unk>", *toy_words(config.n_words)]


def toy_arch(config: ToyConfig, *, name: str) -> ArchInfo:
    """The ArchInfo of a toy (see the module docstring for the conventions)."""
    return ArchInfo(
        name=name,
        family="native",
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        n_kv_heads=config.kv_heads,
        d_model=config.d_model,
        d_head=config.d_head,
        d_mlp=0,
        d_vocab=config.d_vocab,
        n_ctx=config.n_ctx,
        norm=config.norm,
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional=config.positional,
        causal=True,
        norm_eps=config.norm_eps,
        gated_mlp=False,
        act_fn="none",
        has_unembed=True,
        rotary_dim=config.d_head if config.positional == "rotary" else 0,
        attn_only=True,
        rotary_interleaved=True,
    )


def native_state_dict(bridge: Any) -> dict[str, Tensor]:
    """The wrapped native module's parameters under their own names (``layers.0.attn.q.weight``)."""
    raw = bridge.original_model.state_dict()
    return {k.replace("._original_component", ""): v for k, v in raw.items() if k != "_original_component"}


def toy_weights(sd: dict[str, Tensor], config: ToyConfig) -> Weights:
    """Read a native state dict into interp's TL-layout :class:`Weights` (detached copies)."""
    L, H, Hkv, d = config.n_layers, config.n_heads, config.kv_heads, config.d_model
    ref = sd["tok_embed.weight"]

    def z(*shape: int) -> Tensor:
        return torch.zeros(*shape, dtype=ref.dtype, device=ref.device)

    ones, zeros = torch.ones(L, d, dtype=ref.dtype, device=ref.device), z(L, d)

    def per_layer(fn) -> Tensor:
        return torch.stack([fn(f"layers.{l}.") for l in range(L)]).detach().clone()

    def heads_in(w: Tensor, n: int) -> Tensor:  # Linear weight [n*d_head, d_model] (y = x Wᵀ)
        return einops.rearrange(w, "(n h) m -> n m h", n=n)

    if config.norm == "none":
        ln1_w, ln1_b, lnf_w, lnf_b = ones, zeros, ones[0].clone(), zeros[0].clone()
    else:
        ln1_w = per_layer(lambda p: sd[p + "ln1.weight"])
        ln1_b = per_layer(lambda p: sd[p + "ln1.bias"]) if config.norm == "layernorm" else zeros
        lnf_w = sd["ln_out.weight"].detach().clone()
        lnf_b = sd["ln_out.bias"].detach().clone() if config.norm == "layernorm" else zeros[0].clone()
    return Weights(
        W_E=ref.detach().clone(),
        W_pos=sd["pos.weight"].detach().clone() if config.positional == "learned" else None,
        W_type=None,
        W_Q=per_layer(lambda p: heads_in(sd[p + "attn.q.weight"], H)),
        W_K=per_layer(lambda p: heads_in(sd[p + "attn.k.weight"], Hkv)),
        W_V=per_layer(lambda p: heads_in(sd[p + "attn.v.weight"], Hkv)),
        W_O=per_layer(lambda p: einops.rearrange(sd[p + "attn.o.weight"], "m (n h) -> n h m", n=H)),
        b_Q=per_layer(lambda p: sd[p + "attn.q.bias"].reshape(H, -1)),
        b_K=per_layer(lambda p: sd[p + "attn.k.bias"].reshape(Hkv, -1)),
        b_V=per_layer(lambda p: sd[p + "attn.v.bias"].reshape(Hkv, -1)),
        b_O=per_layer(lambda p: sd[p + "attn.o.bias"]),
        W_in=z(L, d, 0),
        W_gate=None,
        b_in=z(L, 0),
        W_out=z(L, 0, d),
        b_out=zeros.clone(),
        ln1_w=ln1_w,
        ln1_b=ln1_b,
        ln2_w=ones.clone(),
        ln2_b=zeros.clone(),
        lnf_w=lnf_w,
        lnf_b=lnf_b,
        W_U=sd["head.weight"].detach().T.contiguous().clone(),
        b_U=sd["head.bias"].detach().clone() if "head.bias" in sd else z(config.d_vocab),
    )


def _boot(
    config: ToyConfig,
    *,
    name: str,
    device: Any,
    dtype: torch.dtype,
    state_dict: Optional[dict[str, Tensor]],
    vocab: list[str],
    source: str,
) -> Model:
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native as _native  # noqa: F401  (registers boot_native)

    dev, dtype = check_device(device), check_dtype(dtype)
    if len(vocab) != config.d_vocab:
        raise ArgumentError(f"vocab has {len(vocab)} entries; config.d_vocab={config.d_vocab}")
    bridge = TransformerBridge.boot_native(  # type: ignore[attr-defined]  # set by the sources.native import
        config.bridge_config(), tokenizer=toy_tokenizer(vocab), device=dev, dtype=dtype, model_name=name
    )
    if state_dict is not None:
        state_dict = dict(state_dict)
        if "head.bias" not in state_dict:  # the bridge gives the bias-free head a fixed zero bias buffer
            state_dict["head.bias"] = torch.zeros(config.d_vocab, device=dev)
        bridge.load_state_dict({k: v.to(device=dev, dtype=dtype) for k, v in state_dict.items()}, strict=True)
    if config.positional == "none":
        with torch.no_grad():
            bridge.original_model.pos.weight.zero_()  # a learned table held at zero = no positions
    bridge.eval()
    if dtype == torch.float64:
        full_precision_norms(bridge.original_model)  # NativeRMSNorm rounds through float32 otherwise
    weights = toy_weights(native_state_dict(bridge), config)
    arch = toy_arch(config, name=name)
    attn = [m for m in bridge.original_model.modules() if type(m).__name__ == "NativeAttention"]
    if len(attn) == config.n_layers:  # the scores' factor is the module's own (1 / its ``scale``)
        arch = dataclasses.replace(arch, attn_scales=tuple(1.0 / float(m.scale) for m in attn))
    return Model(
        name=name,
        bridge=bridge,
        tokenizer=bridge.tokenizer,
        arch=arch,
        weights=weights,
        source=source,
        prepend_bos=True,
        provenance=f"interp toy transformer ({source})" + ("" if dtype == torch.float32 else f"; {dtype}"),
    )


def build_toy(
    config: ToyConfig = ToyConfig(),
    *,
    name: str = "toy",
    device: Any = "cpu",
    dtype: torch.dtype = torch.float32,
    state_dict: Optional[dict[str, Tensor]] = None,
    source: Optional[str] = None,
) -> Model:
    """A toy with the default vocabulary: freshly initialised (transformer-lens's native init, seeded
    by ``config.seed``), or holding ``state_dict`` (the native module's own parameter names)."""
    if not isinstance(config, ToyConfig):
        raise ArgumentError(f"config must be a ToyConfig, got {type(config).__name__}")
    if state_dict is not None and not isinstance(state_dict, dict):
        raise ArgumentError(f"state_dict must be a dict of tensors or None, got {type(state_dict).__name__}")
    if source is None:
        source = f"random init (seed {config.seed})" if state_dict is None else "state dict"
    return _boot(
        config, name=name, device=device, dtype=dtype, state_dict=state_dict, vocab=default_vocab(config), source=source
    )


def save_toy(
    model: Model, path: Union[str, os.PathLike], *, config: ToyConfig, training: Optional[dict[str, Any]] = None
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (fp32) for ``model`` into folder ``path``."""
    from safetensors.torch import save_file

    out = Path(path)
    sd = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in native_state_dict(model.bridge).items()}
    if "head.bias" in sd and not sd["head.bias"].any():
        del sd["head.bias"]  # the bridge's synthetic zero bias: not a parameter of the native model
    vocab = [model.tokenizer.convert_ids_to_tokens(i) for i in range(config.d_vocab)]
    meta = {"format": FORMAT, "config": config.to_dict(), "vocab": vocab, "training": training or {}}
    try:
        out.mkdir(parents=True, exist_ok=True)
        save_file(sd, str(out / WEIGHTS_FILE), metadata={"format": FORMAT})
        (out / CONFIG_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    except OSError as e:
        raise ExportError(f"path={str(path)!r}: cannot write the toy folder ({e})") from e
    return out


def read_toy_config(path: Union[str, os.PathLike]) -> dict[str, Any]:
    """The parsed ``config.json`` of a toy folder (format, config, vocab, training record)."""
    p = Path(path)
    if not (p / CONFIG_FILE).is_file() or not (p / WEIGHTS_FILE).is_file():
        raise ModelNotFoundError(
            f"path={str(path)!r} is not a toy model folder (needs {CONFIG_FILE} and {WEIGHTS_FILE})"
        )
    try:
        meta = json.loads((p / CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"path={str(path)!r}: {CONFIG_FILE} is unreadable ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelLoadError(f"path={str(path)!r}: format={got!r}; expected {FORMAT!r}")
    return meta


def load_toy(
    path: Union[str, os.PathLike], *, name: str, device: Any = "cpu", dtype: torch.dtype = torch.float32
) -> Model:
    """Load a saved toy folder as an interp :class:`Model` (the catalog's ``toy-attn-only-*``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_toy_config(path)
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("config"), dict)
        or not isinstance(meta.get("vocab"), list)
    ):
        raise ModelLoadError(f"path={str(path)!r}: {CONFIG_FILE} lacks its 'config' object or 'vocab' list")
    config = ToyConfig.from_dict(meta["config"])
    try:
        sd = load_file(str(Path(path) / WEIGHTS_FILE))
    except (OSError, SafetensorError) as e:
        raise ModelLoadError(f"path={str(path)!r}: {WEIGHTS_FILE} is unreadable ({e})") from e
    try:
        return _boot(
            config, name=name, device=device, dtype=dtype, state_dict=sd, vocab=list(meta["vocab"]), source=str(path)
        )
    except RuntimeError as e:  # load_state_dict: missing/unexpected/mis-shaped keys
        raise ModelLoadError(f"path={str(path)!r}: weights do not match its config ({e})") from e
