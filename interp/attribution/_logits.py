"""Logits decomposed by head: exact direct logit attribution (docs/math.md §5).

With the final norm's scale σ frozen from the forward pass,

    logit[t] = Σ_terms  N_frozen(term) · W_U[:, t]  +  β_final · W_U[:, t]  +  b_U[t]

exactly; for a difference, u = W_U[:, answer] − W_U[:, wrong]. Per head the term is
z_h · (W_O^h u') / σ with u' = centre(γ ⊙ u) (LayerNorm) or γ ⊙ u (RMSNorm), so only the
attributed positions' z are kept and nothing of size [heads, batch, pos, d_model] exists.
Targets beyond one logit (multi-token answers, sets of wrong tokens, log-probabilities) are
weighted sums of such logits plus terms of their own (:mod:`interp.attribution._targets`).

Steps per batch of prompts: (1) tokenise, find each prompt's position, and lay out the reads (a
multi-token candidate gets its own teacher-forced row); (2) one forward pass that gathers every
needed activation at the read positions and stops at the final norm's input; (3) the model's own
ln_final + unembed at those positions give each candidate's score, hence the coefficients of the
reads and the model's own target; (4) the backward-walk decomposition (:mod:`interp.stream`)
projected on Σ coef · W_U[:, token] at each read position gives the terms (``unit="head_source"``:
each head's term split over its source positions, :mod:`interp.attribution._sources`).
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._validate import check_bool, check_positive_int, is_int, shardable
from interp.attribution._answers import TokenSpec, warn_unspaced
from interp.attribution._result import LogitAttribution
from interp.attribution._sources import head_source_terms, require_head_sources
from interp.attribution._targets import Targets, coefficients, combine, plan_reads, resolve_targets
from interp.engine import unembed
from interp.engine.internal import require_capabilities, soft_cap
from interp.errors import ArgumentError, LabelError, UnsupportedOperationError
from interp.labels import Attn, Bias, Head, HeadSource, parse
from interp.models import Model
from interp.models import Batch
from interp.stream.internal import as_batch, project_each, require_model, resolve_positions, trace_at

__all__ = ["attribute_logits"]

log = logging.getLogger(__name__)
UNITS = ("head", "component", "neuron", "head_source")


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
    raise ArgumentError(
        f"inputs must be a string, a non-empty list of strings or an int tensor [batch, pos]; got {inputs!r:.60}"
    )


def _component_of(label: str) -> str:
    """``L{l}.attn`` for a head ``L{l}.H{h}`` or attention bias ``L{l}.attn_bias``, else ``label`` itself."""
    try:
        lab = parse(label)
    except LabelError:
        return label
    if isinstance(lab, Head):
        return str(Attn(lab.layer))
    if isinstance(lab, Bias) and lab.sublayer == "attn" and lab.layer is not None:
        return str(Attn(lab.layer))
    return label


def _components(labels: list[str], values: Tensor) -> tuple[list[str], Tensor]:
    """Merge heads and attention bias of each layer into ``L{l}.attn`` (unit='component')."""
    out_labels: list[str] = []
    rows: list[Tensor] = []
    index: dict[str, int] = {}
    for lab, v in zip(labels, values):
        key = _component_of(lab)
        if key in index:
            rows[index[key]] = rows[index[key]] + v
        else:
            index[key] = len(rows)
            out_labels.append(key)
            rows.append(v.clone())
    return out_labels, torch.stack(rows)


def _rows_batch(model: Model, rows: list[list[int]], like: Batch) -> Batch:
    """Right-padded token rows as a checked batch (the prompts' own batch when nothing was added)."""
    if len(rows) == like.tokens.shape[0]:
        return like
    n = max(len(r) for r in rows)
    tokens = torch.tensor([r + [0] * (n - len(r)) for r in rows], dtype=torch.long, device=model.device)
    mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows], dtype=torch.long, device=model.device)
    return as_batch(model, tokens, mask)


