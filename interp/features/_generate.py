"""Interventions during generation: clamp, scale or ablate transcoder features, or add steering vectors, while the
model generates; the intervened continuation beside the unintervened one, step by step.

Each prompt is generated twice, token by token with a key/value cache (the engine's maths: one pass over the prompt,
then one position per step reading the cached keys and values): the **baseline** (the model itself) and the
**intervened** run. At step s the run's logits z_s [d_vocab] are read at its last position and the next token is
argmax z_s (``temperature`` 0) or drawn from softmax(z_s / T) with a seeded ``torch.Generator`` (the same seed for
both runs, so without interventions they draw the same tokens).

What an intervention does in a pass over rows of positions, at layer l:

* a feature (:class:`~interp.features.Intervention`): the MLP runs on its input h2 as in the model, and the
  intervened features' change is added to its write,  m' = MLP(h2) + (f̃(h2) − f(h2)) W_dec,  f = act(h2 W_encᵀ +
  b_enc) the layer's transcoder, f̃ = f with the clamp / scale applied (:func:`interp.features.intervene`'s default
  regimes, docs/math.md §28). With a cross-layer transcoder (CLT) a feature of layer k writes at k and every later
  layer: layer l's write gains  Σ_{k ≤ l} Δf_k W_dec[k → l],  Δf_k = f̃_k − f_k of this run's MLP input at layer k
  (as :func:`~interp.features.intervene` adds it);
* a steering vector (:class:`Steer`): x ← x + α·v at the layer's ``resid_pre`` / ``resid_mid`` / ``resid_post``.

Where: a feature with a position (``"L3.F12@5"``) acts at that prompt position, in the prompt pass; one for every
position (``"L3.F12@*"``) and every steering vector act at every position — the prompt's and each generated one —
or, with ``positions="prompt"``, at the prompt's positions only (the generated positions then see the change only
through attention to the prompt).

Regimes (``frozen_attention``):

* ``False`` ("live", the default): every attention pattern and norm recomputed at every position. Without an
  intervention the run performs the baseline's own operations, so the two are identical.
* ``True`` ("frozen attention"): in the prompt pass — which computes the prompt positions and the first generated
  token's logits — every attention pattern, the scale σ of every read norm (and of the attention's output norm),
  and the final norm's σ are held at the baseline's values at those positions: the first step is exactly
  :func:`interp.features.intervene` with ``frozen_attention=True`` (its logit change equals intervene's). The prompt
  positions' keys and values, which later queries read, are those of this frozen pass (q, k, v projected from what
  the frozen norms gave). Every generated position is live: its own pattern over all keys, its norms recomputed —
  there is no unintervened value to freeze it at (the baseline generated other tokens there). circuit-tracer's
  ``feature_intervention_generate`` freezes the same way (its freezes hold for the prompt pass only). The MLP's own
  output norm ("ln2_post") is recomputed, as in intervene. Checked on every call: the frozen prompt pass without the
  interventions reproduces the baseline's first logits (``closure_error``; past
  :data:`~interp.features.CLOSURE_TOLERANCE` a :class:`~interp.features.ClosureWarning`).

Prompts of a list run in batches: the prompts of one token length are one batch (rows [B, n], no padding: every row's
positions are its own, so each row computes what it computes alone); prompts of different lengths run as separate
batches (the engine's positions count from each row's first token, so a left-padded row would sit at other positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import (
    check_bool,
    check_choice,
    check_finite_float,
    check_int,
    check_int_range,
    check_positive_int,
)
from interp.engine.internal import Engine
from interp.errors import (
    ArgumentError,
    ContextLengthWarning,
    MemoryCapError,
    UnsupportedArchitectureError,
    warn_user,
)
from interp.features._generation_result import GenerationResult
from interp.features._generation_run import Run, Writes, generate_tokens
from interp.features._intervene import REGIMES, check_closure, check_live
from interp.features._intervention import Intervention, _interventions, check_overlap
from interp.dictionaries.internal import check_transcoder
from interp.dictionaries import DictionarySet, Transcoder
from interp.labels import Feature, Resid
from interp.models import Model
from interp.stream.internal import as_batch, require_model

if TYPE_CHECKING:
    pass

__all__ = ["Steer", "generate"]

POSITIONS = ("all", "prompt")


@dataclass(frozen=True, eq=False)
class Steer:
    """A steering vector: add ``alpha · vector`` ([d_model]) to the residual stream at layer ``layer``'s ``site``
    ("resid_pre", "resid_mid" where the block has one, "resid_post"), at every position (or the prompt's only:
    ``generate(..., positions="prompt")``). ``name`` labels it in the result."""

    layer: int
    vector: Tensor
    alpha: float = 1.0
    site: str = "resid_pre"
    name: str = "v"

    def __str__(self) -> str:
        return f"{Resid(self.layer, self.site[len('resid_') :])} += {self.alpha:g}·{self.name}"  # type: ignore[arg-type]


def _for_run(
    ds: Optional[DictionarySet], layers: set[int], device: Any, dtype: torch.dtype
) -> tuple[dict[int, Transcoder], dict[int, Writes]]:
    """The encoders of ``layers`` (the intervened ones) in the run's device and dtype, and per model layer l the
    writes into it of those layers' features: [(k, W_dec[k → l])] for every k ≤ l in ``layers`` whose features write
    to l (per-layer transcoders: k = l only)."""
    if ds is None or not layers:
        return {}, {}
    s = ds.to(device=device, dtype=dtype)
    enc = {k: s.encoder(k) for k in sorted(layers)}
    into: dict[int, Writes] = {}
    for k in sorted(layers):
        for j in s.targets(k):
            into.setdefault(j, []).append((k, s.decoder(k, j)))
    return enc, into


def _dictionary(model: Model, transcoders: Any) -> Optional[DictionarySet]:
    """``transcoders`` as a :class:`DictionarySet` of the model (None: steering only) — anything
    :meth:`DictionarySet.of` reads (a list, a {layer: Transcoder} dict, a cross-layer transcoder, a training result)
    with encoders at some of the model's layers. A list whose transcoders' layers are not all known is one per
    layer in layer order."""
    if transcoders is None:
        return None
    L, d = model.arch.n_layers, model.arch.d_model
    items = transcoders
    inner = getattr(transcoders, "transcoders", None)  # a training result: its transcoders at its layers
    if isinstance(inner, (list, tuple)) and hasattr(transcoders, "layers"):
        items = dict(zip(transcoders.layers, inner))
    elif isinstance(transcoders, Mapping) and not isinstance(transcoders, dict):
        items = dict(transcoders)
    if isinstance(items, (list, tuple, dict)):
        for key, t in items.items() if isinstance(items, dict) else enumerate(items):
            check_transcoder(f"transcoders[{key!r}]", t)
        if isinstance(items, (list, tuple)) and len(items) != L and any(t.layer is None for t in items):
            raise ArgumentError(
                f"transcoders has {len(items)} entries for a model of {L} layers: give one per "
                "layer in layer order, transcoders whose .layer is set (each layer once), or a dict "
                "{layer: Transcoder}"
            )
    try:
        s = DictionarySet.of(items)
    except ArgumentError as e:
        if isinstance(items, (list, tuple, dict, Transcoder)):
            raise
        raise ArgumentError(
            f"transcoders={transcoders!r:.80} must be None (steering vectors only), a list of "
            "interp.features.Transcoder, a dict {layer: Transcoder}, a TrainedTranscoders or an "
            "interp.features.CrossLayerTranscoder"
        ) from e
    if s.d_model != d or not all(0 <= l < L for l in s.layers):
        raise ArgumentError(
            f"transcoders is a {s!r}; model {model.name!r} has layers 0..{L - 1} and d_model={d}: its "
            "encoders must sit at the model's layers, with its width"
        )
    return s


def _split(interventions: Any) -> tuple[list[tuple[int, Any]], list[tuple[int, Steer]]]:
    """The items of ``interventions`` (one item, a list, or None / [] for none) as (index, feature item) and
    (index, steering vector)."""
    if interventions is None:
        return [], []
    if isinstance(interventions, (Intervention, Feature, str, Steer)) or (
        isinstance(interventions, tuple) and len(interventions) == 4 and isinstance(interventions[0], int)
    ):
        interventions = [interventions]
    if not isinstance(interventions, (list, tuple)):
        raise ArgumentError(
            f"interventions={interventions!r:.80} must be a list of Intervention, (layer, pos, feature, "
            "value) tuples, feature labels or Steer vectors (or [] for none)"
        )
    feats = [(i, it) for i, it in enumerate(interventions) if not isinstance(it, Steer)]
    steers = [(i, it) for i, it in enumerate(interventions) if isinstance(it, Steer)]
    return feats, steers


def _features(items: list[tuple[int, Any]], ds: Optional[DictionarySet], n_layers: int, n: int) -> list[Intervention]:
    """The feature items validated for a prompt of ``n`` tokens (intervene's rules; errors name the item's index in
    the caller's list)."""
    out = []
    for i, it in items:
        try:
            out += _interventions([it], ds, n, n_layers)
        except ArgumentError as e:
            raise ArgumentError(str(e).replace("interventions[0]", f"interventions[{i}]", 1)) from None
    check_overlap(out, [f"interventions[{i}]" for i, _ in items])
    return out


def _steer(i: int, s: Steer, model: Model) -> tuple[str, int, Tensor]:
    """(site, layer, α·v in the model's dtype and device) of a validated steering vector."""
    name, L, d = f"interventions[{i}]", model.arch.n_layers, model.arch.d_model
    layer = check_int_range(f"{name}: layer", s.layer, 0, L)
    sites = model.block.resid_sites()
    if s.site not in sites:
        raise ArgumentError(
            f"{name}: site={s.site!r} must be one of {list(sites)} (the stream's points in this model's block)"
        )
    if not isinstance(s.vector, Tensor) or s.vector.is_complex() or not s.vector.is_floating_point():
        raise ArgumentError(
            f"{name}: vector must be a real floating-point torch.Tensor of shape [{d}] (d_model), got "
            f"{type(s.vector).__name__}"
        )
    if tuple(s.vector.shape) != (d,):
        raise ArgumentError(f"{name}: vector has shape {tuple(s.vector.shape)}; a steering vector is [d_model] = [{d}]")
    alpha = check_finite_float(f"{name}: alpha", s.alpha)
    v = s.vector.detach().to(device=model.device, dtype=model.dtype) * alpha
    if not bool(torch.isfinite(v).all()):
        raise ArgumentError(f"{name}: alpha · vector has a value that is not finite")
    return s.site, layer, v


def _prompts(model: Model, prompt: Any) -> list[tuple[str, Tensor]]:
    """(text, token ids [1, n]) of each prompt: a string, a list of strings, or token ids [batch, pos] (a padded
    batch's padding dropped)."""
    batch = as_batch(model, prompt)
    out = []
    tok = model.tokenizer
    texts = (
        [prompt]
        if isinstance(prompt, str)
        else list(prompt)
        if isinstance(prompt, (list, tuple)) and all(isinstance(p, str) for p in prompt)
        else None
    )
    for b in range(batch.tokens.shape[0]):
        ids = batch.tokens[b][batch.attention_mask[b].bool()][None]
        text = (
            texts[b]
            if texts is not None
            else (tok.decode(ids[0].tolist()) if tok is not None else " ".join(map(str, ids[0].tolist())))
        )
        out.append((text, ids))
    return out


@dataclass(frozen=True)
class _Options:
    """generate's validated scalar arguments."""

    steps: int
    frozen: bool
    positions: str
    temperature: float
    seed: int
    top_k: int


@dataclass
class _Job:
    """What generate runs: the prompts (text, ids [1, n]), each one's validated feature interventions, the steering
    vectors (validated, and as given: (index, Steer)), and the transcoders."""

    prompts: list[tuple[str, Tensor]]
    ivs: list[list[Intervention]]
    steers: list[tuple[str, int, Tensor]]
    steer_items: list[tuple[int, Steer]]
    dic: Optional[DictionarySet]


@dataclass
class _Outputs:
    """Per prompt (in the caller's order): the baseline's and the intervened run's tokens [steps] and logits
    [steps, d_vocab]; the largest closure error of the frozen prompt passes and the largest |first baseline
    logit|; with frozen attention the live intervened run's first logits [d_vocab] (``live``)."""

    base_ids: list[Tensor]
    base_z: list[Tensor]
    ids: list[Tensor]
    z: list[Tensor]
    closure: float
    scale: float
    live: list[Tensor] = field(default_factory=list)


def _options(
    model: Model, max_new_tokens: Any, frozen_attention: Any, positions: Any, temperature: Any, seed: Any, top_k: Any
) -> _Options:
    """The scalar arguments validated (typed errors naming each)."""
    steps = check_positive_int("max_new_tokens", max_new_tokens)
    frozen = check_bool("frozen_attention", frozen_attention)
    positions = check_choice("positions", positions, POSITIONS)
    T = check_finite_float("temperature", temperature)
    if T < 0:
        raise ArgumentError(f"temperature={temperature!r} must be a finite number ≥ 0 (0: greedy)")
    seed = check_int("seed", seed)
    top_k = check_positive_int("top_k", top_k)
    V = int(model.weights.need("W_U").shape[1])
    if top_k > V:
        raise ArgumentError(f"top_k={top_k} must be at most the vocabulary's {V} tokens")
    return _Options(steps, frozen, positions, T, seed, top_k)


def _check_memory(model: Model, n_prompts: int, longest: int, steps: int) -> None:
    """Refuse, before running, a generation whose kept logits (two runs × prompts × steps × d_vocab, float32 or
    float64) would not fit in the free memory of the model's device (the host's available RAM on the CPU)."""
    a = model.arch
    item = 8 if model.dtype == torch.float64 else 4
    need = item * n_prompts * (2 * steps * a.d_vocab + 4 * a.n_layers * longest * a.n_kv_heads * a.d_head)
    if model.device.type == "cuda":
        free = torch.cuda.mem_get_info(model.device)[0]
    else:
        import psutil  # type: ignore[import-untyped]

        free = psutil.virtual_memory().available
    if need > free:
        raise MemoryCapError(
            f"max_new_tokens={steps}: generating it from {n_prompts} prompt(s) keeps every step's logits "
            f"({a.d_vocab} per token, for the baseline and the intervened run): about {need / 2**30:.1f} GiB, more "
            f"than the {free / 2**30:.1f} GiB free on {model.device}; ask for fewer tokens or fewer prompts at once"
        )


def _job(model: Model, prompt: Any, transcoders: Any, interventions: Any, opts: _Options) -> _Job:
    """The prompts, transcoders and interventions validated — all of them before any run — with the model's
    refusals (post-norm, no MLP) and the warning for a generation past the transcoders' training length."""
    a = model.arch
    dic = _dictionary(model, transcoders)
    feat_items, steer_items = _split(interventions)
    if (feat_items or opts.frozen) and model.block.normed_stream:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is post-norm (its stream is normed after each join): "
            "feature interventions and frozen attention need a pre-norm decoder (live "
            "steering vectors run on any decoder)"
        )
    if feat_items and not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers for transcoder features")
    steers = [_steer(i, s, model) for i, s in steer_items]
    prompts = _prompts(model, prompt)
    longest = max(ids.shape[1] for _, ids in prompts) + opts.steps
    if longest > a.n_ctx:
        kind = "learned positions" if a.positional == "learned" else "context length"
        raise ArgumentError(
            f"max_new_tokens={opts.steps}: the longest prompt plus the generated tokens is {longest} "
            f"positions, past the model's {kind} of {a.n_ctx}; ask for at most "
            f"{max(a.n_ctx - (longest - opts.steps), 0)} new tokens"
        )
    _check_memory(model, len(prompts), longest, opts.steps)
    ivs = [_features(feat_items, dic, a.n_layers, ids.shape[1]) for _, ids in prompts]
    trained = [c for c in (dic.context_lengths[dic.index(it.layer)] for it in ivs[0]) if c is not None] if dic else []
    if trained and longest - 1 > min(trained):
        warn_user(
            f"generation reaches {longest - 1} tokens but the intervened transcoders were trained on "
            f"sequences of {min(trained)}: their features past position {min(trained) - 1} are out of "
            "distribution",
            ContextLengthWarning,
        )
    return _Job(prompts, ivs, steers, steer_items, dic)


