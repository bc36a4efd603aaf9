"""Tracr-compiled transformers as interp Models.

Tracr (Lindner et al. 2023, "Tracr: Compiled Transformers as a Laboratory for Interpretability",
arXiv 2301.05062) compiles a RASP program into the weights of an ordinary decoder-shaped
transformer: no norms, one attention layer then one ReLU MLP per block, learned positional
embeddings, one-hot embeddings into a residual stream whose every dimension is labelled
(``"tokens:a"``, ``"indices:3"``, ``"length:5"``, ``"frac_prevs"``, ``"one"``)::

    x₀ = W_E[t] + W_pos[p]
    x ← x + Σ_h softmax(x W_Q^h (x W_K^h)ᵀ / √d_head) x W_V^h W_O^h + b_O      (attention)
    x ← x + ReLU(x W_in + b_in) W_out + b_out                                  (MLP)
    logits = x W_U

Such a model is a transformer-lens native model: this module turns the compiled model's
parameters into a ``TransformerBridge.boot_native`` state dict and reads them back as
:class:`~interp.models.Weights`. It is duck-typed on tracr's ``AssembledTransformerModel``
(``.params``, ``.model_config``, ``.residual_labels``, ``.input_encoder``,
``.output_encoder``) and imports neither tracr nor jax: the compiling lives in
:mod:`interp.groundtruth`.

The unembedding ``W_U`` [d_model, n_out] reads the output SOp's residual subspace:

* categorical output: column j is the one-hot of residual dimension ``"<output>:<value_j>"``
  where ``value_j`` is the output encoder's value with id j (transformer-lens's
  ``make_tracr_categorical_unembed``; the output dimensions are found by label, never by
  position); the decoded output is ``argmax_j logits[..., j]``;
* numerical output (e.g. ``frac_prevs``), which transformer-lens's converter refuses: one
  column, the one-hot of the output's single residual dimension ``"<output>"``, so the
  "logit" ``logits[..., 0]`` *is* the program's numerical output (a direction readout).

Records: :class:`ArchInfo` has ``family="native"``, ``norm="none"``, ``positional="learned"``,
``act_fn="relu"``, ``causal`` as compiled, and ``d_vocab`` the *input* vocabulary (BOS and
pad included); ``W_U``/``b_U`` have n_out columns (the output encoder's values, or 1).
Norm gains are ones and norm biases zeros (there is no norm, as for the toys).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import einops
import numpy as np
import torch
from torch import Tensor

from interp.errors import ArgumentError, ModelLoadError
from interp.models._arch import ArchInfo
from interp.models._numerics import check_device, check_dtype
from interp.models._model import Model
from interp.models._weights import Weights

__all__ = ["model_from_tracr", "tracr_state_dict", "tracr_unembed", "tracr_output_label", "tracr_is_numerical"]


def _param(compiled: Any, module: str, name: str) -> np.ndarray:
    try:
        return np.asarray(compiled.params[module][name], dtype=np.float64)
    except (KeyError, TypeError, AttributeError) as e:
        raise ModelLoadError(
            f"compiled model has no parameter {module}/{name}; is it a tracr AssembledTransformerModel?"
        ) from e


def _labels(compiled: Any) -> list[str]:
    labels = getattr(compiled, "residual_labels", None)
    if labels is None:
        raise ArgumentError(
            f"compiled={type(compiled).__name__} has no residual_labels; expected a tracr AssembledTransformerModel"
        )
    return [str(x) for x in labels]


def tracr_is_numerical(compiled: Any) -> bool:
    """Whether the compiled program's output is numerical (no categorical output encoding map)."""
    return not isinstance(getattr(getattr(compiled, "output_encoder", None), "encoding_map", None), dict)


def tracr_output_label(compiled: Any, output_label: Optional[str] = None) -> str:
    """The output SOp's label in ``residual_labels`` (given, or inferred for categorical outputs).

    Categorical: the unique label whose value set equals the output encoder's values. Numerical
    outputs cannot be told apart from other numerical SOps by their labels: pass ``output_label``
    (the program's ``.label``).
    """
    labels = _labels(compiled)
    names = {lab.split(":", 1)[0] for lab in labels}
    if output_label is not None:
        if output_label not in names:
            raise ArgumentError(
                f"output_label={output_label!r} is not a residual subspace; the model has {sorted(names)}"
            )
        return output_label
    if tracr_is_numerical(compiled):
        raise ArgumentError(
            "output_label=None: the compiled program's output is numerical, whose residual dimension cannot be "
            f"inferred from the labels; pass the program's label (one of {sorted(n for n in names if ':' not in n)})"
        )
    values = {str(v) for v in compiled.output_encoder.encoding_map}
    by_name: dict[str, set[str]] = {}
    for lab in labels:
        name, sep, value = lab.rpartition(":")
        if sep:
            by_name.setdefault(name, set()).add(value)
    candidates = [n for n, vs in by_name.items() if vs == values]
    if len(candidates) != 1:
        raise ArgumentError(
            f"output_label=None: cannot infer the output subspace (candidates {candidates}); pass output_label"
        )
    return candidates[0]