def _chunk(
    model: Model, batch: Batch, p: Tensor, targets: Targets, start: int, neuron_layers: tuple[int, ...], unit: str
) -> dict[str, Any]:
    """Attribute one batch of prompts: values [n_terms, b] (+ head sources), totals, texts, tokens."""
    W_U = model.weights.W_U
    if W_U is None:  # attribute_logits refuses models without logits before it gets here
        raise UnsupportedOperationError(f"model {model.name!r} has no unembedding: there are no logits to attribute")
    b = batch.tokens.shape[0]
    # 1. the read plan: which row (the prompt, or its answer's teacher-forced context) is read where
    rows, reads, rb, P, valid = _read_plan(model, batch, p, targets, start)
    # 2. one pass up to the unembedding, and the model's own (capped) logits and log-partition there
    keep = ("patterns", "v") if unit == "head_source" else ()
    tr = trace_at(model, rb, P, neuron_layers=neuron_layers, stop_before_unembed=True, keep=keep)
    own, pre, lse = _own_logits(model, tr, W_U.dtype, targets)
    # 3. each prompt's target and the coefficient of each read logit in it
    coef, total, remainder = _combine_reads(own, lse, reads, targets, start, b)
    # 4. the read direction u per row and position; the bias, log-partition and soft-cap terms
    u, bias, log_z, capped, has_bias = _readout(model, own, pre, lse, reads, coef, len(rows), P.shape[1], b)
    # 5. every component's term: its write projected onto u, summed over each prompt's reads
    labels, contributions, _ = project_each(tr, "unembed", u)  # [n, R, K]: each read position on its own u
    per_row = (contributions * valid.to(contributions.dtype)).sum(-1)  # [n, R]
    own_rows = [i for i in range(b)] + [0] * (len(rows) - b)
    for r in reads:
        own_rows[r.row] = r.prompt
    owner = torch.tensor(own_rows, dtype=torch.long, device=per_row.device)
    vals = torch.zeros(per_row.shape[0], b, dtype=per_row.dtype, device=per_row.device).index_add_(1, owner, per_row)
    # 6. the extra terms appended, the head sources and the tokens each prompt is read in
    extra = _extra_terms(model, targets, bias, log_z, capped, remainder, has_bias=has_bias)
    if extra:
        labels += [lab for lab, _ in extra]
        vals = torch.cat([vals, torch.stack([x.to(vals.device, vals.dtype) for _, x in extra])])
    out: dict[str, Any] = {"labels": labels, "values": vals, "total": torch.stack(total).to(vals.device, vals.dtype)}
    if unit == "head_source":
        hs = head_source_terms(model, tr.activations, u, valid)  # [R, L, H, S]
        out["sources"] = torch.zeros(b, *hs.shape[1:], dtype=hs.dtype, device=hs.device).index_add_(
            0, owner.to(hs.device), hs
        )
    # the tokens each prompt is read in: its own, or its answer's teacher-forced context
    ans_row = [i for i in range(b)]
    for r in reads:
        if r.cand == 0:
            ans_row[r.prompt] = r.row
    out["row_ids"] = [rows[ans_row[i]] for i in range(b)]
    return out


def _read_plan(
    model: Model, batch: Batch, p: Tensor, targets: Targets, start: int
) -> tuple[list[list[int]], list[Any], Batch, Tensor, Tensor]:
    """The token rows, the reads (row, position, token → prompt, candidate), the rows' batch, the read
    positions P [R, K] (padded with each row's first) and which of them are real."""
    b = batch.tokens.shape[0]
    lengths = batch.attention_mask.sum(1).tolist()
    tokens = batch.tokens.tolist()  # one read of the device, not one per prompt
    ids = [tokens[i][: lengths[i]] for i in range(b)]
    rows, row_pos, reads = plan_reads(ids, p.tolist(), targets, start)
    rb = _rows_batch(model, rows, batch)
    K = max(len(r) for r in row_pos)
    dev = model.device
    P = torch.tensor([r + [r[0]] * (K - len(r)) for r in row_pos], dtype=torch.long, device=dev)  # [R, K]
    valid = torch.tensor([[1] * len(r) + [0] * (K - len(r)) for r in row_pos], dtype=torch.bool, device=dev)
    return rows, reads, rb, P, valid


def _own_logits(model: Model, tr: Any, dtype: torch.dtype, targets: Targets) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """The model's own logits at the read positions (soft-capped c·tanh(z/c) where it caps), the pre-cap z, and
    log Σ exp logits for ``logprob`` targets."""
    # its unembedding of its own final-norm output, or (no final norm, e.g. the toys: the forward ran to the
    # end) its own logits there
    if "ln_final.hook_out" in tr.activations:
        W_U, b_U = model.weights.need("W_U"), model.weights.b_U
        with torch.inference_mode():
            own = unembed(tr.activations["ln_final.hook_out"], W_U, b_U)  # [R, K, d_vocab], before the soft-cap
    elif tr.logits is not None:
        own = tr.logits
    else:
        raise UnsupportedOperationError(
            f"model {model.name!r}: the pass kept neither the final norm's output nor logits"
        )
    own = own.to(dtype)
    cap = model.arch.final_softcap
    pre = own  # the pre-cap logits z (the same tensor when nothing is capped)
    own = soft_cap(pre, cap)  # Gemma 2 caps its logits, c·tanh(z/c): the terms decompose the pre-cap z (see _readout)
    lse = torch.logsumexp(own, dim=-1) if targets.kind == "logprob" else None  # [R, K]
    return own, pre, lse