def _batches(prompts: list[tuple[str, Tensor]]) -> list[list[int]]:
    """The prompts' indices grouped by token length (in order of first appearance): each group is one batch."""
    groups: dict[int, list[int]] = {}
    for i, (_, ids) in enumerate(prompts):
        groups.setdefault(ids.shape[1], []).append(i)
    return list(groups.values())


def _run_batches(model: Model, job: _Job, opts: _Options) -> _Outputs:
    """Both runs of every batch of prompts (:func:`_batches`): the baseline (keeping its prompt pass's patterns and
    scales), the intervened run (frozen: on the baseline's), and with frozen attention the frozen prompt pass without
    the interventions (its closure against the baseline's first logits) and the live intervened prompt pass (the
    first step's live effect)."""
    e = Engine.of(model)
    dt = torch.float64 if model.dtype == torch.float64 else torch.float32
    enc, into = _for_run(job.dic, {it.layer for per in job.ivs for it in per}, model.device, dt)
    n = len(job.prompts)
    none = torch.empty(0, device=model.device)  # a placeholder until the prompt's batch has run
    out = _Outputs([none] * n, [none] * n, [none] * n, [none] * n, 0.0, 0.0, [none] * n if opts.frozen else [])
    run_args = (opts.steps, opts.temperature, opts.seed)
    with torch.no_grad():
        for rows in _batches(job.prompts):
            ids = torch.cat([job.prompts[i][1] for i in rows])  # [B, n]
            ivs = job.ivs[rows[0]]  # one length, the same positions: the same interventions
            base = Run(e, enc, into, [], [], opts.positions, record=True)
            bt, bz = generate_tokens(base, ids, *run_args)
            frozen = base.record if opts.frozen else None
            t, z = generate_tokens(Run(e, enc, into, ivs, job.steers, opts.positions, frozen=frozen), ids, *run_args)
            if frozen is not None:  # the frozen prompt pass without the interventions is the baseline
                z0 = Run(e, enc, into, [], [], opts.positions, frozen=frozen).logits(ids, 0)
                out.closure = max(out.closure, float((z0 - bz[:, 0]).abs().max()))
                live = Run(e, enc, into, ivs, job.steers, opts.positions).logits(ids, 0)
                for b, i in enumerate(rows):
                    out.live[i] = live[b]
            out.scale = max(out.scale, float(bz[:, 0].abs().max()))
            for b, i in enumerate(rows):
                out.base_ids[i], out.base_z[i], out.ids[i], out.z[i] = bt[b], bz[b], t[b], z[b]
    return out