def tracr_unembed(compiled: Any, output_label: Optional[str] = None) -> np.ndarray:
    """``W_U`` [d_model, n_out] reading the output subspace (see the module docstring)."""
    labels = _labels(compiled)
    index = {lab: i for i, lab in enumerate(labels)}
    label = tracr_output_label(compiled, output_label)
    if tracr_is_numerical(compiled):
        if label not in index:
            raise ArgumentError(
                f"output_label={label!r} is categorical (its dimensions are '{label}:<value>'), "
                "but the compiled output is numerical"
            )
        W_U = np.zeros((len(labels), 1))
        W_U[index[label], 0] = 1.0
        return W_U
    enc = compiled.output_encoder.encoding_map
    W_U = np.zeros((len(labels), len(enc)))
    for value, column in enc.items():
        key = f"{label}:{value}"
        if key not in index:
            raise ArgumentError(f"output_label={label!r}: residual dimension {key!r} is missing")
        W_U[index[key], int(column)] = 1.0
    return W_U


def tracr_state_dict(
    compiled: Any, output_label: Optional[str] = None, *, dtype: torch.dtype = torch.float32
) -> dict[str, Tensor]:
    """The ``boot_native`` state dict of a compiled model (nn.Linear weights are [out, in])."""
    if getattr(compiled.model_config, "layer_norm", False):
        raise ArgumentError(
            "compiled.model_config.layer_norm=True: interp loads tracr models compiled without layer norm"
        )

    def t(a: np.ndarray) -> Tensor:
        return torch.tensor(a, dtype=dtype)

    sd = {
        "tok_embed.weight": t(_param(compiled, "token_embed", "embeddings")),
        "pos.weight": t(_param(compiled, "pos_embed", "embeddings")),
        "head.weight": t(tracr_unembed(compiled, output_label).T),
    }
    names = {"q": "query", "k": "key", "v": "value", "o": "linear"}
    for layer in range(compiled.model_config.num_layers):
        p = f"transformer/layer_{layer}"
        for ours, theirs in names.items():
            sd[f"layers.{layer}.attn.{ours}.weight"] = t(_param(compiled, f"{p}/attn/{theirs}", "w").T)
            sd[f"layers.{layer}.attn.{ours}.bias"] = t(_param(compiled, f"{p}/attn/{theirs}", "b"))
        for ours, theirs in (("fc_in", "linear_1"), ("fc_out", "linear_2")):
            sd[f"layers.{layer}.mlp.{ours}.weight"] = t(_param(compiled, f"{p}/mlp/{theirs}", "w").T)
            sd[f"layers.{layer}.mlp.{ours}.bias"] = t(_param(compiled, f"{p}/mlp/{theirs}", "b"))
    return sd


def _bridge_config(compiled: Any, sd: dict[str, Tensor]) -> dict[str, Any]:
    c = compiled.model_config
    d_vocab, d_model = sd["tok_embed.weight"].shape
    return dict(
        n_layers=c.num_layers,
        n_heads=c.num_heads,
        d_model=d_model,
        d_head=c.key_size,
        d_vocab=d_vocab,
        d_vocab_out=sd["head.weight"].shape[0],
        n_ctx=sd["pos.weight"].shape[0],
        d_mlp=c.mlp_hidden_size,
        act_fn="relu",
        attn_only=False,
        normalization_type=None,
        positional_embedding_type="standard",
        attention_dir="causal" if c.causal else "bidirectional",
        original_architecture="TransformerLensNative",
    )


