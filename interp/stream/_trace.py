"""trace(): one forward pass read at every read and write point, and exact decompositions of every read and resid
point (the engine's forward, captured at transformer-lens's hook names: :func:`interp.engine.internal.read_forward`).

Algorithm (Elhage et al. 2021, "A Mathematical Framework", §2 the residual stream; docs/math.md
§2–4). For a read point R and directions U [k, d_model] (the identity basis unless the
caller projects):

1. Walk the block program (:func:`interp.models.internal.build_program`) backwards from R, carrying U and a
   per-token scalar S (initially 1).
2. At R's own pre-norm, and at every post-norm N passed on the way back, σ is frozen from the
   forward pass and N is linear: u·N(w) = (C Γ u)·w / σ, with C the centring (LayerNorm only)
   and Γ = diag(γ). The norm's β first joins as a term (β·U·S), then U ← C Γ U and S ← S/σ.
3. Every write w before R contributes (w·Uᵀ)·S. A head's write is z_h W_O^h, so its
   projection is z_h · (W_O^h Uᵀ): nothing of size [n_heads, batch, pos, d_model] is formed
   unless U is the full basis.
4. The terms sum to the model's own tensor at R (``total``), exactly up to float rounding;
   the gap is reported as ``closure_error``.
"""

from __future__ import annotations

import difflib
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._norms import accumulate_dtype
from interp._result import place
from interp._validate import is_index
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.models import ArchInfo, Block, Model, Weights, describe_block
from interp.models.internal import Event, build_program, norm_hook, resid_hook_names
from interp.stream._decomposition import Decomposition
from interp.stream._inputs import Batch, as_batch, check_tensor_data, require_model
from interp.engine.internal import read_forward, require_capabilities
from interp.stream._keep import check_keep, keep_hooks, kept_tensor
from interp.stream._projected import capture_projected
from interp.stream._walk import fill, plan_walk, project_term, scale_chain, sigma

__all__ = ["ResidualTrace", "trace", "capture_names", "project_each"]


def capture_names(arch: ArchInfo, *, neuron_layers: Sequence[int] = (), has_types: bool = False) -> list[str]:
    """Every hook a full trace records."""
    names = ["embed.hook_out"]
    if arch.positional == "learned":
        names.append("pos_embed.hook_out")
    if has_types:
        names.append("token_type_embed.hook_out")
    block = describe_block(arch)
    subs = ("attn", "mlp") if block.has_mlp else ("attn",)
    # per sublayer: the norm it reads through (pre-norm) or the stream's norm after its add (post-norm) — their
    # inputs and outputs; then the input of the norm on its output (sandwich / output norms: σ')
    block_norms = [n for n in (block.read_norm(s) or block.stream_norm(s) for s in subs) if n is not None]
    out_norms = [n for n in (block.out_norm(s) for s in subs) if n is not None]
    if block.normed_stream:
        names += ["embed_ln.hook_in", "embed_ln.hook_out"]
    names += resid_hook_names(arch)
    for l in range(arch.n_layers):
        names.append(f"blocks.{l}.attn.hook_z")
        for hook in dict.fromkeys(norm_hook(arch, l, n[-1]) for n in block_norms):  # GPT-J: one ln1 for both
            names += [f"{hook}.hook_in", f"{hook}.hook_out"]
        names += [f"blocks.{l}.{n}.hook_in" for n in out_norms]
        if block.has_mlp:
            names.append(f"blocks.{l}.hook_mlp_out")
            if l in neuron_layers:
                names.append(f"blocks.{l}.mlp.out.hook_in")
    if arch.norm != "none" and not block.normed_stream:
        names += ["ln_final.hook_in", "ln_final.hook_out"]
    return names