def _closure(model: Model, out: _Outputs) -> tuple[float, float]:
    """(relative closure error, its tolerance for the model's dtype) of the frozen prompt passes
    (:func:`interp.features._intervene.check_closure`: past the tolerance a :class:`ClosureWarning`)."""
    return check_closure(
        "generate",
        out.closure,
        out.scale,
        model.dtype,
        "without the interventions the frozen prompt pass",
        "Run in float64 (load_model(..., dtype=torch.float64)) or with frozen_attention=False",
    )


def generate(
    model: Model,
    prompt: Union[str, Sequence[str], Tensor],
    transcoders: Any,
    interventions: Any,
    *,
    max_new_tokens: int,
    frozen_attention: bool = False,
    positions: Literal["all", "prompt"] = "all",
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int = 5,
) -> "GenerationResult":
    """Generate ``max_new_tokens`` tokens from each prompt twice — the model itself and with ``interventions`` — and
    return both continuations with every step's logits (module docstring; docs/api.md).

    ``prompt``: a string, a list of strings (the prompts of one token length run as one batch) or token ids
    [batch, pos]. ``transcoders``: one per layer (a list), those of some layers (a dict {layer: Transcoder}, a list of
    transcoders whose ``layer`` is set, a ``TrainedTranscoders``), a :class:`~interp.features.CrossLayerTranscoder`
    (a feature of layer k writes Δf_k W_dec[k → l] at k and every later layer l), or None when every intervention is
    a steering vector. ``interventions``: :class:`~interp.features.Intervention` objects, circuit-tracer-style tuples
    ``(layer, pos, feature, value)`` (clamp), feature labels (ablate; ``"L3.F12@*"``: every position) and
    :class:`Steer` vectors; [] for none (then the intervened run is the baseline). ``positions="prompt"``: the
    every-position interventions act at the prompt's positions only. ``frozen_attention``: the prompt pass with the
    baseline's patterns and norm scales (the first step equals :func:`interp.features.intervene`'s regime of that
    name), the generated positions live. ``temperature`` 0: greedy; > 0: sampled with
    ``torch.Generator().manual_seed(seed)`` (each prompt and run its own generator with that seed). Every step
    generates a token (no stop at end-of-sequence). ``top_k``: the tokens the result lists per step.
    """
    # 1. the model, the arguments, the prompts, the transcoders and the interventions, all validated before any run
    require_model(model)
    if not model.arch.causal or model.weights.W_U is None:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is not a decoder with an unembedding: it generates no text"
        )
    opts = _options(model, max_new_tokens, frozen_attention, positions, temperature, seed, top_k)
    job = _job(model, prompt, transcoders, interventions, opts)
    # 2. both runs of each batch of prompts of one length
    out = _run_batches(model, job, opts)
    # 3. the frozen prompt pass's closure, and the result
    relative, tol = _closure(model, out)
    _check_live(model, out, tol)
    return _result(
        model,
        job.prompts,
        out.base_ids,
        out.base_z,
        out.ids,
        out.z,
        opts.top_k,
        interventions=[str(it) for it in job.ivs[0]] + [str(s) for _, s in job.steer_items],
        frozen_attention=opts.frozen,
        positions=opts.positions,
        temperature=opts.temperature,
        seed=opts.seed,
        closure_error=out.closure,
        relative_error=relative,
        closure_tolerance=tol,
        regime=REGIMES[(False, opts.frozen)][0],
        live_first_logits=torch.stack(out.live) if out.live else None,
    )


