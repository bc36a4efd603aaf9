"""The backward walk behind every decomposition, split into what the weights fix and what a pass gives.

Walking the block program backwards from a read R with directions U (see :mod:`interp.stream._trace`)
changes U only at norms, by weights alone (U ← C Γ U), so *which direction each write is projected
on* is known before any forward pass. What a pass adds is the activations and, at each norm, the
per-token scale σ. Hence a term is

    term_w = (w · U_w) · S_j,     S_0 = 1,  S_{j+1} = S_j / σ_j     (σ_j: the j-th norm met walking back)

and the walk is planned once as a list of :class:`Term` (labels, the hook whose activation is
projected, U_w, j) plus the norms' input hooks. :meth:`ResidualTrace.decompose` evaluates a plan on
captured activations; ``trace(..., project=...)`` evaluates each projection w · U_w inside the
forward pass, as the activation is produced, and keeps only σ and the [.., batch, pos, k] results.
Both use :func:`project_term` and :func:`scale_chain`, so they give the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from interp._norms import frozen_direction, norm_scale
from interp.errors import ArgumentError, LabelError, UnsupportedArchitectureError
from interp.labels import Head, Neuron, Norm, NormBias
from interp.models import ArchInfo, Weights, describe_block
from interp.models.internal import Event, norm_hook

__all__ = ["Term", "Plan", "plan_walk", "project_term", "sigma", "scale_chain", "fill", "norm_params", "total_hook"]


def _block_norm(norm_id: str) -> tuple[int, str]:
    """(layer, "1" | "2") of a block norm id ``L{l}.ln1`` / ``L{l}.ln2``."""
    try:
        lab = Norm.parse(norm_id)
    except LabelError:
        lab = None
    if lab is None or lab.layer is None:
        raise LabelError(f"norm id {norm_id!r} is not 'final', 'embed_ln', 'L{{layer}}.ln1' or 'L{{layer}}.ln2'")
    return lab.layer, lab.which[-1]


def _norm_bias_label(norm_id: str) -> str:
    """The β term of norm id ``norm_id`` (``final`` → ``final_bias``, ``L3.ln1`` → ``L3.ln1_bias``)."""
    norm = Norm(None, "final") if norm_id == "final" else Norm.parse(norm_id)
    return str(NormBias(norm))


def norm_params(w: Weights, arch: ArchInfo, norm_id: str) -> tuple[Tensor, Optional[Tensor], str]:
    """(γ, β or None, hook name of the norm's input) for a norm id."""
    gamma: Optional[Tensor]
    beta: Optional[Tensor]
    if norm_id == "final":
        gamma, beta, hook = w.lnf_w, w.lnf_b, "ln_final.hook_in"
    elif norm_id == "embed_ln":
        gamma, beta, hook = w.ln_emb_w, w.ln_emb_b, "embed_ln.hook_in"
    else:
        l, which = _block_norm(norm_id)
        g, b = (w.ln1_w, w.ln1_b) if which == "1" else (w.ln2_w, w.ln2_b)
        gamma, beta, hook = g[l], b[l], f"{norm_hook(arch, l, which)}.hook_in"
    if gamma is None:
        raise UnsupportedArchitectureError(f"model {arch.name!r}: the weights have no gain for norm {norm_id!r}")
    return gamma, beta, hook


def _norm_output_hook(arch: ArchInfo, norm_id: str) -> str:
    if norm_id == "final":
        return "ln_final.hook_out"
    if norm_id == "embed_ln":
        return "embed_ln.hook_out"
    l, which = _block_norm(norm_id)
    return f"{norm_hook(arch, l, which)}.hook_out"


def total_hook(arch: ArchInfo, ev: Event) -> str:
    """The hook holding the model's own tensor at a read or resid point."""
    post = describe_block(arch).normed_stream
    if ev.kind == "resid":
        if post and ev.label.endswith("hook_resid_mid"):
            return f"blocks.{ev.layer}.ln1.hook_out"  # x_mid = N1(x + attn)
        return ev.label
    if ev.norm is not None:
        return _norm_output_hook(arch, ev.norm)
    last = arch.n_layers - 1
    if ev.label in ("final", "unembed"):
        return f"blocks.{last}.hook_resid_post"
    if ".attn." in ev.label:
        return f"blocks.{ev.layer}.hook_resid_pre"
    # mlp.in without a pre-norm
    return f"blocks.{ev.layer}.ln1.hook_out" if post else f"blocks.{ev.layer}.hook_resid_mid"


@dataclass(frozen=True, eq=False)
class Term:
    """One block of terms: ``labels`` (several for heads / neurons of a layer), how to project,
    the directions U [b|1, k, d_model] at this write and the number of norms between it and the read."""

    labels: list[str]
    kind: str  # "bias" | "heads" | "neurons" | "stream"
    hook: Optional[str]  # the activation projected (None for a bias)
    U: Tensor
    stage: int
    layer: int = -1
    vector: Optional[Tensor] = None  # the bias, for kind "bias"
    local: Optional[str] = None  # sandwich norms: the input hook of the norm on this sublayer's output only


@dataclass(frozen=True, eq=False)
class Plan:
    """The walk from one read: its terms in stream order, the input hooks of the norms met walking
    back (σ_0, σ_1, ...), the hook of the model's own tensor there, and the read's directions U0."""

    terms: list[Term]
    norm_hooks: list[str]
    total_hook: str
    U0: Tensor

    @property
    def labels(self) -> list[str]:
        return [lab for t in self.terms for lab in t.labels]

    @property
    def local_hooks(self) -> list[str]:
        """Input hooks of the sandwich norms some terms pass (each divides only its own sublayer's terms)."""
        return list(dict.fromkeys(t.local for t in self.terms if t.local is not None))


def plan_walk(arch: ArchInfo, w: Weights, prog: list[Event], idx: int, U: Tensor) -> Plan:
    """Walk ``prog`` backwards from event ``idx`` carrying U through every norm on the way."""
    U0 = U
    target = prog[idx]
    terms: list[Term] = []  # reverse stream order
    norm_hooks: list[str] = []

    def add(
        labels: list[str],
        kind: str,
        hook: Optional[str],
        layer: int = -1,
        vector: Optional[Tensor] = None,
        sub: str = "",
    ):
        sandwich = _sandwich(w, arch, sub, layer)
        if sandwich is None:
            terms.append(Term(labels, kind, hook, U, len(norm_hooks), layer, vector))
        else:  # the sublayer's output passes its own norm before it is added: U ← Γ' U, and 1/σ' on it alone
            gamma, local = sandwich
            terms.append(
                Term(labels, kind, hook, frozen_direction(U, gamma, arch.norm), len(norm_hooks), layer, vector, local)
            )

    def pass_norm(norm_id: str, bias_label: str) -> None:
        nonlocal U
        gamma, beta, in_hook = norm_params(w, arch, norm_id)
        if arch.norm == "layernorm" and beta is not None:  # a LayerNorm without bias adds nothing
            add([bias_label], "bias", None, vector=beta)
        norm_hooks.append(in_hook)
        U = frozen_direction(U, gamma, arch.norm)

    if target.kind == "read" and target.norm is not None:
        pass_norm(target.norm, _norm_bias_label(target.norm))
    for ev in reversed(prog[:idx]):
        if ev.kind != "write":
            continue  # a post-norm is handled through its bias write, which directly follows it
        sub, l = ev.sub, ev.layer
        if sub == "norm_bias" and ev.norm is not None:
            pass_norm(ev.norm, ev.label)
        elif sub == "head":
            if ev.head == arch.n_heads - 1:  # all heads of a layer at once, at the last head
                add([str(Head(l, h)) for h in range(arch.n_heads)], "heads", f"blocks.{l}.attn.hook_z", l, sub=sub)
        elif sub == "attn_bias":
            add([ev.label], "bias", None, l, w.b_O[l], sub=sub)
        elif sub == "mlp":
            add([ev.label], "stream", f"blocks.{l}.hook_mlp_out", l)
        elif sub == "mlp_bias":
            add([ev.label], "bias", None, l, w.b_out[l], sub=sub)
        elif sub == "neuron":
            if ev.head == arch.d_mlp - 1:
                add(
                    [str(Neuron(l, n)) for n in range(arch.d_mlp)], "neurons", f"blocks.{l}.mlp.out.hook_in", l, sub=sub
                )
        else:  # embed, pos_embed, type_embed
            hook = {
                "embed": "embed.hook_out",
                "pos_embed": "pos_embed.hook_out",
                "type_embed": "token_type_embed.hook_out",
            }[sub]
            add([ev.label], "stream", hook)
    terms.reverse()
    return Plan(terms=terms, norm_hooks=norm_hooks, total_hook=total_hook(arch, target), U0=U0)


def _sandwich(w: Weights, arch: ArchInfo, sub: str, layer: int) -> Optional[tuple[Tensor, str]]:
    """(γ', input hook) of the sandwich norm a write of block ``layer`` passes before it is added (Gemma 2/3:
    x_mid = x + N1'(Attn(N1(x))), x_out = x_mid + N2'(MLP(N2(x_mid)))), or None. Frozen at its σ', N' is linear,
    so each head's (each neuron's, each bias's) write is its image γ' ⊙ write / σ' — exact for that pass.
    ``sub`` is the write's kind in the block program; an MLP's whole write (hook_mlp_out) is its normed output
    already, and embeddings and norm biases pass no sandwich norm."""
    if sub not in ("head", "attn_bias", "neuron", "mlp_bias"):
        return None
    attn = sub in ("head", "attn_bias")
    norm = describe_block(arch).out_norm("attn" if attn else "mlp")  # "ln1_post" / "ln2_post", or None
    if norm is None:
        return None
    gamma = w.ln1_post_w if attn else w.ln2_post_w
    if gamma is None:
        raise UnsupportedArchitectureError(f"model {arch.name!r} has sandwich norms but no post-sublayer gains")
    return gamma[layer], f"blocks.{layer}.{norm}.hook_in"


def project_term(t: Term, x: Optional[Tensor], w: Weights, b: int, p: int, *, each: bool = False) -> Tensor:
    """w · U for one term, before the norm scales: [n, b, p, k] (heads / neurons), [b, p, k]
    (a stream activation) or [b|1, 1, k] (a bias). ``x`` is the term's captured activation.
    ``each``: U [b, p, d] holds one direction per position, each projected at its own position only —
    [n, b, p], [b, p] or [b|1, p] (the diagonal of the k = p projection, never formed)."""
    U = t.U
    if t.kind == "bias":
        # a bias has its vector
        if each:
            return torch.einsum("d,bpd->bp", t.vector.to(U.dtype), U)  # type: ignore[union-attr]
        return torch.einsum("d,bkd->bk", t.vector.to(U.dtype), U)[:, None, :]  # type: ignore[union-attr]
    if x is None:
        raise ArgumentError(f"term {t.labels[0]!r} needs the activation captured at {t.hook!r}")
    if t.kind == "heads":
        z = x.to(U.dtype)  # [b, p, H, dh]
        WOU = torch.einsum("hed,bkd->bhek", w.W_O[t.layer].to(U.dtype), U)  # [b|1, H, dh, k]
        if each:
            return torch.einsum("bphe,bhep->hbp", z, WOU.expand(b, -1, -1, -1))
        return torch.einsum("bphe,bhek->hbpk", z, WOU.expand(b, -1, -1, -1))
    if t.kind == "neurons":
        a = x.to(U.dtype)  # [b, p, d_mlp]
        WU = torch.einsum("nd,bkd->bnk", w.W_out[t.layer].to(U.dtype), U)  # [b|1, d_mlp, k]
        if each:
            return torch.einsum("bpn,bnp->nbp", a, WU.expand(b, -1, -1))
        return torch.einsum("bpn,bnk->nbpk", a, WU.expand(b, -1, -1))
    if each:
        return torch.einsum("bpd,bpd->bp", x.to(U.dtype).expand(b, p, -1), U.expand(b, -1, -1))
    return torch.einsum("bpd,bkd->bpk", x.to(U.dtype).expand(b, p, -1), U)


def sigma(x: Tensor, arch: ArchInfo, dtype: torch.dtype) -> Tensor:
    """The frozen scale σ [b, p, 1] of a norm whose input is ``x``."""
    return norm_scale(x, arch.norm, arch.norm_eps).to(dtype)


def scale_chain(sigmas: list[Tensor], b: int, p: int, like: Tensor) -> list[Tensor]:
    """[S_0, S_1, ...]: S_0 = 1 [b, p, 1], S_{j+1} = S_j / σ_j."""
    S = [torch.ones(b, p, 1, dtype=like.dtype, device=like.device)]
    for s in sigmas:
        S.append(S[-1] / s)
    return S


def fill(
    plan: Plan,
    projected: list[Any],
    S: list[Tensor],
    b: int,
    p: int,
    *,
    in_place: bool,
    local: Optional[dict[str, Tensor]] = None,
) -> Tensor:
    """The [n_terms, b, p, k] contributions: each term's projection times its S_j, written straight
    into one preallocated tensor. ``projected[i]`` is term i's projection (or a callable giving it,
    so a full-basis decomposition never holds two [n, b, p, d_model] blocks at once)."""
    U0 = plan.U0
    out = torch.empty(len(plan.labels), b, p, U0.shape[1], dtype=U0.dtype, device=U0.device)
    i = 0
    for t, proj in zip(plan.terms, projected):
        v = proj() if callable(proj) else proj
        s = S[t.stage] if t.local is None else S[t.stage] / (local or {})[t.local]
        v = v * s if (t.kind == "bias" or not in_place) else v.mul_(s)  # a bias broadcasts [b|1, 1, k]
        n = len(t.labels)
        out[i : i + n] = v if n > 1 else v[None]
        i += n
    return out
