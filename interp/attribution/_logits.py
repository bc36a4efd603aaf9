"""Logits decomposed by head: exact direct logit attribution (DESIGN "Math" 5).

With the final norm's scale σ frozen from the forward pass,

    logit[t] = Σ_terms  N_frozen(term) · W_U[:, t]  +  β_final · W_U[:, t]  +  b_U[t]

exactly; for a difference, u = W_U[:, answer] − W_U[:, wrong]. Per head the term is
z_h · (W_O^h u') / σ with u' = centre(γ ⊙ u) (LayerNorm) or γ ⊙ u (RMSNorm), so only the
attributed position's z is kept and nothing of size [heads, batch, pos, d_model] exists.

Steps per batch: (1) tokenise and find each prompt's position; (2) one forward pass that
gathers every needed activation at that position and stops at the final norm's input;
(3) the model's own ln_final + unembed on those positions give the logit; (4) the
backward-walk decomposition (:mod:`interp.stream`) projected on u gives the terms.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.attribution._answers import TokenSpec, resolve_positions, resolve_tokens
from interp.attribution._result import LogitAttribution
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.stream._inputs import as_batch, require_model
from interp.stream._trace import trace_at

__all__ = ["attribute_logits"]

log = logging.getLogger(__name__)
UNITS = ("head", "component", "neuron")


def _prompts(inputs: Any) -> tuple[list[Any], bool]:
    """Split inputs into per-prompt items (strings or id rows) and whether they are text."""
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs, Tensor):
        t = inputs if inputs.ndim != 1 else inputs[None]
        return list(t), False
    if isinstance(inputs, (list, tuple)) and inputs:
        if all(isinstance(x, str) for x in inputs):
            return list(inputs), True
        return [torch.as_tensor(x) for x in inputs], False
    raise ArgumentError(f"inputs must be a string, a non-empty list of strings or an int tensor [batch, pos]; got {inputs!r:.60}")


def _components(labels: list[str], values: Tensor) -> tuple[list[str], Tensor]:
    """Merge heads and attention bias of each layer into ``L{l}.attn`` (unit='component')."""
    out_labels: list[str] = []
    rows: list[Tensor] = []
    index: dict[str, int] = {}
    for lab, v in zip(labels, values):
        m = re.match(r"L(\d+)\.(H\d+|attn_bias)$", lab)
        key = f"L{m.group(1)}.attn" if m else lab
        if key in index:
            rows[index[key]] = rows[index[key]] + v
        else:
            index[key] = len(rows)
            out_labels.append(key)
            rows.append(v.clone())
    return out_labels, torch.stack(rows)


def attribute_logits(
    model: Any,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    answer: TokenSpec,
    wrong: Optional[TokenSpec] = None,
    pos: Union[int, Sequence[int]] = -1,
    unit: str = "head",
    batch_size: Optional[int] = None,
    progress: Optional[bool] = None,
) -> LogitAttribution:
    """Split the logit of ``answer`` (minus ``wrong``'s, if given) at ``pos`` into every term.

    ``inputs``: one prompt, a list of prompts (streamed in batches of ``batch_size``) or token
    ids [batch, pos]. ``answer``/``wrong``: a single-token string, a token id, or one per prompt.
    ``pos``: int (negative counts back from each prompt's last real token) or one per prompt.
    ``unit``: "head" | "component" | "neuron". The result's ``closure_error`` is the largest
    |Σ terms − model's own logit (difference)| over prompts.
    """
    require_model(model)
    arch = model.arch
    if unit not in UNITS:
        raise ArgumentError(f"unit={unit!r} is not allowed; use one of {UNITS}")
    if not arch.has_logits:
        raise UnsupportedOperationError(
            f"model {model.name!r} is an encoder without an unembedding (logits are undefined); "
            "use interp.attribute_direction(model, inputs, direction) to attribute its hidden state"
        )
    items, is_text = _prompts(inputs)
    n = len(items)
    if batch_size is None:
        batch_size = n if n <= 16 else 8
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ArgumentError(f"batch_size={batch_size!r} must be a positive int")
    if isinstance(pos, bool) or not isinstance(pos, (int, Tensor, list, tuple)):
        raise ArgumentError(f"pos={pos!r} must be an int or a per-prompt list of ints")
    if isinstance(pos, (list, tuple)) and len(pos) != n:
        raise ArgumentError(f"pos has {len(pos)} entries but there are {n} prompts")
    if progress is not None and not isinstance(progress, bool):
        raise ArgumentError(f"progress={progress!r} must be True, False or None (automatic)")
    ans = resolve_tokens(model, answer, n, "answer")
    if ans is None:
        raise ArgumentError("answer is required: the token whose logit is attributed")
    wr = resolve_tokens(model, wrong, n, "wrong")
    neuron_layers = tuple(range(arch.n_layers)) if unit == "neuron" else ()
    W_U, b_U = model.weights.W_U, model.weights.b_U
    show = progress if progress is not None else n > batch_size

    all_values: list[Tensor] = []
    totals: list[Tensor] = []
    positions: list[Tensor] = []
    labels: list[str] = []
    bar = tqdm(total=n, desc="attribute_logits", unit="prompt", disable=not show)
    try:
        for start in range(0, n, batch_size):
            chunk = items[start: start + batch_size]
            if is_text:
                batch = as_batch(model, chunk)
            else:
                lens = {len(x) for x in chunk}
                if len(lens) != 1:
                    raise ArgumentError(f"token-id prompts have different lengths {sorted(lens)}; pass a rectangular tensor")
                batch = as_batch(model, torch.stack(chunk))
            p = resolve_positions(pos, batch.attention_mask.cpu(), offset=start).to(batch.tokens.device)
            tr = trace_at(model, batch, p, neuron_layers=neuron_layers, stop_before_unembed=True)
            a = ans[start: start + len(chunk)].to(W_U.device)
            u = W_U[:, a].T  # [b, d_model]
            bias = b_U[a]
            if wr is not None:
                w_ = wr[start: start + len(chunk)].to(W_U.device)
                u = u - W_U[:, w_].T
                bias = bias - b_U[w_]
            dec = tr.decompose("unembed", project_onto=u[:, None, :])
            vals = dec.contributions[:, :, 0, 0]  # [n_terms, b]
            lab = list(dec.labels)
            if bool((b_U != 0).any()):
                lab.append("unembed_bias")
                vals = torch.cat([vals, bias[None].to(vals.dtype)])
            # The model's own number: its unembedding of its own final-norm output, or (no final
            # norm, e.g. the toys: the forward ran to the end) its own logits at those positions.
            if "ln_final.hook_out" in tr.activations:
                with torch.inference_mode():
                    own = model.bridge.unembed(tr.activations["ln_final.hook_out"])[:, 0]  # [b, d_vocab]
            else:
                own = tr.logits[:, 0]
            rows = torch.arange(len(chunk), device=own.device)
            total = own[rows, a] - (own[rows, w_] if wr is not None else 0)
            if unit == "component":
                lab, vals = _components(lab, vals)
            if not labels:
                labels = lab
            all_values.append(vals.detach())
            totals.append(total.detach().to(vals.dtype))
            positions.append(p.cpu())
            bar.update(len(chunk))
    finally:
        bar.close()
    values = torch.cat(all_values, dim=1)
    total = torch.cat(totals)
    gap = (values.sum(0) - total).abs()
    err = float(gap.max())
    scale = float(total.abs().max())
    tok = model.tokenizer
    name = (lambda t: repr(tok.decode([int(t)]))) if tok is not None else (lambda t: f"#{int(t)}")
    target = (f"logit[{name(ans[0])}]" + (f" − logit[{name(wr[0])}]" if wr is not None else "")
              + (" (per-prompt tokens)" if n > 1 and (bool((ans != ans[0]).any()) or (wr is not None and bool((wr != wr[0]).any()))) else ""))
    log.info("attribute_logits: %d prompts, closure error %.3g", n, err)
    str_tokens = None
    if is_text and tok is not None:
        str_tokens = model.to_str_tokens(as_batch(model, items[0]).tokens)[0]
    return LogitAttribution(
        values=values, labels=labels, total=total, target=target, unit=unit,
        n_layers=arch.n_layers, n_heads=arch.n_heads, closure_error=err,
        relative_error=err / scale if scale > 0 else err, positions=torch.cat(positions),
        prompts=list(items) if is_text else None, str_tokens=str_tokens,
    )
