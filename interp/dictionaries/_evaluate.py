"""A dictionary scored as the field scores it: FVU, L0, dead and dense features, and the spliced-in loss recovered.

For each dictionary of a set (per-layer transcoders, a cross-layer transcoder, residual-stream SAEs) on held-out
token rows, at every position but each row's first (the attention sink — BOS, or the cut-off start of a row — whose
activations are orders of magnitude off the others; the field excludes it, and so does training):

    FVU   = Σ_t ‖y_t − ŷ_t‖² / Σ_t ‖y_t − ȳ‖²      y the MLP's write (a transcoder) or the stream at the SAE's point
    L0    = (1/N) Σ_t #{i : f_{t,i} ≠ 0}            dead = #{i : f_{t,i} = 0 for every t} / F
    density_i = (1/N) #{t : f_{t,i} ≠ 0}            dense = #{i : density_i > dense_threshold} / F

and three forwards of the model on the same rows, each scored by the mean next-token cross-entropy CE over the
predictions of positions 1..T−2 (the position's token → the next one):

    clean     the model as it is
    spliced   the dictionary's output written in place of y at positions ≥ 1 (later layers recomputed)
    zero      y replaced by 0 at positions ≥ 1 (zero ablation of that MLP's write, or of the SAE's point)

    loss recovered = 1 − (CE_spliced − CE_clean) / (CE_zero − CE_clean)      (SAELens's ce_loss_score)
    KL            = mean over predictions of KL(p_clean ‖ p_spliced)  (and of p_zero, beside it)

A transcoder of layer l reads the clean MLP input of l (the layers below are untouched), so its spliced run starts
from the clean stream entering l. A cross-layer transcoder's layer l writes Σ_{k ≤ l} f_k W_dec[k → l] + b_dec[l]
from the clean inputs of layers k ≤ l; its row ``all`` (and a set of per-layer transcoders' too) splices every
dictionary at once, each reading the MLP input of the spliced run itself, against every MLP zero-ablated at once.
docs/math.md §33.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, check_positive_int, is_int, is_real
from interp.engine.internal import Engine, Patch
from interp.engine import unembed
from interp.errors import ArgumentError, ShapeError, UnsupportedArchitectureError, warn_user
from interp.dictionaries._corpus import token_rows
from interp.dictionaries._sae import SAE, check_saes
from interp.dictionaries._set import DictionarySet
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder, mlp_input
from interp.dictionaries._warnings import DictionaryQualityWarning
from interp.models import Model
from interp.stream.internal import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["DictionaryEvaluation", "evaluate_dictionary"]

_STATS = ("fvu", "l0", "dead_fraction", "dense_fraction", "ce_spliced", "ce_zero", "loss_recovered", "kl_spliced")


@dataclass(frozen=True, eq=False)
class DictionaryEvaluation(Result):
    """A dictionary set's scores on held-out tokens (:func:`evaluate_dictionary`; the module docstring). One row per
    dictionary, labelled ``L{layer}`` (a transcoder, or a cross-layer transcoder's layer), ``L{layer}.{site}`` (an
    SAE) and ``all`` (every transcoder spliced at once; its FVU, L0 and feature counts are NaN). Per row [R]:
    ``fvu``, ``l0``, ``dead_fraction``, ``dense_fraction``, ``ce_spliced``, ``ce_zero``, ``loss_recovered``,
    ``kl_spliced`` (KL(clean ‖ spliced)), ``kl_zero``; ``ce_clean`` the clean model's CE; ``density`` every feature's
    activation frequency, the rows' features one after the other (``n_features[r]`` each; 0 for ``all``);
    ``n_tokens`` the tokens scored (every row's first excluded), ``n_predictions`` the next-token predictions."""

    row_labels: list[str]
    kind: str
    layers: list[int]
    sites: list[str]
    n_features: list[int]
    fvu: Tensor = field(repr=False)
    l0: Tensor = field(repr=False)
    dead_fraction: Tensor = field(repr=False)
    dense_fraction: Tensor = field(repr=False)
    ce_spliced: Tensor = field(repr=False)
    ce_zero: Tensor = field(repr=False)
    loss_recovered: Tensor = field(repr=False)
    kl_spliced: Tensor = field(repr=False)
    kl_zero: Tensor = field(repr=False)
    density: Tensor = field(repr=False)
    ce_clean: float
    n_tokens: int
    n_predictions: int
    dense_threshold: float
    model_name: str

    label_column: ClassVar[str] = "dictionary"
    default_by: ClassVar[str] = "loss_recovered"
    default_absolute: ClassVar[bool] = False

    @property
    def labels(self) -> list[str]:
        return list(self.row_labels)

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def densities(self, label: Any) -> Tensor:
        """The activation frequency of each feature of row ``label`` [F] (empty for ``all``)."""
        i = self._index(label)
        start = sum(self.n_features[:i])
        return self.density[start : start + self.n_features[i]]

    def __repr__(self) -> str:
        rows = ", ".join(
            f"{lab}: FVU {float(f):.3g} LR {float(r):.3g}"
            for lab, f, r in zip(self.row_labels[:4], self.fvu, self.loss_recovered)
        )
        more = f", … ({len(self.row_labels)} rows)" if len(self.row_labels) > 4 else ""
        return f"DictionaryEvaluation({self.model_name!r}, {self.kind}, {self.n_tokens} tokens; {rows}{more})"

    def to_dataframe(self) -> pd.DataFrame:
        df = pd.DataFrame(
            {"dictionary": self.labels, "layer": self.layers, "site": self.sites, "n_features": self.n_features}
        )
        for name in _STATS + ("kl_zero",):
            df[name] = getattr(self, name).tolist()
        df["ce_clean"] = self.ce_clean
        return df

    def plot(self, **options: Any) -> "go.Figure":
        """FVU, loss recovered and dead fraction per dictionary (:func:`interp.plots.dictionary_evaluation_figure`)."""
        from interp.plots import dictionary_evaluation_figure

        return dictionary_evaluation_figure(self, **options)


# ---------------------------------------------------------------------------------------------- the set


@dataclass
class _Set:
    """The dictionaries, normalised: ``kind`` "transcoders" or "cross_layer" (``ds``, the transcoder set) or "saes"
    (``saes``)."""

    kind: str
    ds: Optional[DictionarySet] = None
    saes: list[SAE] = field(default_factory=list)

    @property
    def layers(self) -> list[int]:
        return list(self.ds.layers) if self.ds is not None else [s.layer for s in self.saes]

    def widths(self) -> list[int]:
        return (
            [self.ds.n_features(l) for l in self.ds.layers]
            if self.ds is not None
            else [s.n_features for s in self.saes]
        )

    def k_max(self) -> int:
        """The largest top-k of the set (0 where no dictionary is top-k)."""
        if self.ds is not None:
            return max(
                (int(k) for a, k in zip(self.ds.activation, self.ds.k) if a == "topk" and k is not None), default=0
            )
        return max((int(d.k) for d in self.saes if d.activation == "topk" and d.k is not None), default=0)


def _as_set(model: Model, dicts: Any) -> _Set:
    """``dicts`` as a :class:`_Set`, checked against the model (layer, d_model, read point): typed errors naming
    both."""
    a = model.arch
    inner = getattr(dicts, "transcoders", None)  # a trained set (train_transcoders' result)
    if inner is not None and not isinstance(dicts, (list, tuple, dict)):
        dicts = inner
    if isinstance(dicts, CrossLayerTranscoder):
        bad = [l for l in dicts.model_layers if l >= a.n_layers]
        if bad or dicts.d_model != a.d_model:
            raise ShapeError(
                f"dicts is a {dicts!r}; model {model.name!r} has {a.n_layers} layers and d_model={a.d_model}: "
                "a dictionary of another model"
            )
        return _Set("cross_layer", ds=DictionarySet.of(dicts))
    items = list(dicts.items()) if isinstance(dicts, dict) else None
    lst = [dicts] if isinstance(dicts, (Transcoder, SAE)) else list(dicts) if isinstance(dicts, (list, tuple)) else []
    if items is None and not lst:
        raise ArgumentError(
            f"dicts={type(dicts).__name__} must be a Transcoder, a list of them (one per layer, or any layers with "
            "their .layer set), a {layer: Transcoder} dict, a CrossLayerTranscoder, an SAE or a list of SAEs"
        )
    saes = [d for d in lst if isinstance(d, SAE)]
    if items is None and len(saes) == len(lst):
        check_saes(model, saes, "dicts")
        return _Set("saes", saes=saes)
    if items is None:
        full = len(lst) == a.n_layers
        items = [(d.layer if getattr(d, "layer", None) is not None or not full else i, d) for i, d in enumerate(lst)]
    tcs: dict[int, Transcoder] = {}
    for key, d in items:
        name = f"dicts[{key}]"
        if not isinstance(d, Transcoder):
            raise ArgumentError(f"{name} is a {type(d).__name__}; a set mixes no kinds: give transcoders or SAEs")
        if key is None or not is_int(key):
            raise ArgumentError(
                f"{name}: its layer is unknown (Transcoder.layer is None) and the list does not cover the model's "
                f"{a.n_layers} layers; pass {{layer: transcoder}} or set layer="
            )
        if d.layer is not None and d.layer != key:
            raise ArgumentError(f"{name} is the transcoder of layer {d.layer}, given for layer {key}")
        if not 0 <= key < a.n_layers or d.d_model != a.d_model or key in tcs:
            raise ShapeError(
                f"{name} (layer {key}, d_model={d.d_model}) is not a dictionary of model {model.name!r} "
                f"({a.n_layers} layers, d_model={a.d_model}){' (layer given twice)' if key in tcs else ''}"
            )
        tcs[int(key)] = d
    return _Set("transcoders", ds=DictionarySet.of(tcs))


def _check_model(model: Model, s: _Set) -> None:
    a = model.arch
    if not a.causal or not a.has_unembed:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is not a decoder with an unembedding: the spliced-in loss is a next-token loss"
        )
    if s.kind != "saes" and not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers for transcoders to replace")


