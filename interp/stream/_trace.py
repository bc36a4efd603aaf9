"""trace(): one hooked forward pass, and exact decompositions of every read and resid point.

Algorithm (Elhage et al. 2021, "A Mathematical Framework", §2 the residual stream; DESIGN
"Math" 1–3). For a read point R and directions U [k, d_model] (the identity basis unless the
caller projects):

1. Walk the block program (:func:`interp.models.build_program`) backwards from R, carrying U and a
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
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import ArgumentError, LabelError, ShapeError
from interp.models import ArchInfo, Event, Weights, build_program, resid_hook_names
from interp.stream._capture import capture, run_forward
from interp.stream._decomposition import Decomposition
from interp.stream._inputs import Batch, as_batch, check_tensor_data, require_model
from interp._norms import frozen_direction, norm_scale

__all__ = ["ResidualTrace", "trace", "trace_at", "capture_names"]


def _norm_params(w: Weights, arch: ArchInfo, norm_id: str) -> tuple[Tensor, Tensor, str]:
    """(γ, β, hook name of the norm's input) for a norm id."""
    if norm_id == "final":
        return w.lnf_w, w.lnf_b, "ln_final.hook_in"
    if norm_id == "embed_ln":
        return w.ln_emb_w, w.ln_emb_b, "embed_ln.hook_in"
    m = re.fullmatch(r"L(\d+)\.ln([12])", norm_id)
    l, which = int(m.group(1)), m.group(2)
    if which == "1":
        return w.ln1_w[l], w.ln1_b[l], f"blocks.{l}.ln1.hook_in"
    return w.ln2_w[l], w.ln2_b[l], f"blocks.{l}.ln2.hook_in"


def _norm_output_hook(norm_id: str) -> str:
    if norm_id == "final":
        return "ln_final.hook_out"
    if norm_id == "embed_ln":
        return "embed_ln.hook_out"
    l, which = re.fullmatch(r"L(\d+)\.ln([12])", norm_id).groups()
    return f"blocks.{l}.ln{which}.hook_out"


def _total_hook(arch: ArchInfo, ev: Event) -> str:
    """The hook holding the model's own tensor at a read or resid point."""
    post = arch.norm_placement == "post"
    if ev.kind == "resid":
        if post and ev.label.endswith("hook_resid_mid"):
            return f"blocks.{ev.layer}.ln1.hook_out"  # x_mid = N1(x + attn)
        return ev.label
    if ev.norm is not None:
        return _norm_output_hook(ev.norm)
    last = arch.n_layers - 1
    if ev.label in ("final", "unembed"):
        return f"blocks.{last}.hook_resid_post"
    if ".attn." in ev.label:
        return f"blocks.{ev.layer}.hook_resid_pre"
    # mlp.in without a pre-norm
    return f"blocks.{ev.layer}.ln1.hook_out" if post else f"blocks.{ev.layer}.hook_resid_mid"


def capture_names(arch: ArchInfo, *, neuron_layers: Sequence[int] = (), has_types: bool = False) -> list[str]:
    """Every hook a full trace records."""
    names = ["embed.hook_out"]
    if arch.positional == "learned":
        names.append("pos_embed.hook_out")
    if has_types:
        names.append("token_type_embed.hook_out")
    post = arch.norm_placement == "post"
    if post:
        names += ["embed_ln.hook_in", "embed_ln.hook_out"]
    names += resid_hook_names(arch)
    for l in range(arch.n_layers):
        names.append(f"blocks.{l}.attn.hook_z")
        if arch.norm != "none":
            names += [f"blocks.{l}.ln1.hook_in", f"blocks.{l}.ln1.hook_out"]
            if not arch.attn_only:
                names += [f"blocks.{l}.ln2.hook_in", f"blocks.{l}.ln2.hook_out"]
        if not arch.attn_only:
            names.append(f"blocks.{l}.hook_mlp_out")
            if l in neuron_layers:
                names.append(f"blocks.{l}.mlp.out.hook_in")
    if arch.norm != "none" and not post:
        names += ["ln_final.hook_in", "ln_final.hook_out"]
    return names


@dataclass(frozen=True, eq=False)
class ResidualTrace:
    """The activations of one forward pass needed to decompose any read or resid point.

    Holds token ids, the captured activations and the model's weights (tensors only, never
    the model). ``writes`` and ``reads`` list the labels in stream order; ``decompose(label)``
    returns a :class:`Decomposition`.
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

    @property
    def program(self) -> list[Event]:
        return build_program(self.arch, neuron_layers=self.neuron_layers,
                             n_types=int("token_type_embed.hook_out" in self.activations))

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
        d, dev, dt = self.arch.d_model, self.tokens.device, self.weights.W_E.dtype
        if project_onto is None:
            return torch.eye(d, device=dev, dtype=dt)[None], True
        try:
            u = torch.as_tensor(project_onto)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ShapeError(f"project_onto must be a float tensor [k, d_model={d}]; got {type(project_onto).__name__} ({e})") from None
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

    def decompose(self, read_label: str, *, project_onto: Optional[Tensor] = None) -> Decomposition:
        """Every earlier write's exact contribution to ``read_label`` (a read label or resid hook).

        Contributions are [n_terms, batch, pos, d_model], or [n_terms, batch, pos, k] when
        ``project_onto`` (or the trace's default directions) gives k directions.
        """
        idx = self._find(read_label)
        prog = self.program
        target = prog[idx]
        U, full = self._directions(project_onto if project_onto is not None else self.project_onto)
        U0 = U  # the directions at the read itself; U is carried back through norms below
        acts, w, arch = self.activations, self.weights, self.arch
        b, p = self.tokens.shape
        S = torch.ones(b, p, 1, dtype=U.dtype, device=U.device)
        # The walk only *plans* each term (labels + a closure over the current U and S); the
        # terms are then computed straight into one preallocated [n_terms, batch, pos, k]
        # tensor, so the full decomposition is never held twice (no list + torch.stack).
        blocks: list[tuple[list[str], Any]] = []  # in reverse stream order

        def add(label: str | list[str], fn: Any) -> None:
            blocks.append(([label] if isinstance(label, str) else label, fn))

        def bias_term(vec: Tensor, U: Tensor, S: Tensor) -> Tensor:  # [b|1, 1, k] * [b, p, 1]
            return torch.einsum("d,bkd->bk", vec, U)[:, None, :] * S

        def pass_norm(norm_id: str, bias_label: str) -> None:
            nonlocal U, S
            gamma, beta, in_hook = _norm_params(w, arch, norm_id)
            if arch.norm == "layernorm":
                add(bias_label, lambda beta=beta, U=U, S=S: bias_term(beta, U, S))
            sigma = norm_scale(acts[in_hook], arch.norm, arch.norm_eps).to(U.dtype)
            U = frozen_direction(U, gamma, arch.norm)
            S = S / sigma

        def heads(l: int, U: Tensor, S: Tensor) -> Tensor:
            z = acts[f"blocks.{l}.attn.hook_z"].to(U.dtype)  # [b, p, H, dh]
            WOU = torch.einsum("hed,bkd->bhek", w.W_O[l], U)  # [b|1, H, dh, k]
            return torch.einsum("bphe,bhek->hbpk", z, WOU.expand(b, -1, -1, -1)).mul_(S)

        def neurons(l: int, U: Tensor, S: Tensor) -> Tensor:
            a = acts[f"blocks.{l}.mlp.out.hook_in"].to(U.dtype)  # [b, p, d_mlp]
            WU = torch.einsum("nd,bkd->bnk", w.W_out[l], U)  # [b|1, d_mlp, k]
            return torch.einsum("bpn,bnk->nbpk", a, WU.expand(b, -1, -1)).mul_(S)

        def stream_term(hook: str, U: Tensor, S: Tensor) -> Tensor:
            x = acts[hook].to(U.dtype).expand(b, p, -1)
            return torch.einsum("bpd,bkd->bpk", x, U).mul_(S)

        if target.kind == "read" and target.norm is not None:
            pass_norm(target.norm, "final_bias" if target.norm == "final" else f"{target.norm}_bias")

        for ev in reversed(prog[:idx]):
            if ev.kind == "norm":
                continue  # handled through its bias write, which directly follows it
            if ev.kind != "write":
                continue
            sub, l = ev.sub, ev.layer
            if sub == "norm_bias":
                pass_norm(ev.norm, ev.label)
            elif sub == "head":
                if ev.head != arch.n_heads - 1:
                    continue  # all heads of a layer are added at once, at the last head
                add([f"L{l}.H{h}" for h in range(arch.n_heads)], lambda l=l, U=U, S=S: heads(l, U, S))
            elif sub == "attn_bias":
                add(ev.label, lambda l=l, U=U, S=S: bias_term(w.b_O[l], U, S))
            elif sub == "mlp":
                add(ev.label, lambda l=l, U=U, S=S: stream_term(f"blocks.{l}.hook_mlp_out", U, S))
            elif sub == "mlp_bias":
                add(ev.label, lambda l=l, U=U, S=S: bias_term(w.b_out[l], U, S))
            elif sub == "neuron":
                if ev.head != arch.d_mlp - 1:
                    continue
                add([f"L{l}.N{n}" for n in range(arch.d_mlp)], lambda l=l, U=U, S=S: neurons(l, U, S))
            else:  # embed, pos_embed, type_embed
                hook = {"embed": "embed.hook_out", "pos_embed": "pos_embed.hook_out",
                        "type_embed": "token_type_embed.hook_out"}[sub]
                add(ev.label, lambda hook=hook, U=U, S=S: stream_term(hook, U, S))

        blocks.reverse()
        labels = [lab for labs, _ in blocks for lab in labs]
        contributions = torch.empty(len(labels), b, p, U0.shape[1], dtype=U0.dtype, device=U0.device)
        i = 0
        for labs, fn in blocks:
            n = len(labs)
            contributions[i:i + n] = fn() if n > 1 else fn()[None]  # broadcasts [b|1, p|1, k]
            i += n
        actual = acts[_total_hook(arch, target)].to(U.dtype)
        total = actual if full else torch.einsum("bpd,bkd->bpk", actual, U0)
        return Decomposition.build(
            point=read_label, labels=labels, contributions=contributions, total=total,
            attention_mask=self.attention_mask, str_tokens=self.str_tokens,
            directions=None if full else U0,
        )


def trace(
    model: Any,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    attention_mask: Optional[Tensor] = None,
    neurons: Union[bool, Sequence[int]] = False,
    project_onto: Optional[Tensor] = None,
) -> ResidualTrace:
    """Run ``model`` once on ``inputs`` with capture hooks and return a :class:`ResidualTrace`.

    ``neurons``: True (every layer) or a list of layers whose MLP writes split into neurons.
    ``project_onto``: default directions [k, d_model] for every ``decompose`` of this trace.
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
            if isinstance(neurons, (str, bytes)) or any(isinstance(l, bool) for l in neurons):
                raise TypeError
            neuron_layers = tuple(operator.index(l) for l in neurons)
        except TypeError:
            raise ArgumentError(
                f"neurons={neurons!r} must be True, False or a list of layer indices in [0, {arch.n_layers - 1}]"
            ) from None
        bad = [l for l in neuron_layers if not 0 <= l < arch.n_layers]
        if bad:
            raise ArgumentError(f"neurons={list(neurons)!r} has layers {bad} outside [0, {arch.n_layers - 1}]")
    if neuron_layers and arch.attn_only:
        raise ArgumentError(f"neurons={neurons!r}: model {model.name!r} is attention-only (no MLP neurons)")
    has_types = "token_type_embed.hook_out" in model.bridge.hook_dict
    names = capture_names(arch, neuron_layers=neuron_layers, has_types=has_types)
    acts, logits = capture(model, batch, names)
    str_tokens = model.to_str_tokens(batch.tokens) if model.tokenizer is not None else None
    tr = ResidualTrace(
        arch=arch, tokens=batch.tokens, attention_mask=batch.attention_mask, str_tokens=str_tokens,
        activations=acts, weights=model.weights, neuron_layers=neuron_layers,
        logits=logits if torch.is_tensor(logits) else None,
    )
    if project_onto is not None:
        tr._directions(project_onto)  # validate now, not at the first decompose
        object.__setattr__(tr, "project_onto", project_onto)
    return tr


class _StopForward(Exception):
    """Raised inside a hook to end the forward pass once everything needed is captured."""


def trace_at(
    model: Any,
    batch: Batch,
    positions: Int[Tensor, "batch"],
    *,
    neuron_layers: Sequence[int] = (),
    stop_before_unembed: bool = False,
) -> ResidualTrace:
    """A :class:`ResidualTrace` holding only one position per prompt (pos axis of length 1).

    Every captured activation is gathered at ``positions[b]`` as it is produced, so memory is
    O(n_layers · batch · d_model). With ``stop_before_unembed`` (pre-norm decoders) the forward
    pass ends at the final norm's input — the full-vocabulary unembedding at every position is
    never computed — and the final norm's output at the kept positions is recomputed with the
    model's own ``ln_final`` module (bitwise what the full pass would give).
    """
    arch = model.arch
    has_types = "token_type_embed.hook_out" in model.bridge.hook_dict
    names = capture_names(arch, neuron_layers=neuron_layers, has_types=has_types)
    rows = torch.arange(batch.tokens.shape[0], device=batch.tokens.device)
    positions = positions.to(batch.tokens.device)

    def at_pos(x: Tensor) -> Tensor:
        if x.shape[0] == 1 and rows.numel() > 1:
            x = x.expand(rows.numel(), *x.shape[1:])
        return x[rows, positions][:, None].clone()

    stop = stop_before_unembed and arch.norm != "none" and arch.has_logits
    if stop:
        names = [n for n in names if n != "ln_final.hook_out"]
    store: dict[str, Tensor] = {}

    def grab(name: str):
        def hook(x: Tensor, hook: Any = None) -> Tensor:
            store[name] = at_pos(x.detach())
            if stop and name == "ln_final.hook_in":
                raise _StopForward
            return x

        return hook

    hooks = [(n, grab(n)) for n in dict.fromkeys(names)]
    logits = None
    try:
        out = run_forward(model, batch, hooks)
        logits = out[rows, positions][:, None] if torch.is_tensor(out) else None
    except _StopForward:
        with torch.inference_mode():
            store["ln_final.hook_out"] = model.bridge.ln_final(store["ln_final.hook_in"])
    tokens = batch.tokens[rows, positions][:, None]
    return ResidualTrace(
        arch=arch, tokens=tokens, attention_mask=torch.ones_like(tokens), str_tokens=None,
        activations=store, weights=model.weights, neuron_layers=tuple(neuron_layers), logits=logits,
    )
