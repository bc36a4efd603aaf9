"""Interventions on transcoder features: clamp, scale or ablate features and rerun the prompt.

An intervention replaces chosen activations f_{l,p,i} of layer l's transcoder, f = act(h2 W_encᵀ + b_enc) with h2
the MLP's input, by a value (clamp; 0 = ablate) or multiplies them by a factor (scale). The rerun has one of four
regimes (:data:`REGIMES`), two choices:

* ``freeze_features=False`` (default): the real MLPs rerun on their (changed) inputs h2' and each intervened
  feature's change is added to its MLP's write,  m' = MLP(h2') + (f̃(h2') − f(h2')) W_dec  (f̃: f with the
  intervention applied), so every later MLP responds as the model does. ``True``: every other feature and error
  node keeps its real value, m' = f̃_real W_dec + b_dec (+ h2' W_skipᵀ) + e — the attribution graph's
  replacement model;
* ``frozen_attention=True`` (default): every attention pattern and norm scale σ frozen at the real forward (the
  graph's linear model: with frozen features, Δoutput = Σ_i Δf_i / f_i · edge(f_i → output) exactly), or False:
  recomputed (the engine's forward with the MLP writes changed).

Without an intervention every regime is the real forward; that is checked on every call (``closure_error``,
against :data:`CLOSURE_TOLERANCE`; past it :class:`ClosureWarning`). Rerunning the transcoders themselves with the
error nodes held (m' = T(h2') + e) is not a regime: it carries every perturbation, rounding included, through the
transcoders' Jacobians with σ frozen and TopK selections flipping, and exploded on real models (docs/math.md §28).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, check_positive_int
from interp.attribution.internal import TokenSpec
from interp.engine import readout
from interp.errors import warn_user
from interp.features._intervention import (
    Intervention,
    _apply,
    _interventions,
)
from interp.features._prompt import one_prompt, output_tokens, position, token_text
from interp.features._replacement import RealRun, check_replaceable, real_forward
from interp.dictionaries import CrossLayerTranscoder, DictionarySet, Transcoder
from interp.features._warnings import ClosureWarning, InactiveFeatureWarning, RegimeWarning
from interp.models import Model
from interp.stream.internal import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "CLOSURE_TOLERANCE",
    "LIVE_AGREEMENT",
    "REGIMES",
    "InterventionResult",
    "check_closure",
    "check_live",
    "intervene",
]

#: (freeze_features, frozen_attention) → the regime's name and what it holds fixed (docs/math.md §28)
REGIMES = {
    (True, True): (
        "graph",
        "every other feature and error node frozen, attention patterns and norm scales frozen: "
        "the attribution graph's linear model (Δ = Σ Δf/f · edge)",
    ),
    (True, False): ("frozen features", "every other feature and error node frozen, attention and norms recomputed"),
    (False, True): (
        "frozen attention",
        "the real MLPs rerun, each intervened feature's change added to its MLP's "
        "write; attention patterns and norm scales frozen",
    ),
    (False, False): (
        "live",
        "the real model rerun, each intervened feature's change added to its MLP's write; "
        "attention and norms recomputed",
    ),
}

#: the largest closure error max|logit_rerun − logit_real| / max|logit_real| an unintervened rerun may have, by the
#: dtype the model runs in (rounding only: every regime reproduces the model exactly at the real activations)
CLOSURE_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


def _run(
    real: RealRun,
    tokens: Tensor,
    mask: Tensor,
    ivs: list[Intervention],
    pos: int,
    *,
    frozen_attention: bool,
    freeze_features: bool,
) -> Tensor:
    """The rerun's logits [d_vocab] at ``pos`` with ``ivs`` applied, in the regime the flags name (module
    docstring, :data:`REGIMES`)."""
    fr, e, ds = real.frozen, real.frozen.e, real.dictionaries
    L = len(real.tcs)
    by = [[it for it in ivs if it.layer == l] for l in range(L)]
    # a layer's write changes where one of the features writing to it is intervened on (a CLT's: of any layer k ≤ l)
    touched = [any(by[k] for k in ds.writers(l)) for l in range(L)]
    dfs: list[Optional[Tensor]] = [None] * L  # the intervened activation changes Δf_k [n, F], as this run meets them
    e_dt = e.w.W_E.dtype

    def delta(l: int, h2: Tensor) -> Tensor:  # the intervened features' change of layer l's write, [n, d]
        f = real.tcs[l].encode(h2)
        if by[l]:
            dfs[l] = _apply(f, by[l]) - f
        changes = ((k, dfs[k]) for k in ds.writers(l))
        return sum((df @ ds.decoder(k, l) for k, df in changes if df is not None), torch.zeros_like(h2))

    def write(l: int, h2: Tensor) -> Tensor:  # h2 [n, d] (this run's MLP input) -> layer l's MLP write [n, d]
        tc = real.tcs[l]
        if freeze_features:  # the graph's leaf: Σ_k (real activations, intervened) W_dec[k → l] + b_dec + skip + e_l
            acts = (_apply(real.dense(k), by[k]) @ ds.decoder(k, l) for k in ds.writers(l))
            return sum(acts, torch.zeros_like(h2)) + tc.b_dec + tc.skip(h2) + real.errs[l]
        m = e.joined(l, e.mlp(l, h2.to(e_dt)), "mlp").to(real.dtype)  # the real MLP on this run's input
        return m + delta(l, h2) if touched[l] else m

    def live(l: int, h2: Tensor) -> Optional[Tensor]:  # the live rerun's change of the real write (None: unchanged)
        return delta(l, h2[0])[None] if touched[l] else None

    with torch.no_grad():
        if frozen_attention:
            x = real.rerun(tokens, mask, lambda l, h2: write(l, h2[0])[None], frozen_attention=True)
            scale: Optional[Tensor] = fr.s_final[pos]  # the final norm's σ frozen at the real forward
        else:
            one = (lambda l, h2: write(l, h2[0])[None]) if freeze_features else live
            x = real.rerun(tokens, mask, one, frozen_attention=False, add=not freeze_features)
            x, scale = x.to(real.dtype), None  # the final norm recomputed, in the replacement model's dtype
        return readout(e.model, x[0, pos], scale=scale, weights=fr.w)


def intervene(
    model: Model,
    prompt: Union[str, Tensor],
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    interventions: Any,
    *,
    frozen_attention: bool = True,
    freeze_features: bool = False,
    target: Optional[TokenSpec] = None,
    wrong: Optional[TokenSpec] = None,
    pos: int = -1,
    top_k: int = 10,
) -> "InterventionResult":
    """Rerun ``prompt`` with ``interventions`` applied to transcoder features; the logits at ``pos`` before and after
    (module docstring; docs/math.md §28).

    ``interventions``: :class:`Intervention` objects (:meth:`Intervention.clamp`, :meth:`~Intervention.scale`,
    :meth:`~Intervention.ablate`), circuit-tracer-style tuples ``(layer, pos, feature, value)`` (clamp; pos
    None = every position), or feature labels ``"L3.F12@5"`` / ``"L3.F12@*"`` (every position) (ablate).
    ``freeze_features=False`` (default): the real MLPs rerun on their (changed) inputs and each intervened feature's
    change Δf·W_dec is added to its MLP's write — with no intervention this is the model itself. ``True``: every
    other feature and error node keeps its real value (the graph's replacement model; with ``frozen_attention`` the
    change is exactly Σ Δf/f · edge). ``frozen_attention``: attention patterns and norm scales frozen at the real
    forward (True) or recomputed (False). The result's ``regime`` names the combination (:data:`REGIMES`). The
    metric is ``target``'s logit (the top token before the intervention when None), minus ``wrong``'s when given.
    The unintervened rerun is compared with the model's logits on every call: past :data:`CLOSURE_TOLERANCE` it
    warns (:class:`ClosureWarning`). The result's table holds the ``top_k`` tokens before, after and by |change|,
    and the target(s).
    """
    # 1. the inputs checked
    require_model(model)
    check_replaceable(model, transcoders)
    check_bool("frozen_attention", frozen_attention)
    check_bool("freeze_features", freeze_features)
    check_positive_int("top_k", top_k)
    tokens, mask = one_prompt(model, prompt)
    n = tokens.shape[1]
    pos = position("pos", pos, n)
    t_given, w_id = output_tokens(model, tokens, pos, target, wrong, "intervene")
    ivs = _interventions(interventions, DictionarySet.of(transcoders), n)

    # 2. the real run, and the rerun without and with the interventions (and live, when that is not the regime)
    real = real_forward(model, tokens, mask, transcoders)
    _warn_inactive(real, ivs, freeze_features)
    kw = dict(frozen_attention=frozen_attention, freeze_features=freeze_features)
    before = _run(real, tokens, mask, [], pos, **kw)  # every regime reproduces the real forward here
    after = _run(real, tokens, mask, ivs, pos, **kw)
    is_live = not (frozen_attention or freeze_features)
    live = after if is_live else _run(real, tokens, mask, ivs, pos, frozen_attention=False, freeze_features=False)

    # 3. the rerun without interventions checked against the model's own logits
    regime, held = REGIMES[(freeze_features, frozen_attention)]
    real_logits = _real_logits(model, real, pos)
    closure, scale = float((before - real_logits).abs().max()), float(real_logits.abs().max())
    relative, tol = check_closure(
        "intervene",
        closure,
        scale,
        model.dtype,
        f"without the intervention the rerun ({regime!r} regime: {held})",
        "Check the transcoders' held-out FVU (a large error node at a position is the usual cause) or run in "
        "float64 (load_model(..., dtype=torch.float64))",
    )

    # 4. the metric (the target's logit, minus wrong's), the regime's change against the live one, the table's tokens
    t_id = int(before.argmax()) if t_given is None else t_given
    ids = [t_id] + ([] if w_id is None else [w_id])

    def metric(z: Tensor) -> float:
        return float(z[t_id] - (0 if w_id is None else z[w_id]))

    if not is_live:
        what = f"{'; '.join(str(it) for it in ivs)} changes the metric"
        check_live(
            "intervene", regime, what, metric(after) - metric(before), metric(live) - metric(before), tol * scale
        )
    rows = _table_tokens(ids, before, after, top_k)
    text = token_text(model, t_id) + ("" if w_id is None else f" − {token_text(model, w_id)}")
    return InterventionResult(
        logits_before=before.detach(),
        logits_after=after.detach(),
        token_ids=rows,
        token_text=[token_text(model, i) for i in rows],
        target_ids=ids,
        target=text,
        metric_before=metric(before),
        metric_after=metric(after),
        closure_error=closure,
        relative_error=relative,
        interventions=[str(it) for it in ivs],
        frozen_attention=frozen_attention,
        freeze_features=freeze_features,
        pos=pos,
        model_name=model.name,
        regime=regime,
        closure_tolerance=tol,
        live_logits_after=live.detach().clone(),  # its own storage: the live regime passes the same tensor
    )


def _real_logits(model: Model, real: RealRun, pos: int) -> Tensor:
    """The model's own logits [d_vocab] at ``pos``, read off the real forward's final stream."""
    with torch.no_grad():
        return readout(model, real.final[pos], weights=real.frozen.w)


def check_closure(
    owner: str, closure: float, scale: float, dtype: torch.dtype, what: str, fix: str
) -> tuple[float, float]:
    """(closure / scale, the tolerance for ``dtype``: :data:`CLOSURE_TOLERANCE`); past the tolerance a
    :class:`ClosureWarning` saying that ``what`` (an unintervened rerun) is ``closure`` logits off the model's own,
    that the changes mix the intervention with that error, and ``fix``. The one closure check of every rerun that
    should reproduce the model (:func:`intervene`, :func:`interp.features.generate`)."""
    relative = closure / max(scale, torch.finfo(dtype).tiny)
    tol = CLOSURE_TOLERANCE.get(dtype, 1e-3)
    if not relative <= tol:
        warn_user(
            f"{owner}: {what} is {closure:.3g} logits off the model's own (relative {relative:.2e}, tolerance {tol:g} "
            f"for {dtype}), so its changes mix the intervention with that error. {fix}",
            ClosureWarning,
        )
    return relative, tol


#: the regime's metric change may differ from the live model's by this fraction of the live change before
#: :func:`intervene` warns (:class:`RegimeWarning`); a sign disagreement always exceeds it
LIVE_AGREEMENT = 0.5


def check_live(owner: str, regime: str, what: str, change: float, live: float, noise: float) -> bool:
    """A :class:`RegimeWarning` (and True) when ``what``'s change in ``regime`` is off the live model's by more than
    :data:`LIVE_AGREEMENT` of it (opposite signs included) and by more than the rounding the closure tolerance
    allows (``noise``, in logits). The one regime-against-live check (:func:`intervene`,
    :func:`interp.features.generate`)."""
    live_field = "live_metric_change" if owner == "intervene" else "live_first_logits"
    if not math.isfinite(change) and math.isfinite(live):
        warn_user(
            f"{owner}: {what} by {change} in the {regime!r} regime but by {live:+.4g} in the live model: the regime's "
            "run overflowed (an intervened write this large grows through the later layers, where the live model's "
            f"norms would bound it); read the live effect (the result's {live_field}), or intervene with a smaller "
            "value or at fewer positions",
            RegimeWarning,
        )
        return True
    gap = abs(change - live)
    if not (gap > noise and gap > LIVE_AGREEMENT * abs(live)):
        return False
    how = "the opposite sign" if change * live < 0 else f"{abs(change) / max(abs(live), 1e-300):.3g}× its size"
    why = {
        "graph": "the later MLPs respond and attention patterns and norm scales re-read the intervened write",
        "frozen features": "the later MLPs respond to the intervened write",
        "frozen attention": "attention patterns and norm scales re-read the intervened write",
    }[regime]
    warn_user(
        f"{owner}: {what} by {change:+.4g} in the {regime!r} regime but by {live:+.4g} in the live model ({how}): "
        f"there {why}, which this regime holds fixed. The live effect is the result's {live_field} "
        "(frozen_attention=False"
        f"{', freeze_features=False' if owner == 'intervene' else ''} runs live); filter "
        "interp.features.RegimeWarning to keep this regime's without a word",
        RegimeWarning,
    )
    return True


def _warn_inactive(real: RealRun, ivs: list[Intervention], freeze_features: bool) -> None:
    """An :class:`InactiveFeatureWarning` for each ablation or scaling of a feature whose activation is 0 at the
    position(s) it acts on in the real forward, when nothing upstream can change that activation (no intervention
    at an earlier layer, or ``freeze_features``): its change is 0 by construction."""
    for it in ivs:
        if it.mode == "set" and it.value != 0.0:
            continue  # a clamp to a value turns the feature on
        if not freeze_features and any(o.layer < it.layer for o in ivs):
            continue  # an earlier intervention changes this layer's input: the feature may fire in the rerun
        a = real.dense(it.layer)[slice(None) if it.pos is None else it.pos, it.feature]
        if bool((a == 0).all()):
            where = "at any position" if it.pos is None else f"at position {it.pos}"
            warn_user(
                f"intervene: {it} acts on feature {it.feature} of layer {it.layer}, which is not active {where} "
                f"(its activation there is 0), so {'ablating' if it.mode == 'set' else 'scaling'} it changes nothing "
                "by construction. Pick an active feature (the attribution graph's nodes, or top_activating_contexts) "
                "or clamp it to a value to turn it on",
                InactiveFeatureWarning,
            )


def _table_tokens(ids: list[int], before: Tensor, after: Tensor, top_k: int) -> list[int]:
    """The table's tokens: the target(s), then the ``top_k`` largest logits before, after and by |change|, each once
    (first appearance kept)."""
    chosen: list[int] = []
    for order in (
        before.argsort(descending=True),
        after.argsort(descending=True),
        (after - before).abs().argsort(descending=True),
    ):
        chosen += [i for i in order[:top_k].tolist()]
    return list(dict.fromkeys(ids + chosen))


@dataclass(frozen=True)
class InterventionResult(Result):
    """The output of one intervention (:func:`intervene`): ``logits_before`` / ``logits_after`` [d_vocab] at
    ``pos`` in the rerun of ``regime`` (:data:`REGIMES`; before = the real forward; ``closure_error`` is max |before −
    the real logits|, ``relative_error`` that over max |real logit|, checked against ``closure_tolerance``), the
    metric (``target``'s logit or logit difference) before and after, and beside them the live model's logits after
    the same interventions (``live_logits_after``; ``live_metric_change``). Rows of the table: the tokens
    ``token_ids`` (the target(s), then the top tokens before, after and by |change|), labelled ``logit[<id>]``."""

    logits_before: Tensor
    logits_after: Tensor
    token_ids: list[int]
    token_text: list[str]
    target_ids: list[int]
    target: str
    metric_before: float
    metric_after: float
    closure_error: float
    relative_error: float
    interventions: list[str]
    frozen_attention: bool
    freeze_features: bool
    pos: int
    model_name: str
    regime: str = ""
    closure_tolerance: float = 0.0
    live_logits_after: Optional[Tensor] = None

    label_column: ClassVar[str] = "label"
    default_by: ClassVar[str] = "change"
    default_absolute: ClassVar[bool] = True

    def __repr__(self) -> str:
        live = "" if self.regime == "live" else f", live {self.live_metric_change:+.4g}"
        return (
            f"InterventionResult({self.model_name!r}, {'; '.join(self.interventions)} at pos {self.pos}, regime "
            f"{self.regime!r}: metric {self.target} {self.metric_before:.4g} → {self.metric_after:.4g} (change "
            f"{self.metric_change:+.4g}{live}); closure_error={self.closure_error:.2e}, relative_error="
            f"{self.relative_error:.2e} (tolerance {self.closure_tolerance:g}))"
        )

    @property
    def metric_change(self) -> float:
        """metric_after − metric_before."""
        return self.metric_after - self.metric_before

    @property
    def live_metric_after(self) -> float:
        """The metric after the intervention in the live model (attention and norms recomputed, the real MLPs rerun
        with the features' change added: the ``"live"`` regime), whatever the result's regime (NaN in a result saved
        without it)."""
        z = self.live_logits_after
        if z is None:
            return float("nan")
        t = self.target_ids
        return float(z[t[0]] - (z[t[1]] if len(t) > 1 else 0.0))

    @property
    def live_metric_change(self) -> float:
        """live_metric_after − metric_before: the intervention's effect on the live model, beside the regime's
        ``metric_change`` (they differ where attention and norms re-read the intervened write; docs/math.md §28)."""
        return self.live_metric_after - self.metric_before

    @property
    def labels(self) -> list[str]:
        return [f"logit[{i}]" for i in self.token_ids]

    def to_dataframe(self) -> pd.DataFrame:
        b, a = self.logits_before.double(), self.logits_after.double()
        ids = torch.tensor(self.token_ids, dtype=torch.long, device=b.device)
        pb, pa = torch.softmax(b, -1)[ids], torch.softmax(a, -1)[ids]
        return pd.DataFrame(
            {
                "label": self.labels,
                "token": self.token_text,
                "id": self.token_ids,
                "logit_before": b[ids].tolist(),
                "logit_after": a[ids].tolist(),
                "change": (a[ids] - b[ids]).tolist(),
                "live_change": (
                    (self.live_logits_after.double()[ids] - b[ids]).tolist()
                    if self.live_logits_after is not None
                    else [float("nan")] * len(ids)
                ),
                "prob_before": pb.tolist(),
                "prob_after": pa.tolist(),
            }
        )

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def top_tokens(self, k: int = 5, *, after: bool = True) -> pd.DataFrame:
        """The ``k`` most probable tokens of the table after (or before) the intervention."""
        return self.top(k, by="logit_after" if after else "logit_before", absolute=False)

    def plot(self) -> "go.Figure":
        """The change of each token's logit in the table (bars), largest |change| first; beside it, in another
        regime than the live one, the live model's change (:func:`interp.plots.intervention_figure`)."""
        from interp.plots import intervention_figure

        return intervention_figure(self)