def _combine_reads(
    own: Tensor, lse: Optional[Tensor], reads: list[Any], targets: Targets, start: int, b: int
) -> tuple[list[Any], list[Tensor], list[Tensor]]:
    """Per prompt: each candidate's score (its read logits or log-probs summed), the coefficients of the
    candidates in the target, the target and its first-order remainder."""
    n_cand = 1 + (max(len(targets.wrongs[start + i]) for i in range(b)) if targets.wrongs is not None else 0)
    scores = torch.zeros(b, n_cand, dtype=own.dtype, device=own.device)
    for r in reads:
        s = own[r.row, r.j, r.token] - (lse[r.row, r.j] if lse is not None else 0)
        scores[r.prompt, r.cand] += s
    coef, total, remainder = [], [], []
    for i in range(b):
        k = 1 + (len(targets.wrongs[start + i]) if targets.wrongs is not None else 0)
        coef.append(coefficients(targets, scores[i, :k]))
        t, rem = combine(targets, scores[i, :k])
        total.append(t)
        remainder.append(rem)
    return coef, total, remainder


def _readout(
    model: Model,
    own: Tensor,
    pre: Tensor,
    lse: Optional[Tensor],
    reads: list[Any],
    coef: list[Any],
    R: int,
    K: int,
    b: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, bool]:
    """u [R, K, d_model] = Σ_reads c · W_U[:, token] (c·sech²(z/c) under a soft-cap), and per prompt the
    unembedding-bias term Σ c·b_U[token], the log-partition term −Σ c·lse and the soft-cap remainder."""
    W_U, b_U, cap = model.weights.W_U, model.weights.b_U, model.arch.final_softcap
    assert W_U is not None  # _chunk checked
    dev = W_U.device
    u = torch.zeros(R, K, W_U.shape[0], dtype=W_U.dtype, device=dev)
    bias = torch.zeros(b, dtype=W_U.dtype, device=dev)
    log_z = torch.zeros(b, dtype=W_U.dtype, device=dev)
    capped = torch.zeros(b, dtype=W_U.dtype, device=dev)
    has_bias = b_U is not None and bool((b_U != 0).any())
    for r in reads:
        c = coef[r.prompt][r.cand]
        if lse is not None:  # −c·log Z: the read's own coefficient (the cap's slope scales z's terms only)
            log_z[r.prompt] -= c * lse[r.row, r.j]
        if cap:  # capped(z) = z·sech²(z/c) (first order, split over the terms of z) + a remainder term
            y = own[r.row, r.j, r.token]  # the capped logit
            slope = 1 - (y / cap) ** 2  # sech²(z/c) = 1 − tanh²(z/c)
            capped[r.prompt] += c * (y - slope * pre[r.row, r.j, r.token])
            c = c * slope
        u[r.row, r.j] += c * W_U[:, r.token]
        if has_bias and b_U is not None:
            bias[r.prompt] += c * b_U[r.token]
    return u, bias, log_z, capped, has_bias


def _extra_terms(
    model: Model,
    targets: Targets,
    bias: Tensor,
    log_z: Tensor,
    capped: Tensor,
    remainder: list[Tensor],
    *,
    has_bias: bool,
) -> list[tuple[str, Tensor]]:
    """The terms no component writes: the unembedding bias, the log-partition, the soft-cap and the
    logsumexp-over-wrongs remainders, where they apply."""
    extra = []
    if has_bias:
        extra.append(("unembed_bias", bias))
    if targets.kind == "logprob":
        extra.append(("log_partition", log_z))
    if model.arch.final_softcap:
        extra.append(("softcap_remainder", capped))
    if targets.wrongs is not None and targets.agg == "logsumexp":
        extra.append(("wrong_lse_remainder", torch.stack(remainder)))
    return extra


def _expand_sources(labels: list[str], values: Tensor, sources: Tensor) -> tuple[list[str], Tensor]:
    """Replace each head's row by its per-source rows ``L{l}.H{h}[src=s]`` (sources [N, L, H, S])."""
    out_labels: list[str] = []
    rows: list[Tensor] = []
    S = sources.shape[-1]
    for lab, v in zip(labels, values):
        h = parse(lab)
        if isinstance(h, Head):
            out_labels += [str(HeadSource(h.layer, h.head, s)) for s in range(S)]
            rows.append(sources[:, h.layer, h.head, :].T)  # [S, N]
        else:
            out_labels.append(lab)
            rows.append(v[None])
    return out_labels, torch.cat(rows)