def _rows(model: Model, tokens: Any, seq_len: int, max_tokens: Optional[int]) -> Tensor:
    """The token rows [n, T] (ids as given, or documents cut into rows of ``seq_len``)."""
    if isinstance(tokens, str) or (
        isinstance(tokens, (list, tuple)) and tokens and all(isinstance(t, str) for t in tokens)
    ):
        docs = [tokens] if isinstance(tokens, str) else list(tokens)
        n_rows = None if max_tokens is None else max(1, max_tokens // seq_len)
        ids = token_rows(model, docs, seq_len, n_rows)
    elif isinstance(tokens, Tensor) and not tokens.is_floating_point() and tokens.ndim in (1, 2):
        ids = tokens[None] if tokens.ndim == 1 else tokens
        if bool((ids < 0).any()) or bool((ids >= model.arch.d_vocab).any()):
            raise ArgumentError(f"tokens: ids must lie in [0, {model.arch.d_vocab}) (the model's vocabulary)")
        if max_tokens is not None:
            ids = ids[: max(1, max_tokens // ids.shape[1])]
    else:
        raise ArgumentError(
            f"tokens={type(tokens).__name__} must be token ids (an int tensor [rows, T]) or texts (a string or a "
            "list of strings, cut into rows of seq_len tokens)"
        )
    return ids.to(device=model.device, dtype=torch.long)


def _check_rows(ids: Tensor, s: _Set, model: Model) -> None:
    n, T = ids.shape
    scored, k = n * (T - 1), s.k_max()
    if T < 3 or T > model.arch.n_ctx or scored < max(2, k):
        raise ArgumentError(
            f"tokens: {n} rows of {T} tokens give {scored} scored tokens (each row's first excluded) and "
            f"{n * max(T - 2, 0)} next-token predictions; evaluation needs rows of 3..{model.arch.n_ctx} tokens and "
            f"at least max(2, k={k}) scored tokens — give more text"
        )
    widths = s.widths()
    if k and scored * k < max(widths):
        warn_user(
            f"evaluate_dictionary: {scored} scored tokens × k={k} active features can touch at most "
            f"{scored * k} of the {max(widths)} features, so the dead fraction cannot fall below "
            f"{1 - scored * k / max(widths):.2f}; give at least {math.ceil(max(widths) / k)} tokens",
            DictionaryQualityWarning,
        )


# ---------------------------------------------------------------------------------------------- scoring


class _Acc:
    """Running sums of one row's scores over the chunks of rows (fp64)."""

    def __init__(self, n_features: int, d: int, device: Any):
        def z(*shape: int) -> Tensor:
            return torch.zeros(shape, dtype=torch.float64, device=device)

        self.err, self.sq, self.sum, self.active = z(), z(), z(d), z(n_features)
        self.ce_s, self.ce_z, self.kl_s, self.kl_z = z(), z(), z(), z()

    def reconstruction(self, y: Tensor, yhat: Tensor, f: Optional[Tensor]) -> None:
        """y, ŷ [B, T, d] and features f [B, T, F] of a chunk; position 0 of each row excluded."""
        y, yhat = y[:, 1:].double(), yhat[:, 1:].double()
        self.err += (y - yhat).pow(2).sum()
        self.sq += y.pow(2).sum()
        self.sum += y.sum((0, 1))
        if f is not None:
            self.active += (f[:, 1:] != 0).sum((0, 1)).double()


def _logprobs(e: Engine, final: Tensor) -> Tensor:
    """log p(next token) [R, T − 2, V] from the final stream [R, T, d] at positions 1..T−2 (fp64 where the model
    is, else fp32)."""
    a, w = e.arch, e.w
    x = final[:, 1:-1]
    y = e.norm(x, w.lnf_w, w.lnf_b) if a.norm != "none" else x
    dt = torch.float64 if final.dtype == torch.float64 else torch.float32
    return torch.log_softmax(unembed(y, w.need("W_U"), w.b_U, a.final_softcap).to(dt), dim=-1)


def _ce_kl(lp: Tensor, clean: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Σ CE and Σ KL(clean ‖ lp) over the predictions (lp, clean [R, P, V]; targets [R, P])."""
    ce = -lp.gather(-1, targets[..., None]).sum()
    kl = (clean.exp() * (clean - lp)).sum()
    return ce.double(), kl.double()


def _layer_run(e: Engine, x: Tensor, start: int, mask: Tensor, patches: dict[int, Callable[[Tensor], list[Patch]]]):
    """Layers ``start``..L−1 on rows x [R, T, d]; ``patches[l](x)`` the patches of layer l given its input."""
    R = x.shape[0]
    prompt = torch.arange(R, device=x.device) % mask.shape[0]
    for l in range(start, e.L):
        x = e.layer(l, x, prompt=prompt, mask=mask, patches=patches[l](x) if l in patches else ())
    return x


def _full(v: Tensor, clean: Tensor) -> Tensor:
    """v [R, T, d] with position 0 of each row the clean value's."""
    v = v.clone()
    v[:, 0] = clean[:, 0]
    return v


@dataclass
class _Chunk:
    """One chunk of rows: its clean run, the clean log-probs [B, P, V] and the targets [B, P]."""

    ids: Tensor
    mask: Tensor
    cache: Any
    clean: Tensor
    targets: Tensor


def _clean_chunk(e: Engine, s: _Set, ids: Tensor) -> _Chunk:
    mask = torch.ones_like(ids)
    cap = {"resid_mid", "mlp_out"} | {x.site for x in s.saes if x.site != "resid_pre"}
    cache = e.run(ids, mask, capture=cap)
    return _Chunk(ids, mask, cache, _logprobs(e, cache.final), ids[:, 2:])


def _recons(e: Engine, s: _Set, c: _Chunk) -> list[tuple[int, str, Tensor, Tensor, Tensor]]:
    """Per dictionary of the set: (model layer, patched site, y the clean value there [B, T, d], ŷ, f [B, T, F])."""
    cache, dt = c.cache, c.cache.final.dtype
    mids = cache.acts.get("resid_mid")

    def h2(l: int) -> Tensor:
        return mlp_input(e, cache.resid_pre[l], None if mids is None else mids[l], l)

    out = []
    if s.ds is not None:  # every layer's reconstruction (a cross-layer set's: the joint one) from the clean inputs
        ds = s.ds.to(device=c.ids.device, dtype=dt)
        xs = [h2(l) for l in ds.layers]
        fs = [ds.encode(l, x) for l, x in zip(ds.layers, xs)]
        ys = ds.decode(fs, xs)
        for i, l in enumerate(ds.layers):
            out.append((l, "mlp_out", cache.acts["mlp_out"][l], ys[i], fs[i]))
    for sae in s.saes:
        sae = sae.to(device=c.ids.device, dtype=dt)
        y = cache.resid_pre[sae.layer] if sae.site == "resid_pre" else cache.acts[sae.site][sae.layer]
        f = sae.encode(y)
        out.append((sae.layer, sae.site, y, sae.decode(f), f))
    return out


def _spliced_and_zero(e: Engine, c: _Chunk, l: int, site: str, y: Tensor, yhat: Tensor) -> Tensor:
    """The final stream [2B, T, d] of the spliced rows then the zero-ablated rows: ``site`` of layer l replaced at
    positions ≥ 1 by ŷ, or by 0, from the clean stream entering l."""
    B = y.shape[0]
    x0 = c.cache.resid_pre[l]
    value = torch.cat([_full(yhat.to(y.dtype), y), _full(torch.zeros_like(y), y)])
    rows = torch.arange(2 * B, device=y.device)
    return _layer_run(
        e, torch.cat([x0, x0]), l, c.mask, {l: lambda x: [Patch(site=site, layer=l, rows=rows, value=value)]}
    )


def _writer(s: _Set, dt: torch.dtype, device: Any) -> tuple[list[int], Callable[[int, Tensor], Tensor]]:
    """The set's transcoder layers and ŷ_l = write(l, h2) from the MLP input h2 of the run itself: layer l adds the
    writes of the earlier layers' features that write to it (a cross-layer set's), kept from the earlier calls."""
    assert s.ds is not None  # a transcoder set (evaluate_dictionary refuses spliced_all for SAEs)
    ds = s.ds.to(device=device, dtype=dt)
    later: list[Optional[Tensor]] = [None]

    def write(l: int, h2: Tensor) -> Tensor:
        i = ds.index(l)
        F_, J, d = ds.W_dec[i].shape
        buf = later[0]
        if buf is None or i == 0:
            buf = later[0] = h2.new_zeros(*h2.shape[:-1], ds.n_layers, d)
        buf[..., i : i + J, :] += (ds.encode(l, h2) @ ds.W_dec[i].reshape(F_, J * d)).unflatten(-1, (J, d))
        return buf[..., i, :] + ds.b_dec[i] + ds.skip(l, h2)

    return list(ds.layers), write


def _all_runs(e: Engine, s: _Set, c: _Chunk) -> tuple[Tensor, Tensor]:
    """The final streams [B, T, d] with every transcoder of the set spliced at once (each reading the MLP input of
    this run), and with every one of those MLPs zero-ablated at once; positions ≥ 1."""
    cache = c.cache
    layers, write = _writer(s, cache.final.dtype, c.ids.device)
    B = c.ids.shape[0]
    prompt, rows = torch.arange(B, device=c.ids.device), torch.arange(B, device=c.ids.device)
    x = cache.resid_pre[layers[0]]
    for l in range(layers[0], e.L):
        if l not in layers:
            x = e.layer(l, x, prompt=prompt, mask=c.mask)
            continue
        store: dict[str, Tensor] = {}
        e.layer(l, x, prompt=prompt, mask=c.mask, capture={"resid_mid"}, store=store)
        yhat = write(l, mlp_input(e, x, store.get("resid_mid"), l))
        value = _full(yhat.to(x.dtype), cache.acts["mlp_out"][l])
        x = e.layer(l, x, prompt=prompt, mask=c.mask, patches=[Patch(site="mlp_out", layer=l, rows=rows, value=value)])

    def zero(l: int) -> Callable[[Tensor], list[Patch]]:
        return lambda _: [
            Patch("mlp_out", l, rows, _full(torch.zeros_like(cache.acts["mlp_out"][l]), cache.acts["mlp_out"][l]))
        ]

    z = _layer_run(e, cache.resid_pre[layers[0]], layers[0], c.mask, {l: zero(l) for l in layers})
    return x, z


#: the spliced and zero runs' log-probs are made this many elements at a time (64 MB in fp32): a chunk's
#: [rows, positions, vocabulary] at once, with softmax and KL temporaries, was most of scoring's memory
_SLICE_ELEMENTS = 1 << 24


def _score_runs(e: Engine, c: _Chunk, acc: _Acc, spliced: Tensor, zero: Tensor) -> None:
    """CE and KL(clean ‖ run) of the spliced and zero runs' final streams, summed into ``acc``, a few rows at a time
    (:data:`_SLICE_ELEMENTS`)."""
    step = max(1, _SLICE_ELEMENTS // max(1, c.clean[0].numel()))
    for final, (ce_name, kl_name) in ((spliced, ("ce_s", "kl_s")), (zero, ("ce_z", "kl_z"))):
        for r in range(0, final.shape[0], step):
            ce, kl = _ce_kl(_logprobs(e, final[r : r + step]), c.clean[r : r + step], c.targets[r : r + step])
            setattr(acc, ce_name, getattr(acc, ce_name) + ce)
            setattr(acc, kl_name, getattr(acc, kl_name) + kl)


def evaluate_dictionary(
    model: Model,
    dicts: Any,
    *,
    tokens: Any,
    seq_len: int = 128,
    max_tokens: Optional[int] = None,
    batch_size: int = 4,
    dense_threshold: float = 0.1,
    spliced_all: Optional[bool] = None,
) -> DictionaryEvaluation:
    """Score a dictionary set on held-out ``tokens`` as the field does (module docstring): per dictionary FVU, L0,
    the fractions of features never active and denser than ``dense_threshold``, the spliced-in loss recovered
    1 − (CE_spliced − CE_clean) / (CE_zero − CE_clean) and KL(clean ‖ spliced); every row's first position is
    excluded (the attention sink / BOS).

    ``dicts``: per-layer transcoders (a list, one per layer or any layers with ``.layer`` set; a {layer:
    transcoder} dict; one transcoder), a :class:`CrossLayerTranscoder` (any of the model's layers), or residual
    SAEs — whatever :func:`load_transcoders`, :func:`load_saes` or :func:`train_transcoders` give (its result
    itself too). ``tokens``:
    token ids [rows, T] (taken as they are: no BOS added), or texts cut into rows of ``seq_len`` tokens the way
    training reads its corpus; ``max_tokens`` caps them. ``spliced_all`` (default: True for ≥ 2 transcoder layers)
    adds the row ``all``: every transcoder spliced at once. A dictionary of another model (layer or d_model) or of a
    point the model lacks is a :class:`~interp.errors.ShapeError` / typed error naming both; too few tokens an
    :class:`~interp.errors.ArgumentError` with the numbers."""
    require_model(model)
    s = _as_set(model, dicts)
    _check_model(model, s)
    check_positive_int("seq_len", seq_len)
    check_positive_int("batch_size", batch_size)
    check_positive_int("max_tokens", max_tokens, allow_none=True)
    if not is_real(dense_threshold) or not 0 < dense_threshold < 1:
        raise ArgumentError(f"dense_threshold={dense_threshold!r} must be a fraction in (0, 1)")
    check_bool("spliced_all", spliced_all, none="the default: True for two or more transcoder layers")
    ids = _rows(model, tokens, seq_len, max_tokens)
    _check_rows(ids, s, model)
    want_all = (len(s.layers) >= 2 and s.kind != "saes") if spliced_all is None else spliced_all
    if want_all and s.kind == "saes":
        raise ArgumentError("spliced_all=True splices transcoders; an SAE set has no row 'all'")
    e = Engine.of(model)
    accs: list[_Acc] = []
    meta: list[tuple[int, str, int]] = []
    all_acc = _Acc(0, model.arch.d_model, model.device)
    clean_ce = torch.zeros((), dtype=torch.float64, device=model.device)
    with torch.inference_mode():
        for start in range(0, ids.shape[0], batch_size):
            c = _clean_chunk(e, s, ids[start : start + batch_size])
            clean_ce += -c.clean.gather(-1, c.targets[..., None]).double().sum()
            for i, (l, site, y, yhat, f) in enumerate(_recons(e, s, c)):
                if len(accs) <= i:
                    accs.append(_Acc(f.shape[-1], y.shape[-1], model.device))
                    meta.append((l, site, int(f.shape[-1])))
                accs[i].reconstruction(y, yhat, f)
                both = _spliced_and_zero(e, c, l, site, y, yhat)
                _score_runs(e, c, accs[i], both[: y.shape[0]], both[y.shape[0] :])
            if want_all:
                _score_runs(e, c, all_acc, *_all_runs(e, s, c))
    return _result(model, s, ids, accs, meta, all_acc if want_all else None, float(clean_ce), dense_threshold)


def _result(
    model: Model,
    s: _Set,
    ids: Tensor,
    accs: list[_Acc],
    meta: list[tuple[int, str, int]],
    all_acc: Optional[_Acc],
    clean_sum: float,
    dense_threshold: float,
) -> DictionaryEvaluation:
    """The scores from the running sums (module docstring)."""
    n, T = ids.shape
    N, P = n * (T - 1), n * (T - 2)
    nan = torch.tensor(math.nan, dtype=torch.float64, device=model.device)
    cols: dict[str, list[Tensor]] = {k: [] for k in _STATS + ("kl_zero",)}
    ce_clean = clean_sum / P
    for acc in accs + ([all_acc] if all_acc is not None else []):
        recon = acc.active.numel() > 0
        var = acc.sq - acc.sum.pow(2).sum() / N
        ce_s, ce_z = acc.ce_s / P, acc.ce_z / P
        cols["fvu"].append(acc.err / var.clamp_min(1e-300) if recon else nan)
        cols["l0"].append(acc.active.sum() / N if recon else nan)
        cols["dead_fraction"].append((acc.active == 0).double().mean() if recon else nan)
        cols["dense_fraction"].append((acc.active / N > dense_threshold).double().mean() if recon else nan)
        cols["ce_spliced"].append(ce_s)
        cols["ce_zero"].append(ce_z)
        gap = ce_z - ce_clean
        cols["loss_recovered"].append(1 - (ce_s - ce_clean) / gap if abs(float(gap)) > 1e-12 else nan)
        cols["kl_spliced"].append(acc.kl_s / P)
        cols["kl_zero"].append(acc.kl_z / P)
    labels = [f"L{l}" if site == "mlp_out" else f"L{l}.{site}" for l, site, _ in meta]
    n_feat = [f for _, _, f in meta]
    return DictionaryEvaluation(
        row_labels=labels + (["all"] if all_acc is not None else []),
        kind=s.kind,
        layers=[l for l, _, _ in meta] + ([-1] if all_acc is not None else []),
        sites=[site for _, site, _ in meta] + (["mlp_out"] if all_acc is not None else []),
        n_features=n_feat + ([0] if all_acc is not None else []),
        density=torch.cat([a.active / N for a in accs])
        if accs
        else torch.zeros(0, dtype=torch.float64, device=model.device),
        ce_clean=ce_clean,
        n_tokens=N,
        n_predictions=P,
        dense_threshold=float(dense_threshold),
        model_name=model.name,
        **{k: torch.stack(v) for k, v in cols.items()},
    )
