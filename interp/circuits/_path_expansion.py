"""Path expansion of an attention-only transformer's logits, with attention patterns frozen.

Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", sections "Path
Expansion of Logits" (one layer) and "Path Expansion of Two-Layer Attention-Only
Transformers". With every attention pattern A^h frozen from one forward pass, an
attention-only transformer without norms is a sum of linear paths from the embeddings to the
logits. With row-major activations X [pos, d_model] a head maps X ↦ A^h X W_V^h W_O^h
(= (A^h ⊗ W_OV^h) X in the paper's notation), so

    logits = X₀ W_U                                               direct path (order 0)
           + Σ_h       A^h X₀ W_OV^h W_U                            one-head terms (order 1)
           + Σ_{h1<h2} A^{h2} A^{h1} X₀ W_OV^{h1} W_OV^{h2} W_U      virtual attention heads (order 2)
           + … + bias paths + b_U

where X₀ = W_E[tokens] (+ W_pos for learned positions; the two are separate sources, "embed"
and "pos_embed"), and "h1 < h2" means h1 sits in an earlier layer. A path of order k goes
through k heads in strictly increasing layers; a model with L layers has paths up to order L,
and the sum over all of them equals the logits exactly.

Bias convention: a head's value bias writes A^h 1 b_V^h W_O^h = rowsum(A^h) b_V^h W_O^h (= b_V W_O
on every unpadded position). It is folded, with b_O, into the layer's ``L{l}.attn_bias``
source — per-head terms are the linear maps A ⊗ W_OV alone. Later heads read ``L{l}.attn_bias``
like any other write, giving paths such as ``L0.attn_bias→L1.H2``.

Norms (pre-norm LayerNorm / RMSNorm): with each norm's per-token scale σ frozen from the
forward pass, N(x) = γ ⊙ P(x)/σ + β is affine (P centres for LayerNorm, is the identity for
RMSNorm). Each head then reads N_l's linear part of every path, each β_l becomes a source
``L{l}.ln1_bias`` read only by layer l's heads, and the final norm maps every term through
its linear part and adds ``final_bias``. The expansion stays exact.

Algorithm:
 1. Run the model once through the bridge, capturing ``blocks.{l}.attn.hook_pattern`` and the
    inputs of the norms (hooks removed even if the forward raises).
 2. Start with the sources ``embed`` and ``pos_embed`` (writes to the residual stream).
 3. For each layer l: every path of order < ``order`` is passed through N_l's linear part and
    each head (A^h (·) W_V^h W_O^h), giving a path one order higher; ``L{l}.ln1_bias`` likewise
    (when the norm has a bias); then ``L{l}.attn_bias`` is added as a new source.
 4. Map all terms through the final norm's linear part (and add ``final_bias``); the logit
    of ``answer`` at ``pos`` splits into one value per term: value = term · W_U[:, answer].

The result keeps every term's final residual contribution, so other logits can be read with
:meth:`PathExpansion.logit_values` without rerunning the model.

Reading induction (measured on the shipped ``toy-attn-only-2l``): for the repeated token in the
second half of a repeated sequence, the top paths are the induction heads' *one-head* terms
``embed→L1.Hk`` (≈ 2–3.6 logits each); the virtual-attention-head paths through the
previous-token head (``embed→L0.H3→L1.Hk``) are ≤ 0.02. Induction is K-composition, which acts
on the pattern A^{L1.Hk} — frozen here, so it shows up inside the one-head term — not
V-composition, which is what an order-2 path measures (the paper notes the same: virtual
attention heads matter little in its two-layer model).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Sequence, Union

import einops
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._norms import accumulate_dtype, apply_frozen, norm_scale
from interp.circuits._common import need_unembed
from interp.engine import unembed
from interp.engine.internal import read_forward
from interp._result import Result
from interp._validate import check_index, check_int_min
from interp.errors import ArgumentError, LabelError, MemoryCapError, ShapeError, UnsupportedOperationError
from interp.labels import ARROW, Bias, Head, Norm, NormBias, Path
from interp.models import describe_block
from interp.models.internal import text_ids

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["PathExpansion", "path_expansion"]

log = logging.getLogger(__name__)

MEMORY_CAP_BYTES = 4 * 2**30  # refuse a call whose estimated peak exceeds 4 GiB


@dataclass(frozen=True, eq=False)
class PathExpansion(Result):
    """Every path's contribution to the logits of one forward pass (patterns frozen).

    ``labels[i]`` names path i from its source through its heads ("embed", "pos_embed→L0.H3",
    "embed→L0.H1→L1.H2", "L0.attn_bias", "final_bias", …) and ``orders[i]`` is how many heads it
    goes through (0: direct/bias, 1: one head, 2: virtual attention head, …).
    ``contributions[i]`` is the path's term in what W_U reads (after the frozen final norm);
    ``values[i, b]`` is its share of ``logit[b]`` = the model's logit of ``answer[b]`` at
    position ``pos[b]``:  logit = Σ_i values[i] + unembed_bias, up to ``closure_error`` (the
    largest |model logits − Σ terms W_U − b_U| over every position and token; it also measures
    the truncation when ``order`` < n_layers).

    Contract (:class:`interp._result.Result`): ``pe["embed→L1.H2"]`` is the path's ``values`` row
    [batch]; ``to_dataframe()`` has one row per (path, prompt) (column ``label``); ``top(k, prompt=)``
    lists the paths that raise the chosen logit most (signed ``value``: the mean over prompts unless
    ``prompt`` is given; ``absolute=True`` ranks by |value|). Weights are the raw ones with the norm
    scales frozen (``fold_norms`` is False).
    """

    default_absolute: ClassVar[bool] = False

    labels: tuple[str, ...]
    orders: tuple[int, ...]
    contributions: Float[Tensor, "n_terms batch pos d_model"]
    values: Float[Tensor, "n_terms batch"]
    logit: Float[Tensor, " batch"]
    unembed_bias: Float[Tensor, " batch"]
    answer: Int[Tensor, " batch"]
    pos: Int[Tensor, " batch"]
    tokens: Int[Tensor, "batch pos"]
    patterns: Float[Tensor, "n_layers batch n_heads pos pos"]
    W_U: Float[Tensor, "d_model d_vocab"]
    b_U: Float[Tensor, " d_vocab"]
    order: int
    closure_error: float
    answer_str: tuple[str, ...] = ()

    @property
    def fold_norms(self) -> bool:
        """Always False: raw weights, each norm's scale frozen from the pass (an exact expansion)."""
        return False

    def index(self, label: Any) -> int:
        """Position of ``label`` in :attr:`labels` (LabelError lists close matches)."""
        if isinstance(label, Path):
            label = str(label)
        if not isinstance(label, str):
            raise LabelError(f"label={label!r} must be a path label such as {self.labels[0]!r}")
        try:
            return self.labels.index(label)
        except ValueError:
            near = [l for l in self.labels if label.split(ARROW)[-1] in l][:8]
            raise LabelError(f"label={label!r} is not a path here; e.g. {near or list(self.labels[:8])}") from None

    def _index(self, label: Any) -> int:
        return self.index(label)

    def _row(self, index: int) -> Float[Tensor, " batch"]:
        """The path's contribution to the chosen logit, per prompt."""
        return self.values[index]

    def value(self, label: str) -> Float[Tensor, " batch"]:
        """Deprecated spelling of ``pe[label]``: the path's contribution to the chosen logit, per prompt."""
        return self[label]

    def logit_values(
        self, token: Union[int, Sequence[int], Tensor], *, pos: Union[int, Sequence[int], Tensor] = -1
    ) -> Float[Tensor, "n_terms batch"]:
        """Each path's contribution to the logit of ``token`` at ``pos`` (other than the chosen one)."""
        n_batch, n_pos = self.tokens.shape
        dev = self.tokens.device
        tok = _per_row("token", token, n_batch, 0, self.W_U.shape[1], self.W_U.device)
        p = _per_row("pos", pos, n_batch, -n_pos, n_pos, dev) % n_pos
        rows = torch.arange(n_batch, device=self.tokens.device)
        at = self.contributions[:, rows, p]  # [n_terms, batch, d_model]
        return einops.einsum(at, self.W_U[:, tok], "t b d, d b -> t b")

    def path_table(self, *, prompt: Optional[int] = None) -> pd.DataFrame:
        """One row per path: label, order, source, heads, value and logit — the mean over prompts, or
        prompt ``prompt``'s."""
        n = int(self.values.shape[1])
        vals, logit = self.values.detach().double().cpu(), self.logit.detach().double().cpu()
        if prompt is None:
            v, lg = vals.mean(dim=1), float(logit.mean())
        else:
            b = check_index("prompt", prompt, n, what="prompts")
            v, lg = vals[:, b], float(logit[b])
        parts = [label.split(ARROW) for label in self.labels]
        return pd.DataFrame(
            {
                "label": list(self.labels),
                "order": list(self.orders),
                "source": [p[0] for p in parts],
                "heads": [ARROW.join(p[1:]) for p in parts],
                "value": v.numpy(),
                "logit": [lg] * len(self.labels),
            }
        )

    def _ranked_frame(self) -> pd.DataFrame:
        return self.path_table()

    def top(
        self, k: int = 10, *, by: Optional[str] = None, absolute: Optional[bool] = None, prompt: Optional[int] = None
    ) -> pd.DataFrame:
        """The ``k`` paths that raise the chosen logit most (by ``value``, the mean over prompts unless
        ``prompt``), a DataFrame as :meth:`path_table`. ``absolute=True`` ranks by |value| instead
        (paths that push either way)."""
        return self._rank(self.path_table(prompt=prompt), k, by=by, absolute=absolute)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (path, prompt): label, order, source, heads, prompt, value, logit."""
        vals = self.values.detach().cpu()
        rows = []
        for i, (label, order) in enumerate(zip(self.labels, self.orders)):
            parts = label.split(ARROW)
            for b in range(vals.shape[1]):
                rows.append(
                    dict(
                        label=label,
                        order=order,
                        source=parts[0],
                        heads=ARROW.join(parts[1:]),
                        prompt=b,
                        value=float(vals[i, b]),
                        logit=float(self.logit[b]),
                    )
                )
        return pd.DataFrame(rows)

    def plot(self, *, k: int = 20, prompt: Optional[int] = None) -> go.Figure:
        """A horizontal bar chart of the ``k`` largest |contributions| (plotly Figure, not shown)."""
        from interp.plots import path_expansion_figure  # plots reads the result's attributes; imported on use

        return path_expansion_figure(self, k=k, prompt=prompt)

    def __repr__(self) -> str:
        return (
            f"PathExpansion({len(self.labels)} paths up to order {self.order}, batch={self.values.shape[1]}, "
            f"closure_error={self.closure_error:.2e})"
        )


def _per_row(name: str, value: Any, n: int, lo: int, hi: int, device: torch.device) -> Tensor:
    """An int, a sequence or an int tensor -> LongTensor [n] with entries in [lo, hi), on ``device``."""
    if isinstance(value, Tensor) and value.device.type == "meta":
        raise ShapeError(f"{name} is on the 'meta' device (a tensor without data); pass ints or a real tensor")
    try:
        t = torch.as_tensor(value, device=value.device if isinstance(value, Tensor) else "cpu")
    except (TypeError, ValueError, RuntimeError):
        raise ArgumentError(f"{name}={value!r} must be an int or one int per batch row") from None
    if t.is_floating_point() or t.dtype == torch.bool or t.ndim > 1:
        raise ArgumentError(f"{name}={value!r} must be an int or one int per batch row")
    t = t.long().reshape(-1)
    if t.numel() == 1:
        t = t.expand(n)
    if t.numel() != n:
        raise ShapeError(f"{name} has {t.numel()} entries; the batch has {n} rows")
    if bool((t < lo).any()) or bool((t >= hi).any()):
        raise ArgumentError(f"{name}={value!r} is out of range; allowed [{lo}, {hi - 1}]")
    return t.to(device).clone()


def _tokens(model: Model, inputs: Any) -> Int[Tensor, "batch pos"]:
    """Token ids [batch, pos] from a string, equal-length strings, or an int tensor."""
    arch = model.arch
    if isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, str) for x in inputs)
    ):
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        rows = [model.to_tokens(t)[0] for t in texts]
        if len({len(r) for r in rows}) != 1:
            raise ArgumentError(
                f"inputs tokenise to different lengths {sorted({len(r) for r in rows})}; path_expansion needs "
                "equal lengths (no padding) — pass them one at a time or as an int tensor"
            )
        t = torch.stack(rows)
    elif isinstance(inputs, Tensor):
        if inputs.device.type == "meta":
            raise ShapeError("inputs is on the 'meta' device (a tensor without data); pass token ids on a real device")
        t = inputs[None] if inputs.ndim == 1 else inputs
        if t.ndim != 2:
            raise ShapeError(f"inputs must be token ids [batch, pos], got shape {tuple(inputs.shape)}")
        if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise ShapeError(f"inputs must be an integer tensor of token ids, got dtype {t.dtype}")
        if t.numel() == 0:
            raise ArgumentError(f"inputs is empty (shape {tuple(inputs.shape)})")
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= arch.d_vocab:
            raise ArgumentError(f"inputs has token id {lo if lo < 0 else hi}; ids must be in [0, {arch.d_vocab - 1}]")
    else:
        raise ArgumentError(
            f"inputs must be a string, a list of strings or an int tensor [batch, pos]; got {type(inputs).__name__}"
        )
    if t.shape[1] > arch.n_ctx:
        raise ArgumentError(f"inputs has {t.shape[1]} positions; the model's context is n_ctx={arch.n_ctx}")
    return t.to(device=model.device, dtype=torch.long).contiguous()


def _check_model(model: Any, order: Any) -> None:
    arch = getattr(model, "arch", None)
    if arch is None or not hasattr(model, "weights") or not hasattr(model, "bridge"):
        raise ArgumentError(f"model must be an interp Model, got {type(model).__name__}")
    block = describe_block(arch)
    if block.has_mlp:
        raise UnsupportedOperationError(
            f"path_expansion needs an attention-only model (no MLPs); model {arch.name!r} has MLPs "
            f"(d_mlp={arch.d_mlp}). Use interp's toy models (interp.load_model('toy-attn-only-2l'))."
        )
    if not arch.has_logits:
        raise UnsupportedOperationError(f"model {arch.name!r} has no unembedding, so it has no logits to expand")
    if block.normed_stream or block.sublayer_norms or (arch.norm != "none" and not block.reads_normed):
        # the expansion's block: x_out = x + Σ_h A^h N1(x) W_V^h W_O^h (+ b_O), each head reading N1(x) (or x)
        raise UnsupportedOperationError(
            f"path_expansion supports pre-norm blocks (heads read N1(x), their writes added unnormed); model "
            f"{arch.name!r} is {block.layout}"
        )
    check_int_min("order", order, 0)  # the number of heads a path may go through


def _count_terms(n_layers: int, n_heads: int, order: int, n_sources: int, ln_bias: bool) -> int:
    """How many paths the expansion will hold (to refuse runaway memory before allocating)."""
    by_order = [n_sources] + [0] * order  # by_order[k]: paths through k heads
    for _ in range(n_layers):
        new = [0] * (order + 1)
        for k in range(order):
            new[k + 1] += by_order[k] * n_heads
        if ln_bias and order >= 1:
            new[1] += n_heads
        by_order = [a + b for a, b in zip(by_order, new)]
        by_order[0] += 1  # L{l}.attn_bias
    return sum(by_order) + (1 if ln_bias else 0)


def _capture(model: Model, tokens: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor], Optional[Tensor]]:
    """One walk of the engine's forward: logits, patterns per layer, norm inputs per layer, final-norm input."""
    arch, L = model.arch, model.arch.n_layers
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    if arch.norm != "none":
        names += [f"blocks.{l}.ln1.hook_in" for l in range(L)] + ["ln_final.hook_in"]
    acts, logits = read_forward(model, tokens, torch.ones_like(tokens), dict.fromkeys(names), logits=True)
    if logits is None:
        raise UnsupportedOperationError(f"model {arch.name!r} has no unembedding: there are no logits to expand")
    return (
        logits,
        [acts[f"blocks.{l}.attn.hook_pattern"] for l in range(L)],
        [acts[f"blocks.{l}.ln1.hook_in"] for l in range(L)] if arch.norm != "none" else [],
        acts.get("ln_final.hook_in"),
    )


