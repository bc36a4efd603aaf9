"""A head's term split by source position, and what a head copies from one source position.

A head's output at a destination token is z_h[dst] W_O^h = Σ_src A^h[dst, src] · v_src W_O^h with
v_src = N1(x_src) W_V^g + b_V^g (g: the KV head h reads) — the A ⊗ W_O W_V structure of a head
(Elhage et al. 2021 §2, docs/math.md §8) applied to the actual residual. With the final norm's scale
σ frozen at dst (pre-norm decoders: a head's write meets only the final norm before the unembedding),
its term along a read direction u is

    term_h = Σ_src A^h[dst, src] · (v_src · W_O^h u') / σ_dst,   u' = centre(γ_f ⊙ u) (LN) or γ_f ⊙ u (RMS)

so the per-source terms ``L3.H5[src=s]`` sum to the head's term ``L3.H5`` exactly (the closure of the
whole attribution checks it). The value bias goes with the sources: b_V W_O · Σ_src A[dst, src] =
b_V W_O (each row of A sums to 1), so each source carries A[dst, src] · b_V W_O of it.

:func:`ov_at` gives the logits of one source's copy, v_src W_O^h carried through the final norm with
σ frozen at dst (the real pass's scale — no ε is guessed): a vector over the vocabulary whose entry t,
times A[dst, src], is that source's term for the logit of t.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union, cast

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._norms import apply_frozen, frozen_direction, norm_scale
from interp._result import Result
from interp._validate import check_index, check_int, check_positive_int, is_int
from interp.errors import ArgumentError, LabelError, UnsupportedOperationError
from interp.engine.internal import read_forward
from interp.labels import Head
from interp.models.internal import readable_token
from interp.models import Model
from interp.stream.internal import as_batch, require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["head_source_terms", "require_head_sources", "ov_at", "OVAt"]


def require_head_sources(model: Model, what: str) -> None:
    """UnsupportedOperationError unless a head's write meets at most the final norm before the logits."""
    if model.block.normed_stream:
        raise UnsupportedOperationError(
            f"{what}: model {model.name!r} is post-norm; a head's write passes every later Add & Norm, so its split by "
            "source position is not implemented there (use unit='head')"
        )


def head_source_terms(
    model: Model, acts: dict[str, Tensor], u: Tensor, valid: Tensor
) -> Float[Tensor, "row layer head src"]:
    """Σ over kept positions j of A[dst_j, src] · (v_src · W_O^h u'_j) / σ_j, per batch row.

    ``acts``: a position-gathered trace's activations with ``keep=("patterns", "v")``; ``u``
    [rows, k, d_model] the read directions at the k kept positions; ``valid`` [rows, k] which count.
    """
    arch, w = model.arch, model.weights
    dt = u.dtype
    if arch.norm == "none":
        g = u
    else:
        sigma = norm_scale(acts["ln_final.hook_in"], arch.norm, arch.norm_eps).to(dt)  # [r, k, 1]
        g = frozen_direction(u, w.need("lnf_w").to(dt), arch.norm) / sigma
    g = g * valid[..., None].to(dt)
    kv = torch.tensor([arch.kv_head(h) for h in range(arch.n_heads)], device=u.device)
    out_norm = model.block.out_norm("attn")  # "ln1_post": a norm on the attention's output before its add
    out = []
    for l in range(arch.n_layers):
        A = acts[f"blocks.{l}.attn.hook_pattern"].to(dt)  # [r, H, k, S]
        v = acts[f"blocks.{l}.attn.hook_v"].to(dt)[:, :, kv]  # [r, S, H, dh]: each query head's KV head
        gl = g
        if out_norm is not None:  # the layer's output norm at the read position, σ' frozen
            s1 = norm_scale(acts[f"blocks.{l}.{out_norm}.hook_in"], arch.norm, arch.norm_eps).to(dt)  # [r, k, 1]
            gl = frozen_direction(g, w.need(f"{out_norm}_w")[l].to(dt), arch.norm) / s1
        WOg = torch.einsum("hed,rkd->rkhe", w.W_O[l].to(dt), gl)  # [r, k, H, dh]
        vo = torch.einsum("rshe,rkhe->rkhs", v, WOg)  # [r, k, H, S]
        out.append(torch.einsum("rhks,rkhs->rhs", A, vo))
    return torch.stack(out, dim=1)  # [r, L, H, S]


