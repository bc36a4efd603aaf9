"""Independent references for the hardening suites: a separately built Hugging Face copy of each
tiny model (same seed, same weights), run with plain forward hooks on its own modules.

Nothing here imports interp.stream or interp.attribution: the tensors are HF's.
"""

from __future__ import annotations

import contextlib
import functools
import types

import torch
from torch import Tensor

from tiny_models import tiny_hf_model, tiny_tokenizer

#: HF module paths per family: (stack of layers, ln1, ln2, final norm or None, post-norm?).
SPEC = {
    "gpt2": ("transformer.h", "ln_1", "ln_2", "transformer.ln_f", False),
    "llama": ("model.layers", "input_layernorm", "post_attention_layernorm", "model.norm", False),
    "neox": ("gpt_neox.layers", "input_layernorm", "post_attention_layernorm", "gpt_neox.final_layer_norm", False),
    "bert": ("bert.encoder.layer", "attention.output.LayerNorm", "output.LayerNorm", None, True),
}


def _get(root: torch.nn.Module, path: str) -> torch.nn.Module:
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def _rmsnorm_in_input_dtype(self, hidden_states: Tensor) -> Tensor:
    """LlamaRMSNorm without its fp32 round trip (HF computes it in fp32 even in fp64)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


@contextlib.contextmanager
def _softmax_in_input_dtype():
    """HF's GPT-NeoX eager attention calls softmax(..., dtype=torch.float32) even in float64;
    for a float64 input, compute it in float64 (no effect on float32 models)."""
    orig = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and x.dtype == torch.float64:
            dtype = None
        return orig(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = orig


def exact_norms(hf: torch.nn.Module) -> torch.nn.Module:
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rmsnorm_in_input_dtype, mod)
    return hf


@functools.lru_cache(maxsize=None)
def models(family: str, seed: int = 0, n_layers: int = 2, dtype: torch.dtype = torch.float32):
    """(interp Model, separate HF copy) of a tiny random model, built once per argument tuple."""
    from interp.models import model_from_hf_unchecked as model_from_hf

    hf_for_interp = tiny_hf_model(family, seed=seed, n_layers=n_layers, dtype=dtype)
    ref = tiny_hf_model(family, seed=seed, n_layers=n_layers, dtype=dtype)
    if dtype == torch.float64:
        exact_norms(ref)  # interp's loader does this itself for its own copy
    model = model_from_hf(hf_for_interp, tiny_tokenizer(), name=f"tiny-{family}", dtype=dtype)
    return model, ref


def hf_points(
    family: str, ref: torch.nn.Module, tokens: Tensor, mask: Tensor
) -> tuple[dict[str, Tensor], Tensor | None]:
    """HF's own tensor at every read and resid point of interp's labelling, and the logits.

    Pre-norm: resid_pre[l] = hidden_states[l]; resid_mid = ln2's input; resid_post = the next
    layer's input (the final norm's input for the last layer); attention reads = ln1's output,
    mlp.in = ln2's output, unembed = the final norm's output.
    Post-norm: resid_mid = N1's output, attention reads = the layer input, mlp.in = N1's output,
    final = the last hidden state.
    """
    layers_path, ln1, ln2, final, post = SPEC[family]
    layers = _get(ref, layers_path)
    L = len(layers)
    rec: dict[str, Tensor] = {}
    handles = []

    def keep(key, what):
        def hook(mod, args, kwargs, out):
            x = args[0] if args else next(iter(kwargs.values()))
            rec[key] = (x if what == "in" else (out[0] if isinstance(out, tuple) else out)).detach()

        return hook

    for l, layer in enumerate(layers):
        for name, path in (("ln1", ln1), ("ln2", ln2)):
            for what in ("in", "out"):
                handles.append(
                    _get(layer, path).register_forward_hook(keep(f"{name}_{what}.{l}", what), with_kwargs=True)
                )
    if final:
        for what in ("in", "out"):
            handles.append(_get(ref, final).register_forward_hook(keep(f"final_{what}", what), with_kwargs=True))
    try:
        # In float64 the bridge runs GPT-NeoX attention with its own softmax in float64, but calls
        # HF's eager attention (softmax rounded through float32) for Llama: the reference follows.
        softmax = _softmax_in_input_dtype() if family == "neox" else contextlib.nullcontext()
        with torch.no_grad(), softmax:
            out = ref(input_ids=tokens, attention_mask=mask, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    hs = out.hidden_states
    pts: dict[str, Tensor] = {}
    for l in range(L):
        pts[f"blocks.{l}.hook_resid_pre"] = hs[l]
        if post:
            pts[f"blocks.{l}.hook_resid_mid"] = rec[f"ln1_out.{l}"]
            pts[f"blocks.{l}.hook_resid_post"] = hs[l + 1]
            pts[f"L{l}.attn"] = hs[l]
            pts[f"L{l}.mlp.in"] = rec[f"ln1_out.{l}"]
        else:
            pts[f"blocks.{l}.hook_resid_mid"] = rec[f"ln2_in.{l}"]
            pts[f"blocks.{l}.hook_resid_post"] = hs[l + 1] if l < L - 1 else rec["final_in"]
            pts[f"L{l}.attn"] = rec[f"ln1_out.{l}"]
            pts[f"L{l}.mlp.in"] = rec[f"ln2_out.{l}"]
    if post:
        pts["final"] = hs[L]
    else:
        pts["unembed"] = rec["final_out"]
    return pts, (None if post else out.logits.detach())


def point_ref(pts: dict[str, Tensor], label: str) -> Tensor:
    """The HF tensor for a read/resid label (all q/k/v reads of a layer see the same input)."""
    if ".attn." in label:
        return pts[label[: label.index(".attn.")] + ".attn"]
    return pts[label]


def rel(a: Tensor, b: Tensor, mask: Tensor) -> float:
    """max |a − b| / max |b| over real positions (mask [batch, pos]; a, b [..., batch, pos, d])."""
    m = mask.bool()[..., None]
    a, b = a.double(), b.double()
    gap = ((a - b).abs() * m).amax()
    scale = (b.abs() * m).amax()
    return float(gap / scale) if scale > 0 else float(gap)


def word_ids(words: list[int]) -> list[int]:
    """Token ids of the tiny tokenizer's 'w{i}' words (the first 4 ids are specials)."""
    return [4 + w for w in words]