def _norm_linear(x: Tensor, kind: str, eps: float, gain: Tensor) -> Callable[[Tensor], Tensor]:
    """The frozen-scale linear part of the norm applied to ``x`` [batch, pos, d_model]."""
    sigma = norm_scale(x, kind, eps)
    return lambda c: apply_frozen(c, gain, sigma, kind)


def path_expansion(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    order: int = 2,
    answer: Union[None, int, str, Sequence[int], Tensor] = None,
    pos: Union[int, Sequence[int], Tensor] = -1,
) -> PathExpansion:
    """Expand an attention-only model's logits into paths through ≤ ``order`` heads.

    ``answer`` picks the logit that :attr:`PathExpansion.values` splits: a token id, one id
    per batch row, or a single-token string; None takes the model's own top prediction at
    ``pos`` (default the last position). Raises UnsupportedOperationError for models with
    MLPs, without an unembedding, or with post-norm blocks.
    """
    # 1. the model checked, the inputs tokenised, the peak memory bounded
    _check_model(model, order)
    arch, dt = model.arch, accumulate_dtype(model.dtype)  # half precision: the paths accumulate in float32
    w = model.weights if dt == model.dtype else model.weights.to(dtype=dt)
    tokens = _tokens(model, inputs)
    n_batch, n_pos = tokens.shape
    _check_memory(arch, tokens, order, n_sources=1 + (w.W_pos is not None), dt=dt)
    # 2. one forward: the logits, every layer's pattern, and the norms' inputs (their scales frozen below)
    logits, patterns, norm_in, final_in = _capture(model, tokens)
    if dt != model.dtype:
        logits, patterns, norm_in = logits.to(dt), [a.to(dt) for a in patterns], [x.to(dt) for x in norm_in]
        final_in = final_in.to(dt) if final_in is not None else None

    with torch.no_grad():
        # 3. every path through ≤ order heads, its contribution to the stream through the final norm
        paths = _expand_paths(arch, w, tokens, patterns, norm_in, order)
        labels, orders, contrib = _final_terms(arch, w, paths, final_in, n_batch, n_pos)
        # 4. the closure of the logits, and each path's term in the answer's logit
        W_U = need_unembed(model).to(dt)  # _check_model refused models without one
        b_U = w.b_U if w.b_U is not None else torch.zeros(arch.d_vocab, dtype=dt, device=model.device)
        recon = unembed(contrib.sum(dim=0), W_U, w.b_U)  # the logits of the summed paths (no b_U: none added)
        closure = float((recon - logits).abs().max())
        p = _per_row("pos", pos, n_batch, -n_pos, n_pos, tokens.device) % n_pos
        rows = torch.arange(n_batch, device=tokens.device)
        ans = _answer(model, answer, logits[rows, p], n_batch)
        at = contrib[:, rows, p]  # [n_terms, batch, d_model]
        values = einops.einsum(at, W_U[:, ans], "t b d, d b -> t b")

    answer_str: tuple[str, ...] = ()
    if model.tokenizer is not None:
        answer_str = tuple(model.tokenizer.decode([int(a)]) for a in ans)
    log.debug("path_expansion: %d paths, closure error %.2e", len(labels), closure)
    return PathExpansion(
        labels=tuple(labels),
        orders=tuple(orders),
        contributions=contrib,
        values=values,
        logit=logits[rows, p, ans],
        unembed_bias=b_U[ans],
        answer=ans,
        pos=p,
        tokens=tokens,
        patterns=torch.stack(patterns),
        W_U=W_U.detach().clone(),
        b_U=b_U.detach().clone(),
        order=order,
        closure_error=closure,
        answer_str=answer_str,
    )