def _position(value: Any, name: str, n_real: int) -> int:
    p = check_int(name, value)
    q = n_real + p if p < 0 else p
    if not 0 <= q < n_real:
        raise ArgumentError(
            f"{name}={value} is out of range: the prompt has {n_real} real tokens "
            f"(positions 0 … {n_real - 1}, or negative from the end)"
        )
    return q


@dataclass(frozen=True, eq=False)
class OVAt(Result):
    """What head ``label`` copies from source position ``src`` of one prompt, read at ``dst``.

    ``logits`` [d_vocab] = N_f,frozen(v_src W_O^h) · W_U: the copy through the final norm with σ frozen
    at ``dst`` (no β, no b_U — it is a term, not a readout). ``weight`` = A[dst, src]; ``weight × logits[t]``
    is exactly the ``L{l}.H{h}[src=s]`` term of :func:`interp.attribute_logits` for the logit of t.

    Contract (:class:`interp._result.Result`): rows are vocabulary tokens labelled by id (``r[17]`` or
    ``r["17"]`` is token 17's logit); ``to_dataframe()`` columns ``token``, ``token_str`` (readable text of
    the top and bottom ``k`` tokens), ``logit``, ``weighted``; ``top`` ranks by the signed ``logit`` (what the
    head copies here, largest first).
    """

    label_column: ClassVar[str] = "token"
    default_by: ClassVar[str] = "logit"
    default_absolute: ClassVar[bool] = False

    layer: int
    head: int
    src: int
    dst: int
    prompt: int
    weight: float
    logits: Float[Tensor, " d_vocab"] = field(repr=False)
    src_token: Optional[str] = None
    dst_token: Optional[str] = None
    token_strs: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return str(Head(self.layer, self.head))

    @property
    def labels(self) -> list[str]:
        """Token ids as text, ``"0"`` … ``str(d_vocab − 1)``."""
        return [str(t) for t in range(self.logits.shape[0])]

    def _index(self, label: Union[int, str]) -> int:
        n = int(self.logits.shape[0])
        t = int(label) if is_int(label) else (int(label) if isinstance(label, str) and label.isdigit() else None)
        if t is None or not 0 <= t < n:
            raise LabelError(f"label={label!r} is not a token of this result; tokens are ids 0 … {n - 1}")
        return t

    def _row(self, index: int) -> float:
        return float(self.logits[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per vocabulary token: id, its text (top/bottom tokens), logit of the copy, logit × A[dst, src]."""
        lg = self.logits.double().cpu()
        return pd.DataFrame(
            {
                "token": range(lg.shape[0]),
                "token_str": [self.token_strs.get(str(t), "") for t in range(lg.shape[0])],
                "logit": lg.numpy(),
                "weighted": (lg * self.weight).numpy(),
            }
        )

    def plot(self, *, k: int = 15) -> "go.Figure":
        """Bars of the ``k`` most raised and most lowered tokens (a plotly Figure)."""
        from interp.plots import source_ov_figure  # plots reads the result's attributes; imported on use

        return source_ov_figure(self, k=k)

    def __repr__(self) -> str:
        top = self.logits.topk(min(5, self.logits.shape[0])).indices.tolist()
        names = [self.token_strs.get(str(t), f"#{t}") for t in top]
        return (
            f"OVAt({self.label} copying src={self.src} ({self.src_token!r}) at dst={self.dst} "
            f"({self.dst_token!r}), A={self.weight:.3f}: top {names})"
        )


def ov_at(
    model: Model,
    inputs: Union[str, list, Tensor],
    layer: int,
    head: int,
    *,
    src: int,
    dst: int = -1,
    prompt: int = 0,
    k: int = 20,
) -> OVAt:
    """The logits of head ``(layer, head)``'s copy of source position ``src`` (docstring of :class:`OVAt`).

    One engine pass. ``src``/``dst``: positions of prompt ``prompt`` (negative counts back from
    its last real token; ``dst=-1`` is where attribution reads); ``k``: how many top and bottom tokens
    get their text stored.
    """
    require_model(model)
    arch, w = model.arch, model.weights
    if not arch.has_logits:
        raise UnsupportedOperationError(f"model {model.name!r} has no unembedding: ov_at reads a head's copy as logits")
    require_head_sources(model, "ov_at")
    layer = check_index("layer", layer, arch.n_layers, what="layers")
    head = check_index("head", head, arch.n_heads, what="heads")
    check_positive_int("k", k)
    batch = as_batch(model, inputs)
    bi = check_index("prompt", prompt, batch.tokens.shape[0], what="prompts")
    n_real = int(batch.attention_mask[bi].sum())
    s, d = _position(src, "src", n_real), _position(dst, "dst", n_real)
    if arch.causal and s > d:
        raise ArgumentError(
            f"src={src} (position {s}) comes after dst={dst} (position {d}); a causal head reads "
            "only earlier or equal positions"
        )
    out_norm = model.block.out_norm("attn")  # "ln1_post": a norm on the attention's output before its add
    hs = f"{out_norm}_in"  # that norm's input (the layer's attention output)
    # one engine walk: the layer's values, pattern (and output norm's input) of prompt bi, and the final residual
    names = {"v": f"blocks.{layer}.attn.hook_v", "pattern": f"blocks.{layer}.attn.hook_pattern"}
    if out_norm:
        names[hs] = f"blocks.{layer}.{out_norm}.hook_in"
    if arch.norm != "none":
        names["final"] = "ln_final.hook_in"

    def prompt_bi(x: Tensor) -> Tensor:
        return x[bi].clone()

    kept, _ = read_forward(model, batch.tokens, batch.attention_mask, dict.fromkeys(names.values(), prompt_bi))
    acts = {site: kept[name] for site, name in names.items()}
    dt = w.W_O.dtype
    v = acts["v"][s, arch.kv_head(head)].to(dt)  # [d_head], b_V included
    copy = v @ w.W_O[layer, head]  # [d_model]
    if out_norm is not None:  # through the layer's output norm, its scale at dst frozen
        copy = apply_frozen(
            copy, w.need(f"{out_norm}_w")[layer], norm_scale(acts[hs][d], arch.norm, arch.norm_eps).to(dt), arch.norm
        )
    if arch.norm != "none":
        sigma = norm_scale(acts["final"][d], arch.norm, arch.norm_eps).to(dt)
        copy = apply_frozen(copy, w.need("lnf_w"), sigma, arch.norm)
    logits = (copy @ w.need("W_U")).detach()
    weight = float(acts["pattern"][head, d, s])
    strs: dict[str, str] = {}
    toks = None
    if model.tokenizer is not None:
        kk = min(k, logits.shape[0])
        ids = torch.cat([logits.topk(kk).indices, (-logits).topk(kk).indices]).tolist()
        strs = {str(t): readable_token(model.tokenizer, t) for t in ids}  # byte pieces as \xNN escapes
        toks = cast(list[str], model.to_str_tokens(batch.tokens[bi, :n_real]))  # one row: one string per token
    return OVAt(
        layer=layer,
        head=head,
        src=s,
        dst=d,
        prompt=bi,
        weight=weight,
        logits=logits,
        src_token=toks[s] if toks else None,
        dst_token=toks[d] if toks else None,
        token_strs=strs,
    )
