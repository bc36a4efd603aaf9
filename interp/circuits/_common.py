"""Shared pieces of the weight maths: argument checks, the norm-folding convention, memory caps.

Norm folding (``fold_norms=True``, the default everywhere in :mod:`interp.circuits`). A pre-norm
sublayer reads ``N(x) W + b``; with the norm's per-token scale σ frozen, N is linear
(docs/math.md §3):

    LayerNorm:  N(x) = (x P / σ) diag(γ) + β,   P = I − 11ᵀ/d   (centring)
    RMSNorm:    N(x) = (x / σ) diag(γ)

so the *read* weight a write actually meets is ``C diag(γ) W`` (C = P for LayerNorm, I for
RMSNorm), up to the scalar 1/σ. Because every write is centred by the next LayerNorm before any
read sees it, a write ``W_out`` can equally be replaced by ``W_out P``. This is exactly
transformer-lens's HookedTransformer processing (``fold_ln`` + ``center_writing_weights``; what
``TransformerBridge.enable_compatibility_mode()`` does), measured per family:

    ============================  =============================  ==========================
    family                        reads (W_Q W_K W_V W_in W_U)   writes (W_E W_pos W_O W_out)
    ============================  =============================  ==========================
    pre-norm LayerNorm (GPT-2,    P diag(γ) W                    W P
    NeoX parallel)
    pre-norm RMSNorm (Llama)      diag(γ) W                      W
    post-norm LayerNorm (BERT)    W (no norm sits before a read) W P
    no norm (toy models)          W                              W
    ============================  =============================  ==========================

The gain folded into a read is the gain of the norm in front of it: ``ln1`` for q/k/v, ``ln2``
for the MLP input, the final norm for the unembedding. ``fold_norms=False`` gives the raw
Hugging Face weights (what ``TransformerBridge.W_Q`` etc. return outside compatibility mode).
Biases (b_Q, b_K, b_V, β) never enter circuits; the 1/sqrt(d_head) attention scale is not
included in QK (transformer-lens convention). QK-norm gains fold the same way into W_Q and W_K on the
head side (Gemma 3, Qwen 3: the score is then the bilinear form up to the positive per-token 1/(σ_q σ_k)),
and sandwich-norm gains into the writes W_O diag(γ'₁), W_out diag(γ'₂) (Gemma 2/3, up to 1/σ').
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, TypedDict

import torch
from jaxtyping import Float
from torch import Tensor

from interp._validate import check_positive_int, is_int
from interp.errors import ArgumentError, MemoryCapError, ShapeError, UnsupportedOperationError
from interp.models import describe_block

if TYPE_CHECKING:
    from interp.models import Model

__all__ = [
    "DEFAULT_MAX_BYTES",
    "check_model",
    "check_data",
    "check_layer",
    "check_head",
    "check_max_bytes",
    "centres_writes",
    "folds_gains",
    "fold_read",
    "fold_write",
    "folded_qkv",
    "folded_mlp_in",
    "folded_unembed",
    "folded_writes",
    "need_unembed",
    "convention",
    "nbytes_of",
]

#: Default cap on any dense tensor interp.circuits materialises on request (1 GiB).
DEFAULT_MAX_BYTES: int = 1 << 30


def check_model(model: Any, *, name: str = "model") -> Any:
    """ArgumentError unless ``model`` is an interp Model (not a bridge, an HF module or a name)."""
    from interp.models import Model

    if not isinstance(model, Model):
        raise ArgumentError(
            f"{name}={model!r:.80} is a {type(model).__name__}, not an interp Model; "
            "load one with interp.load_model(name_or_path)"
        )
    return model


def check_data(t: Tensor, *, name: str) -> Tensor:
    """ShapeError for a tensor without data (the 'meta' device)."""
    if t.device.type == "meta":
        raise ShapeError(f"{name} is on the 'meta' device (a tensor without data); pass a tensor on a real device")
    return t


def check_layer(model: Model, layer: Any, *, name: str = "layer") -> int:
    n = model.arch.n_layers
    if not is_int(layer) or not 0 <= layer < n:
        raise ArgumentError(f"{name}={layer!r} is out of range; the model has layers 0..{n - 1} (n_layers={n})")
    return layer


def check_head(model: Model, head: Any, *, name: str = "head", kv: bool = False) -> int:
    n = model.arch.n_kv_heads if kv else model.arch.n_heads
    what = "KV heads" if kv else "heads"
    if not is_int(head) or not 0 <= head < n:
        raise ArgumentError(f"{name}={head!r} is out of range; the model has {what} 0..{n - 1} per layer")
    return head


def check_max_bytes(value: Any) -> int:
    """``max_bytes`` as a positive int (a memory cap in bytes)."""
    return check_positive_int("max_bytes", value)


def nbytes_of(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def fmt_bytes(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{x:.1f} {unit}" if unit != "B" else f"{n} B"
        x /= 1024
    return f"{n} B"  # pragma: no cover


def refuse_materialise(what: str, shape: tuple[int, ...], dtype: torch.dtype, max_bytes: int, alternative: str) -> None:
    """Raise MemoryCapError if a dense ``shape`` tensor would exceed ``max_bytes``."""
    size = nbytes_of(shape, dtype)
    if size > max_bytes:
        raise MemoryCapError(
            f"materialising {what} of shape {list(shape)} ({dtype}) needs {fmt_bytes(size)}, over the cap "
            f"max_bytes={max_bytes} ({fmt_bytes(max_bytes)}); {alternative}"
        )


# --- the folding convention -------------------------------------------------------------------


def centres_writes(model: Model) -> bool:
    return model.arch.norm == "layernorm"


def folds_gains(model: Model) -> bool:
    """A read's norm gain folds into its weights: the model has norms and they do not norm the stream itself."""
    return model.arch.norm in ("layernorm", "rmsnorm") and not model.block.normed_stream