def _check_memory(arch: Any, tokens: Tensor, order: int, *, n_sources: int, dt: torch.dtype) -> None:
    """Refuse (MemoryCapError) an expansion whose peak memory passes MEMORY_CAP_BYTES."""
    n_batch, n_pos = tokens.shape
    n_terms = _count_terms(arch.n_layers, arch.n_heads, order, n_sources, arch.norm == "layernorm")
    # held at the peak: the paths, their final-norm images (norm models) and the stacked result; the
    # logits and their reconstruction [batch, pos, d_vocab]; every layer's pattern [batch, heads, pos, pos]
    e = torch.finfo(dt).bits // 8
    copies = 3 if arch.norm != "none" else 2
    need = (
        e
        * n_batch
        * n_pos
        * (copies * n_terms * arch.d_model + 2 * arch.d_vocab + arch.n_layers * arch.n_heads * n_pos)
    )
    if need > MEMORY_CAP_BYTES:
        raise MemoryCapError(
            f"order={order} gives {n_terms} paths × inputs {tuple(tokens.shape)} × d_model {arch.d_model} "
            f"(× {copies} copies) plus logits [.., d_vocab={arch.d_vocab}] and patterns: {need / 2**30:.1f} GiB "
            f"(cap {MEMORY_CAP_BYTES / 2**30:.0f} GiB); lower order or shorten inputs"
        )