@shardable
def attribute_logits(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    answer: TokenSpec,
    wrong: Optional[Any] = None,
    pos: Union[int, Sequence[int]] = -1,
    unit: str = "head",
    target: str = "logit",
    wrong_agg: str = "mean",
    multi_token: bool = False,
    batch_size: Optional[int] = None,
    progress: Optional[bool] = None,
    cluster: Any = None,
    out: Any = None,
) -> LogitAttribution:
    """Split the logit of ``answer`` (minus ``wrong``'s, if given) at ``pos`` into every term.

    ``inputs``: one prompt, a list of prompts (streamed in batches of ``batch_size``) or token
    ids [batch, pos]. ``answer``: a single-token string, a token id, or one per prompt.
    ``wrong``: the same, or a set of tokens shared by every prompt (``{" London", " Berlin"}``), or per
    prompt a list of tokens; several wrong tokens combine by ``wrong_agg`` — "mean" (linear: exact)
    or "logsumexp" (split to first order with the softmax weights over the wrong set at the real pass;
    the remainder is the term ``wrong_lse_remainder``). ``target``: "logit" or "logprob" (log p =
    logit − log Σ exp logits: the log-partition is the term ``log_partition``). ``multi_token``:
    answers (and wrongs) may be several tokens, each read teacher-forced at its own position, summed.
    ``pos``: int (negative counts back from each prompt's last real token) or one per prompt.
    ``unit``: "head" | "component" | "neuron" | "head_source" (each head's term split over the source
    positions it reads, ``L3.H5[src=4]``; pre-norm decoders). The result's ``closure_error`` is the
    largest |Σ terms − the model's own target| over prompts. ``cluster``: None (in process) or an
    ``interp.RayCluster`` (prompts sharded over its workers, merged exactly); ``out``: a folder keeping each
    finished shard for resume (docs/scaling.md).
    """
    require_model(model)
    # 1. the inputs checked: unit, prompts, batch size, positions, targets
    _check_unit(model, unit)
    items, is_text = _prompts(inputs)
    n = len(items)
    if batch_size is None:
        batch_size = n if n <= 16 else 8
    _check_run_options(n, batch_size, pos, progress)
    targets = resolve_targets(model, answer, wrong, n, multi_token=multi_token, target=target, wrong_agg=wrong_agg)
    if targets.multi_token and not model.arch.causal:
        raise UnsupportedOperationError(
            f"multi_token answers are teacher-forced, which needs a causal model; {model.name!r} is bidirectional"
        )
    neuron_layers = tuple(range(model.arch.n_layers)) if unit == "neuron" else ()
    if neuron_layers:  # a mixture of experts' neurons are its experts', scaled by the router: not split yet
        require_capabilities(model, "attribute_logits(unit='neuron')", "experts")
    # 2. each batch of prompts attributed; a warning where an answer lacks the space its context suggests
    show = progress if progress is not None else n > batch_size
    chunks, positions, before = _run_chunks(model, items, is_text, pos, targets, neuron_layers, unit, batch_size, show)
    last = torch.cat(before)[:, None]  # the token each answer follows
    for arg, spec in (("answer", answer), ("wrong", wrong)):
        warn_unspaced(model, spec, arg, last, torch.zeros(n, dtype=torch.long, device="cpu"), owner="attribute_logits")
    # 3. the chunks merged into one term table in the asked unit, and the result with its closure error
    labels, values, total = _merge(chunks, unit)
    return _result(model, items, is_text, targets, chunks, labels, values, total, torch.cat(positions), unit)


def _check_unit(model: Model, unit: str) -> None:
    """``unit`` is one of UNITS, the model has logits, and head sources are available for ``head_source``."""
    if unit not in UNITS:
        raise ArgumentError(f"unit={unit!r} is not allowed; use one of {UNITS}")
    if not model.arch.has_logits:
        raise UnsupportedOperationError(
            f"model {model.name!r} is an encoder without an unembedding (logits are undefined); "
            "use interp.attribute_direction(model, inputs, direction) to attribute its hidden state"
        )
    if unit == "head_source":
        require_head_sources(model, "unit='head_source'")