def _check_live(model: Model, out: _Outputs, tol: float) -> None:
    """With frozen attention, a :class:`~interp.features.RegimeWarning` for the first prompt whose first-step change
    of the baseline's first token's logit disagrees with the live model's
    (:func:`interp.features._intervene.check_live`)."""
    for i, live in enumerate(out.live):
        t = int(out.base_ids[i][0])
        base = float(out.base_z[i][0, t])
        change, live_change = float(out.z[i][0, t]) - base, float(live[t]) - base
        tok = model.tokenizer
        what = (
            f"the first step{f' of prompt {i}' if len(out.live) > 1 else ''} changes the baseline's first token's "
            f"logit ({tok.decode([t]) if tok is not None else t!r})"
        )
        if check_live("generate", "frozen attention", what, change, live_change, tol * out.scale):
            return


def _result(
    model: Model,
    prompts: list[tuple[str, Tensor]],
    base_ids: list[Tensor],
    base_z: list[Tensor],
    ids: list[Tensor],
    z: list[Tensor],
    top_k: int,
    **kw: Any,
) -> "GenerationResult":
    tok = model.tokenizer

    def dec(t: list[int]) -> str:
        return tok.decode(t) if tok is not None else " ".join(map(str, t))

    def one(t: int) -> str:
        return tok.decode([t]) if tok is not None else str(t)

    T, BT = torch.stack(ids), torch.stack(base_ids)
    Z, BZ = torch.stack(z), torch.stack(base_z)
    top, btop = Z.topk(top_k, dim=-1).indices, BZ.topk(top_k, dim=-1).indices
    strs = {
        i: one(i)
        for i in set(T.flatten().tolist())
        | set(BT.flatten().tolist())
        | set(top.flatten().tolist())
        | set(btop.flatten().tolist())
    }
    return GenerationResult(
        tokens=T,
        baseline_tokens=BT,
        logits=Z,
        baseline_logits=BZ,
        top_ids=top,
        baseline_top_ids=btop,
        prompts=[p for p, _ in prompts],
        prompt_tokens=[ids_[0].tolist() for _, ids_ in prompts],
        texts=[dec(t) for t in T.tolist()],
        baseline_texts=[dec(t) for t in BT.tolist()],
        token_strs=[[strs[i] for i in row] for row in T.tolist()],
        baseline_token_strs=[[strs[i] for i in row] for row in BT.tolist()],
        top_strs=[[[strs[i] for i in ks] for ks in row] for row in top.tolist()],
        baseline_top_strs=[[[strs[i] for i in ks] for ks in row] for row in btop.tolist()],
        model_name=model.name,
        **kw,
    )