def _expand_paths(
    arch: Any, w: Any, tokens: Tensor, patterns: list[Tensor], norm_in: list[Tensor], order: int
) -> dict[str, tuple[int, Tensor]]:
    """label → (order, contribution to the residual stream [batch, pos, d_model]) of every path: the
    embeddings, then per layer each head reading every path of order < ``order`` (and the ln1 bias) through
    its frozen-scale norm, and the layer's attention bias."""
    n_batch, n_pos = tokens.shape
    paths: dict[str, tuple[int, Tensor]] = {"embed": (0, w.W_E[tokens])}
    if w.W_pos is not None:
        paths["pos_embed"] = (0, w.W_pos[:n_pos].expand(n_batch, n_pos, arch.d_model))
    for l in range(arch.n_layers):
        A = patterns[l]  # [batch, n_heads, query_pos, key_pos]
        lin = _norm_linear(norm_in[l], arch.norm, arch.norm_eps, w.ln1_w[l]) if arch.norm != "none" else (lambda c: c)
        readers = [(label, k, lin(c)) for label, (k, c) in paths.items() if k < order]
        if arch.norm == "layernorm" and order >= 1:
            readers.append((str(NormBias(Norm(l, "ln1"))), 0, w.ln1_b[l].expand(n_batch, n_pos, arch.d_model)))
        new: dict[str, tuple[int, Tensor]] = {}
        for h in range(arch.n_heads):
            kv = arch.kv_head(h)
            W_V, W_O = w.W_V[l, kv], w.W_O[l, h]
            for label, k, x in readers:
                v = x @ W_V  # [batch, key_pos, d_head]
                z = einops.einsum(A[:, h], v, "b q p, b p h -> b q h")
                new[f"{label}{ARROW}{Head(l, h)}"] = (k + 1, z @ W_O)
        rowsum = A.sum(dim=-1)  # [batch, n_heads, query_pos]; 1 except fully masked rows
        bias_V = einops.einsum(
            w.b_V[l][[arch.kv_head(h) for h in range(arch.n_heads)]], w.W_O[l], "n h, n h d -> n d"
        )  # each head's b_V W_O
        attn_bias = w.b_O[l] + einops.einsum(rowsum, bias_V, "b n q, n d -> b q d")
        paths.update(new)
        paths[str(Bias(l, "attn"))] = (0, attn_bias)
    return paths