@dataclass(frozen=True, eq=False)
class ResidualTrace:
    """The activations of one forward pass needed to decompose any read or resid point.

    Holds token ids, the captured activations and the model's weights (tensors only, never
    the model). ``writes`` and ``reads`` list the labels in stream order; ``decompose(label)``
    returns a :class:`Decomposition`. A trace made with ``trace(..., project=...)`` holds no
    activations, only the decompositions of the reads it was asked for (``projected``).
    ``trace(..., keep=("patterns", "q", "k", "v"))`` also keeps the attention internals, stacked over
    layers by :attr:`patterns`, :attr:`q`, :attr:`k`, :attr:`v` (:mod:`interp.stream._keep`).
    ``save(path)`` / ``ResidualTrace.load(path)`` keep a trace in one ``.safetensors`` file
    (:mod:`interp.stream._trace_io`); a loaded trace decomposes exactly as the original.
    """

    arch: ArchInfo
    tokens: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]
    str_tokens: Optional[list[list[str]]]
    activations: dict[str, Tensor] = field(repr=False)
    weights: Weights = field(repr=False)
    neuron_layers: tuple[int, ...] = ()
    project_onto: Optional[Tensor] = field(default=None, repr=False)
    logits: Optional[Tensor] = field(default=None, repr=False)
    projected: Optional[dict[str, Decomposition]] = field(default=None, repr=False)
    has_types: Optional[bool] = None  # a token-type embedding write; None: read from the activations
    kept: Optional[dict[str, list[str]]] = field(default=None, repr=False)  # keep item -> hook per layer

    def __post_init__(self) -> None:
        # one device for the trace's own tensors (interp._result.place); the weights stay where the model keeps them
        place(self, ("tokens", "attention_mask", "activations", "project_onto", "logits", "projected"))

    @property
    def block(self) -> Block:
        """One layer's wiring, the traced model's (:func:`interp.models.describe_block` of :attr:`arch`)."""
        return describe_block(self.arch)

    @property
    def program(self) -> list[Event]:
        types = self.has_types if self.has_types is not None else "token_type_embed.hook_out" in self.activations
        return build_program(self.arch, neuron_layers=self.neuron_layers, n_types=int(types))

    def _kept(self, item: str) -> Tensor:
        return kept_tensor(
            self.activations, self.kept or {}, item, interleaved=self.arch.rotary_interleaved, d_head=self.arch.d_head
        )

    @property
    def patterns(self) -> Float[Tensor, "n_layers batch n_heads query_pos key_pos"]:
        """Every head's attention pattern A[q, k] (``keep=("patterns",)``; padding keys hold ~0)."""
        return self._kept("patterns")

    @property
    def q(self) -> Float[Tensor, "n_layers batch pos n_heads d_head"]:
        """Queries as the attention scores use them (after RoPE for rotary models; ``keep=("q",)``)."""
        return self._kept("q")

    @property
    def k(self) -> Float[Tensor, "n_layers batch pos n_kv_heads d_head"]:
        """Keys as the attention scores use them (after RoPE for rotary models; ``keep=("k",)``)."""
        return self._kept("k")

    @property
    def v(self) -> Float[Tensor, "n_layers batch pos n_kv_heads d_head"]:
        """Values, b_V included (``keep=("v",)``)."""
        return self._kept("v")

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write the trace to one ``.safetensors`` file (activations, tokens, the weights decompose reads)."""
        from interp.stream._trace_io import save_trace

        return save_trace(self, path)

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "ResidualTrace":
        """Read a trace written by :meth:`save`; its tensors are the original's bit for bit; it decomposes as the
        original (to float rounding)."""
        from interp.stream._trace_io import load_trace

        return load_trace(cls, path)

    @property
    def writes(self) -> list[str]:
        """Write labels in stream order (norm biases of pre-norm reads appear only in reads)."""
        return [e.label for e in self.program if e.kind == "write"]

    @property
    def reads(self) -> list[str]:
        return [e.label for e in self.program if e.kind == "read"]

    @property
    def resid_points(self) -> list[str]:
        return [e.label for e in self.program if e.kind == "resid"]

    def _find(self, point: str) -> int:
        if not isinstance(point, str):
            raise LabelError(f"read_label={point!r} must be a string label such as {self.reads[0]!r}")
        prog = self.program
        for i, e in enumerate(prog):
            if e.kind in ("read", "resid") and e.label == point:
                return i
        valid = [e.label for e in prog if e.kind in ("read", "resid")]
        near = difflib.get_close_matches(point, valid, n=5, cutoff=0.4)
        hint = f"; nearest: {near}" if near else ""
        raise LabelError(
            f"read_label={point!r} is not a read or resid point of this {self.arch.family} model{hint}; "
            f"reads look like {valid[1]!r}, 'L0.mlp.in', {self.reads[-1]!r}; resid points like "
            f"'blocks.0.hook_resid_pre' ({len(valid)} valid labels: trace.reads + trace.resid_points)"
        )

    def _directions(self, project_onto: Optional[Tensor]) -> tuple[Tensor, bool]:
        """U as [batch or 1, k, d_model] and whether it is the full identity basis."""
        d, dev, dt = self.arch.d_model, self.tokens.device, accumulate_dtype(self.weights.W_O.dtype)  # fp32 for half
        if project_onto is None:
            return torch.eye(d, device=dev, dtype=dt)[None], True
        try:
            u = torch.as_tensor(project_onto)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ShapeError(
                f"project_onto must be a float tensor [k, d_model={d}]; got {type(project_onto).__name__} ({e})"
            ) from None
        shape = tuple(u.shape)
        check_tensor_data(u, "project_onto")
        if u.is_complex() or not u.is_floating_point():
            raise ShapeError(f"project_onto must be a float tensor, got dtype {u.dtype}")
        if u.ndim == 1:
            u = u[None]
        if u.ndim == 2:
            u = u[None]
        if u.ndim != 3 or u.shape[-1] != d or u.shape[0] not in (1, self.tokens.shape[0]):
            raise ShapeError(
                f"project_onto has shape {shape}; expected [d_model={d}], [k, {d}] "
                f"or [batch={self.tokens.shape[0]}, k, {d}]"
            )
        if u.shape[1] == 0:
            raise ShapeError(f"project_onto has shape {shape}: no directions; give at least one")
        if not torch.isfinite(u).all():
            raise ArgumentError("project_onto contains NaN or inf")
        return u.to(device=dev, dtype=dt), False

    def _projected(self, read_label: str, project_onto: Optional[Tensor]) -> Decomposition:
        """The decomposition a projection-mode trace computed during its pass."""
        projected = self.projected or {}
        if read_label not in projected:
            self._find(read_label)  # a LabelError if it is no read or resid point at all
            raise LabelError(
                f"read_label={read_label!r} was not projected by this trace; it holds only "
                f"{sorted(projected)} (trace(..., project={{label: directions}})); trace "
                "again with this label in project, or without project to decompose any read"
            )
        if project_onto is not None:
            raise ArgumentError(
                "project_onto cannot be given for a trace made with project=...: it kept only "
                "the projections onto the directions given there; trace without project for others"
            )
        return projected[read_label]

    def decompose(self, read_label: str, *, project_onto: Optional[Tensor] = None) -> Decomposition:
        """Every earlier write's exact contribution to ``read_label`` (a read label or resid hook).

        Contributions are [n_terms, batch, pos, d_model], or [n_terms, batch, pos, k] when
        ``project_onto`` (or the trace's default directions) gives k directions.
        """
        if self.projected is not None:
            return self._projected(read_label, project_onto)
        idx = self._find(read_label)
        U, full = self._directions(project_onto if project_onto is not None else self.project_onto)
        acts, w, arch = self.activations, self.weights, self.arch
        b, p = self.tokens.shape
        plan = plan_walk(arch, w, self.program, idx, U)
        S = scale_chain([sigma(acts[h], arch, U.dtype) for h in plan.norm_hooks], b, p, U)
        # each term is computed only when it is written into the preallocated result (fill), so the
        # full decomposition is never held twice
        terms = [(lambda t=t: project_term(t, acts.get(t.hook), w, b, p)) for t in plan.terms]
        local = {h: sigma(acts[h], arch, U.dtype) for h in plan.local_hooks}
        contributions = fill(plan, terms, S, b, p, in_place=True, local=local)
        actual = acts[plan.total_hook].to(U.dtype)
        total = actual if full else torch.einsum("bpd,bkd->bpk", actual, plan.U0)
        labels = plan.labels
        return Decomposition.build(
            point=read_label,
            labels=labels,
            contributions=contributions,
            total=total,
            attention_mask=self.attention_mask,
            str_tokens=self.str_tokens,
            directions=None if full else plan.U0,
            default_pos=-1 if arch.causal else "mean",
        )


def project_each(
    tr: ResidualTrace, read_label: str, directions: Tensor
) -> tuple[list[str], Float[Tensor, "term batch pos"], Float[Tensor, "batch pos"]]:
    """Each earlier write's term in ``read_label`` projected, at each position, on that position's own direction:
    ``directions`` [batch, pos, d_model] (u_{b,t}). Returns (labels, contributions [n_terms, batch, pos], total
    [batch, pos]) — the diagonal (position t, direction t) of ``tr.decompose(read_label, project_onto=directions)``,
    computed without forming the others: term_j · u_{b,t} at (b, t), the same walk and scales."""
    if tr.projected is not None:
        raise ArgumentError("project_each needs a full trace (this one was made with project=...)")
    idx = tr._find(read_label)
    U, _ = tr._directions(directions)
    b, p = tr.tokens.shape
    if U.shape[1] != p:
        raise ShapeError(f"directions has {U.shape[1]} positions; the trace has {p} (one direction per position)")
    acts, w, arch = tr.activations, tr.weights, tr.arch
    plan = plan_walk(arch, w, tr.program, idx, U)
    S = scale_chain([sigma(acts[h], arch, U.dtype) for h in plan.norm_hooks], b, p, U)  # [b, p, 1] each
    local = {h: sigma(acts[h], arch, U.dtype) for h in plan.local_hooks}
    out = torch.empty(len(plan.labels), b, p, dtype=U.dtype, device=U.device)
    i = 0
    for t in plan.terms:  # the arithmetic of fill(): projection · S_j (a sandwich-normed term also / σ')
        s = (S[t.stage] if t.local is None else S[t.stage] / local[t.local])[..., 0]
        n = len(t.labels)
        out[i : i + n] = project_term(t, acts.get(t.hook or ""), w, b, p, each=True) * s
        i += n
    total = torch.einsum("bpd,bpd->bp", acts[plan.total_hook].to(U.dtype), U.expand(b, -1, -1))
    return plan.labels, out, total


def trace(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    attention_mask: Optional[Tensor] = None,
    neurons: Union[bool, Sequence[int]] = False,
    project_onto: Optional[Tensor] = None,
    project: Optional[Mapping[str, Tensor]] = None,
    keep: Sequence[str] = (),
) -> ResidualTrace:
    """Run ``model`` once on ``inputs`` (the engine's forward) and return a :class:`ResidualTrace`.

    ``neurons``: True (every layer) or a list of layers whose MLP writes split into neurons.
    ``project_onto``: default directions [k, d_model] for every ``decompose`` of this trace.
    ``project``: {read label: directions [k, d_model] or [batch, k, d_model]}: projection mode —
    each write is projected on those directions as the pass produces it and no activation is
    kept (memory ≈ a plain forward pass); ``decompose`` then serves exactly these reads, with the
    numbers a full trace would give.
    ``keep``: attention internals to keep as well, any of "patterns", "q", "k", "v" (the trace's
    :attr:`~ResidualTrace.patterns` [n_layers, batch, n_heads, pos, pos], ``q``/``k``/``v``
    [n_layers, batch, pos, heads, d_head]); patterns cost n_layers · batch · n_heads · pos² floats.
    """
    require_model(model)
    arch = model.arch
    batch: Batch = as_batch(model, inputs, attention_mask)
    if neurons is True:
        neuron_layers: tuple[int, ...] = tuple(range(arch.n_layers))
    elif neurons is False or neurons is None:
        neuron_layers = ()
    else:
        try:
            if isinstance(neurons, (str, bytes)) or not all(is_index(l) for l in neurons):
                raise TypeError
            neuron_layers = tuple(operator.index(l) for l in neurons)
        except TypeError:
            raise ArgumentError(
                f"neurons={neurons!r} must be True, False or a list of layer indices in [0, {arch.n_layers - 1}]"
            ) from None
        bad = [l for l in neuron_layers if not 0 <= l < arch.n_layers]
        if bad:
            raise ArgumentError(f"neurons={list(neurons)!r} has layers {bad} outside [0, {arch.n_layers - 1}]")
    if neuron_layers and not describe_block(arch).has_mlp:
        raise ArgumentError(f"neurons={neurons!r}: model {model.name!r} is attention-only (no MLP neurons)")
    if neuron_layers:  # a mixture of experts' neurons are its experts', scaled by the router: not split yet
        require_capabilities(model, f"trace(neurons={neurons!r})", "experts")
    has_types = model.weights.W_type is not None
    # [batch, pos] ids: one list of strings per prompt
    str_tokens = cast(list[list[str]], model.to_str_tokens(batch.tokens)) if model.tokenizer is not None else None
    keep = check_keep(keep)
    if project is not None:
        if keep:
            raise ArgumentError(
                f"keep={keep!r} is not available with project=... (projection mode keeps no "
                "activation); trace without project to keep attention internals"
            )
        return _trace_projected(model, batch, project, project_onto, neuron_layers, has_types, str_tokens)
    kept = keep_hooks(model, keep) if keep else None
    names = capture_names(arch, neuron_layers=neuron_layers, has_types=has_types)
    names += [h for hooks in (kept or {}).values() for h in hooks]
    acts, logits = read_forward(model, batch.tokens, batch.attention_mask, dict.fromkeys(names), logits=True)
    tr = ResidualTrace(
        arch=arch,
        tokens=batch.tokens,
        attention_mask=batch.attention_mask,
        str_tokens=str_tokens,
        activations=acts,
        weights=model.weights,
        neuron_layers=neuron_layers,
        logits=logits,
        has_types=has_types,
        kept=kept,
    )
    if project_onto is not None:
        tr._directions(project_onto)  # validate now, not at the first decompose
        object.__setattr__(tr, "project_onto", project_onto)
    return tr


def _trace_projected(
    model: Model,
    batch: Batch,
    project: Any,
    project_onto: Any,
    neuron_layers: tuple[int, ...],
    has_types: bool,
    str_tokens: Any,
) -> ResidualTrace:
    """trace(..., project=...): validate, plan every read's walk, project during the pass."""
    if project_onto is not None:
        raise ArgumentError(
            "give project_onto (default directions of a full trace) or project (projection mode), not both"
        )
    if not isinstance(project, Mapping) or not project:
        raise ArgumentError(f"project={project!r:.80} must be a non-empty dict {{read label: directions [k, d_model]}}")
    tr = ResidualTrace(
        arch=model.arch,
        tokens=batch.tokens,
        attention_mask=batch.attention_mask,
        str_tokens=str_tokens,
        activations={},
        weights=model.weights,
        neuron_layers=neuron_layers,
        has_types=has_types,
    )
    prog = tr.program
    plans = {}
    for label, directions in project.items():
        idx = tr._find(label)
        if directions is None:
            raise ShapeError(f"project[{label!r}] is None; give directions [k, d_model={model.arch.d_model}]")
        U, _ = tr._directions(directions)
        plans[label] = plan_walk(model.arch, model.weights, prog, idx, U)
    decs, logits = capture_projected(model, batch, plans, str_tokens)
    object.__setattr__(tr, "projected", decs)
    object.__setattr__(tr, "logits", logits)
    return tr