def convention(model: Model, fold_norms: bool) -> str:
    """A one-line statement of which weights a result was computed on."""
    if not fold_norms:
        return "raw weights (norm gains not folded, writes not centred)"
    a, block = model.arch, model.block
    if a.norm == "none":
        return "raw weights (the model has no norms)"
    if block.normed_stream:
        return "writes centred (W P); no gain folded: post-norm gains act on the residual stream itself"
    extra = ("; QK-norm gains folded into W_Q, W_K" if a.qk_norm else "") + (
        "; sandwich-norm gains into the writes (W_O diag(γ'), W_out diag(γ'))" if block.sublayer_norms else ""
    )
    if not block.reads_normed:
        return "reads see the raw stream (no norm before them)" + extra
    if a.norm == "rmsnorm":
        return "read weights folded with the gain of the RMSNorm before them (diag(γ) W)" + extra
    return "read weights folded with the LayerNorm before them (P diag(γ) W), writes centred (W P)"


def fold_read(model: Model, W: Tensor, gain: Optional[Tensor], fold_norms: bool) -> Tensor:
    """C diag(γ) W for a read weight ``W [..., d_model, k]`` and the gain ``γ [..., d_model]``
    of the norm in front of it (broadcast over W's leading dims)."""
    if not fold_norms or not folds_gains(model) or gain is None:
        return W
    W = gain[..., :, None] * W
    if model.arch.norm == "layernorm":
        W = W - W.mean(dim=-2, keepdim=True)
    return W


def fold_write(model: Model, W: Tensor, fold_norms: bool, post: Optional[Tensor] = None) -> Tensor:
    """W P for a write weight ``W [..., k, d_model]`` (LayerNorm models only); W diag(γ') when the write
    passes a sandwich norm of gain ``post`` (broadcastable to W, e.g. [..., 1, d_model]; see
    :func:`post_gain`)."""
    if fold_norms and post is not None:
        W = W * post
    if fold_norms and centres_writes(model):
        return W - W.mean(dim=-1, keepdim=True)
    return W


def post_gain(model: Model, sublayer: str) -> Optional[Tensor]:
    """γ' [n_layers, d_model] of the sandwich norm on each layer's "attn" or "mlp" output, or None."""
    w = model.weights
    return w.ln1_post_w if sublayer == "attn" else w.ln2_post_w