def _final_terms(
    arch: Any, w: Any, paths: dict[str, tuple[int, Tensor]], final_in: Optional[Tensor], n_batch: int, n_pos: int
) -> tuple[list[str], list[int], Tensor]:
    """The labels, orders and stacked contributions [n_terms, batch, pos, d_model] after the final norm (its
    scale frozen), with the final LayerNorm's bias as its own term."""
    final = (
        _norm_linear(final_in, arch.norm, arch.norm_eps, w.lnf_w)
        if arch.norm != "none" and final_in is not None and w.lnf_w is not None
        else (lambda c: c)
    )
    labels = list(paths)
    contributions = [final(c) for _, c in paths.values()]
    orders = [k for k, _ in paths.values()]
    if arch.norm == "layernorm" and w.lnf_b is not None:
        labels.append("final_bias")
        contributions.append(w.lnf_b.expand(n_batch, n_pos, arch.d_model))
        orders.append(0)
    contrib = torch.stack([c.expand(n_batch, n_pos, arch.d_model) for c in contributions])
    return labels, orders, contrib


def _answer(model: Model, answer: Any, last_logits: Tensor, n_batch: int) -> Tensor:
    """The answer token per batch row (None: the model's argmax at the chosen position)."""
    if answer is None:
        return last_logits.argmax(dim=-1)
    if isinstance(answer, str):
        if model.tokenizer is None:
            raise ArgumentError(f"answer={answer!r} is a string but the model has no tokenizer; pass a token id")
        ids = text_ids(model, answer, "answer")
        if len(ids) != 1:
            raise ArgumentError(f"answer={answer!r} is {len(ids)} tokens {ids}; it must be exactly one token")
        answer = ids[0]
    return _per_row("answer", answer, n_batch, 0, model.arch.d_vocab, last_logits.device)