def _tokenizer(compiled: Any) -> Any:
    """A whitespace word-level tokenizer over the input encoder's values (``str(value)`` → its id).

    BOS is the compiler's BOS token (prepended by interp, as for every decoder), pad the
    compiler's pad token.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    enc = compiled.input_encoder
    vocab = {str(v): int(i) for v, i in enc.encoding_map.items()}
    if len(vocab) != len(enc.encoding_map):
        raise ArgumentError("compiled.input_encoder has values that print alike; cannot build a word tokenizer")
    # An unknown word becomes id d_vocab, outside the embedding table: interp's input checks refuse it
    # (transformer-lens probes the tokenizer with a word that must encode to something).
    tok = Tokenizer(models.WordLevel(vocab={**vocab, "<unk>": len(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=str(enc.bos_token),
        eos_token=str(enc.bos_token),
        pad_token=str(enc.pad_token),
        add_bos_token=True,
        name_or_path="interp-tracr",
    )


def _weights(sd: dict[str, Tensor], cfg: dict[str, Any]) -> Weights:
    L, H, d = cfg["n_layers"], cfg["n_heads"], cfg["d_model"]
    ref = sd["tok_embed.weight"]
    ones = torch.ones(L, d, dtype=ref.dtype, device=ref.device)

    def per_layer(fn) -> Tensor:
        return torch.stack([fn(f"layers.{l}.") for l in range(L)]).detach().clone()

    def heads_in(w: Tensor) -> Tensor:  # nn.Linear [H*d_head, d_model] -> [H, d_model, d_head]
        return einops.rearrange(w, "(n h) m -> n m h", n=H)

    return Weights(
        W_E=ref.detach().clone(),
        W_pos=sd["pos.weight"].detach().clone(),
        W_type=None,
        W_Q=per_layer(lambda p: heads_in(sd[p + "attn.q.weight"])),
        W_K=per_layer(lambda p: heads_in(sd[p + "attn.k.weight"])),
        W_V=per_layer(lambda p: heads_in(sd[p + "attn.v.weight"])),
        W_O=per_layer(lambda p: einops.rearrange(sd[p + "attn.o.weight"], "m (n h) -> n h m", n=H)),
        b_Q=per_layer(lambda p: sd[p + "attn.q.bias"].reshape(H, -1)),
        b_K=per_layer(lambda p: sd[p + "attn.k.bias"].reshape(H, -1)),
        b_V=per_layer(lambda p: sd[p + "attn.v.bias"].reshape(H, -1)),
        b_O=per_layer(lambda p: sd[p + "attn.o.bias"]),
        W_in=per_layer(lambda p: sd[p + "mlp.fc_in.weight"].T),
        W_gate=None,
        b_in=per_layer(lambda p: sd[p + "mlp.fc_in.bias"]),
        W_out=per_layer(lambda p: sd[p + "mlp.fc_out.weight"].T),
        b_out=per_layer(lambda p: sd[p + "mlp.fc_out.bias"]),
        ln1_w=ones.clone(),
        ln1_b=torch.zeros_like(ones),
        ln2_w=ones.clone(),
        ln2_b=torch.zeros_like(ones),
        lnf_w=ones[0].clone(),
        lnf_b=torch.zeros_like(ones[0]),
        W_U=sd["head.weight"].T.contiguous().clone(),
        b_U=torch.zeros(sd["head.weight"].shape[0], dtype=ref.dtype, device=ref.device),
    )


def model_from_tracr(
    compiled: Any,
    *,
    name: str,
    output_label: Optional[str] = None,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
    source: str = "",
) -> Model:
    """Load a tracr ``AssembledTransformerModel`` as an interp :class:`Model` (a native bridge).

    ``output_label`` names the output SOp's residual subspace (needed for numerical outputs; see
    :func:`tracr_output_label`). Token ids are the input encoder's; the bridge's logits are
    ``x_final W_U`` with the columns described in the module docstring.
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native as _native  # noqa: F401  (registers boot_native)

    if not isinstance(name, str) or not name:
        raise ArgumentError(f"name={name!r} must be a non-empty string")
    dev, dtype = check_device(device), check_dtype(dtype)
    sd = tracr_state_dict(compiled, output_label, dtype=dtype)
    cfg = _bridge_config(compiled, sd)
    bridge = TransformerBridge.boot_native(  # type: ignore[attr-defined]  # set by the sources.native import
        cfg, tokenizer=_tokenizer(compiled), device=dev, dtype=dtype, model_name=name
    )
    full = dict(sd, **{"head.bias": torch.zeros(cfg["d_vocab_out"], dtype=dtype)})
    # strict=False: the bridge also lists alias keys for the MLP's in/out adapters, which the native
    # module's fc_in/fc_out fill; instead, every native parameter is checked to hold its value.
    bridge.load_state_dict({k: v.to(dev) for k, v in full.items()}, strict=False)
    bridge.eval()
    # add_bos_token=True only while booting (transformer-lens reloads a tokenizer by name otherwise);
    # then off, so that BOS comes once, from interp's tokenisation, for causal and bidirectional alike.
    bridge.tokenizer.add_bos_token = False
    raw = {k.replace("._original_component", ""): v for k, v in bridge.original_model.state_dict().items()}
    raw.pop("_original_component", None)
    alias = {".mlp.in.": ".mlp.fc_in.", ".mlp.out.": ".mlp.fc_out."}
    unaliased = {k: k.replace(*next(((a, b) for a, b in alias.items() if a in k), ("", ""))) for k in raw}
    wrong = sorted(
        k for k, v in raw.items() if unaliased[k] not in full or not torch.equal(v, full[unaliased[k]].to(dev))
    )
    if wrong or set(full) - set(raw):
        raise ModelLoadError(
            f"the native bridge did not take the tracr weights: wrong {wrong[:4]}, "
            f"unset {sorted(set(full) - set(raw))[:4]}"
        )
    weights = _weights({k: v.to(dev) for k, v in sd.items()}, cfg)
    arch = ArchInfo(
        name=name,
        family="native",
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        n_kv_heads=cfg["n_heads"],
        d_model=cfg["d_model"],
        d_head=cfg["d_head"],
        d_mlp=cfg["d_mlp"],
        d_vocab=cfg["d_vocab"],
        n_ctx=cfg["n_ctx"],
        norm="none",
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional="learned",
        causal=bool(compiled.model_config.causal),
        norm_eps=0.0,
        gated_mlp=False,
        act_fn="relu",
        has_unembed=True,
    )
    return Model(
        name=name,
        bridge=bridge,
        tokenizer=bridge.tokenizer,
        arch=arch,
        weights=weights,
        source=source or "tracr-compiled RASP program",
        prepend_bos=True,
    )