def folded_qkv(model: Model, fold_norms: bool, *, layer: Optional[int] = None) -> tuple[Tensor, Tensor, Tensor]:
    """(W_Q [L, H, d, dh], W_K [L, Hkv, d, dh], W_V [L, Hkv, d, dh]) with ln1's gain folded;
    one layer's [H, d, dh] / [Hkv, d, dh] slices if ``layer`` is given."""
    w = model.weights
    sl = slice(None) if layer is None else layer
    g = w.ln1_w[sl][..., None, :]  # [(L,) 1, d] broadcasts over heads
    W_Q, W_K = fold_read(model, w.W_Q[sl], g, fold_norms), fold_read(model, w.W_K[sl], g, fold_norms)
    if fold_norms and w.q_norm_w is not None and w.k_norm_w is not None:
        # QK-norm: q ↦ g_q ⊙ q / σ_q; with σ_q, σ_k frozen (positive per-token scalars: one per head, or one per
        # position shared by every head when the norm spans the whole projection) the score is the bilinear
        # form of W_Q diag(g_q^h) and W_K diag(g_k^h), g^h each head's slice of the gain
        per_head = model.arch.qk_norm_scope == "projection"  # gains [(L,) heads, dh], else [(L,) dh]
        W_Q = W_Q * (w.q_norm_w[sl][..., None, :] if per_head else w.q_norm_w[sl][..., None, None, :])
        W_K = W_K * (w.k_norm_w[sl][..., None, :] if per_head else w.k_norm_w[sl][..., None, None, :])
    return W_Q, W_K, fold_read(model, w.W_V[sl], g, fold_norms)


def folded_mlp_in(model: Model, fold_norms: bool) -> tuple[Tensor, Optional[Tensor]]:
    """(W_in [L, d, d_mlp], W_gate or None) with ln2's gain folded."""
    w = model.weights
    _need_mlp(model)
    g = w.ln2_w
    gate = None if w.W_gate is None else fold_read(model, w.W_gate, g, fold_norms)
    return fold_read(model, w.W_in, g, fold_norms), gate


def folded_unembed(model: Model, fold_norms: bool) -> Float[Tensor, "d_model d_vocab"]:
    return fold_read(model, need_unembed(model), model.weights.lnf_w, fold_norms)


class FoldedWrites(TypedDict):
    W_E: Tensor
    W_pos: Optional[Tensor]
    W_O: Tensor
    W_out: Optional[Tensor]


def folded_writes(model: Model, fold_norms: bool) -> FoldedWrites:
    """W_E, W_pos, W_O, W_out, centred for LayerNorm models."""
    w = model.weights
    pa, pm = post_gain(model, "attn"), post_gain(model, "mlp")
    has_mlp = describe_block(model.arch).has_mlp
    if has_mlp:
        _need_mlp(model)
    return {
        "W_E": fold_write(model, w.W_E, fold_norms),
        "W_pos": None if w.W_pos is None else fold_write(model, w.W_pos, fold_norms),
        "W_O": fold_write(model, w.W_O, fold_norms, None if pa is None else pa[:, None, None, :]),
        "W_out": fold_write(model, w.W_out, fold_norms, None if pm is None else pm[:, None, :]) if has_mlp else None,
    }


def need_unembed(model: Model) -> Tensor:
    """The model's unembedding W_U [d_model, d_vocab]; UnsupportedOperationError for a model without one."""
    W_U = model.weights.W_U
    if not model.arch.has_logits or W_U is None:
        raise UnsupportedOperationError(
            f"model {model.name!r} has no unembedding (arch.has_logits=False, weights.W_U is None): "
            "it is an encoder analysed through its hidden state, so circuits "
            "ending in W_U (full OV/QK circuits, copying scores, the 'unembed' read) do not exist"
        )
    return W_U


def _need_mlp(model: Model) -> None:
    if not describe_block(model.arch).has_mlp:
        raise UnsupportedOperationError(f"model {model.name!r} is attention-only: it has no MLP weights")
    if model.arch.n_experts:
        raise UnsupportedOperationError(
            f"model {model.name!r} has mixture-of-experts MLPs ({model.arch.n_experts} experts, the router's top "
            f"{model.arch.experts_per_token} per token): an MLP's read and write depend on the token's routing, "
            "which the weight-only circuits do not model yet (heads' circuits work)"
        )