def _check_run_options(n: int, batch_size: Any, pos: Any, progress: Any) -> None:
    """``batch_size`` a positive int, ``pos`` an int or one per prompt, ``progress`` a bool or None."""
    check_positive_int("batch_size", batch_size)
    if not (is_int(pos) or isinstance(pos, (Tensor, list, tuple))):
        raise ArgumentError(f"pos={pos!r} must be an int or a per-prompt list of ints")
    if isinstance(pos, (list, tuple)) and len(pos) != n:
        raise ArgumentError(f"pos has {len(pos)} entries but there are {n} prompts")
    check_bool("progress", progress, none="automatic")


def _run_chunks(
    model: Model,
    items: list[Any],
    is_text: bool,
    pos: Any,
    targets: Targets,
    neuron_layers: tuple[int, ...],
    unit: str,
    batch_size: int,
    show: bool,
) -> tuple[list[dict[str, Any]], list[Tensor], list[Tensor]]:
    """Each batch of ``batch_size`` prompts attributed (``_chunk``): the chunks, their read positions and the
    token at each read position."""
    chunks: list[dict[str, Any]] = []
    positions: list[Tensor] = []
    before: list[Tensor] = []
    bar = tqdm(total=len(items), desc="attribute_logits", unit="prompt", disable=not show)
    try:
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            if is_text:
                batch = as_batch(model, chunk)
            else:
                lens = {len(x) for x in chunk}
                if len(lens) != 1:
                    raise ArgumentError(
                        f"token-id prompts have different lengths {sorted(lens)}; pass a rectangular tensor"
                    )
                batch = as_batch(model, torch.stack(chunk))
            p = resolve_positions(pos, batch.attention_mask.cpu(), offset=start)
            chunks.append(_chunk(model, batch, p, targets, start, neuron_layers, unit))
            positions.append(p)
            before.append(batch.tokens.cpu()[torch.arange(len(p), device="cpu"), p.cpu()])
            bar.update(len(chunk))
    finally:
        bar.close()
    return chunks, positions, before


def _merge(chunks: list[dict[str, Any]], unit: str) -> tuple[list[str], Tensor, Tensor]:
    """The chunks' terms [term, prompt] and totals joined; head terms split over sources or summed into
    components as ``unit`` asks."""
    labels = chunks[0]["labels"]
    values = torch.cat([c["values"] for c in chunks], dim=1)
    total = torch.cat([c["total"] for c in chunks])
    if unit == "head_source":
        S = max(c["sources"].shape[-1] for c in chunks)
        src = torch.cat([torch.nn.functional.pad(c["sources"], (0, S - c["sources"].shape[-1])) for c in chunks])
        labels, values = _expand_sources(labels, values, src)
    elif unit == "component":
        labels, values = _components(labels, values)
    return labels, values, total


def _result(
    model: Model,
    items: list[Any],
    is_text: bool,
    targets: Targets,
    chunks: list[dict[str, Any]],
    labels: list[str],
    values: Tensor,
    total: Tensor,
    positions: Tensor,
    unit: str,
) -> LogitAttribution:
    """The result: the terms, the closure error max |Σ terms − target| (and relative to max |target|), the
    targets' and prompts' texts."""
    arch, n = model.arch, len(items)
    gap = (values.sum(0) - total).abs()
    err = float(gap.max())
    scale = float(total.abs().max())
    tok = model.tokenizer
    name = (lambda c: repr(tok.decode(list(c)))) if tok is not None else (lambda c: "+".join(f"#{t}" for t in c))
    texts = [targets.text(i, name) for i in range(n)]
    log.info("attribute_logits: %d prompts, closure error %.3g", n, err)
    row_ids = [r for c in chunks for r in c["row_ids"]]
    prompt_str_tokens = [list(map(tok.decode, ([t] for t in r))) for r in row_ids] if tok is not None else None
    return LogitAttribution(
        values=values,
        labels=labels,
        total=total,
        target=targets.overall_text(texts),
        unit=unit,
        n_layers=arch.n_layers,
        n_heads=arch.n_heads,
        closure_error=err,
        relative_error=err / scale if scale > 0 else err,
        positions=positions,
        prompts=list(items) if is_text else None,
        str_tokens=prompt_str_tokens[0] if (prompt_str_tokens and is_text) else None,
        answer_ids=targets.answer_ids(),
        wrong_ids=targets.wrong_ids(),
        prompt_str_tokens=prompt_str_tokens,
        prompt_targets=texts,
        target_kind=targets.kind,
        wrong_agg=targets.agg if targets.wrongs is not None and any(len(w) > 1 for w in targets.wrongs) else None,
    )