def dense_weights(model, fold: bool):
    """Dense float64 (W_Q, W_K, W_V, W_O, W_E, W_U) with each query head's own KV head, folded as
    documented: pre-norm reads P·diag(γ)·W (LayerNorm) or diag(γ)·W (RMSNorm), writes W·P
    (LayerNorm, pre and post); post-norm reads unfolded."""
    w, a = model.weights, model.arch
    kv = [a.kv_head(h) for h in range(a.n_heads)]
    W_Q, W_K, W_V, W_O = w.W_Q.double(), w.W_K.double()[:, kv], w.W_V.double()[:, kv], w.W_O.double()
    W_E = w.W_E.double()
    W_U = None if w.W_U is None else w.W_U.double()
    if not fold or a.norm == "none":
        return W_Q, W_K, W_V, W_O, W_E, W_U
    d = a.d_model
    P = torch.eye(d, dtype=torch.float64) - torch.full((d, d), 1.0 / d, dtype=torch.float64)
    ln = a.norm == "layernorm"
    if a.norm_placement == "pre":
        g1 = torch.diag_embed(w.ln1_w.double())[:, None]  # [L, 1, d, d]
        read = (lambda g, W: P @ g @ W) if ln else (lambda g, W: g @ W)
        W_Q, W_K, W_V = read(g1, W_Q), read(g1, W_K), read(g1, W_V)
        if W_U is not None:
            W_U = read(torch.diag(w.lnf_w.double()), W_U)
    if ln:
        W_O, W_E = W_O @ P, W_E @ P
    return W_Q, W_K, W_V, W_O, W_E, W_U
