"""What the report pages share: timed steps, JSON values, the model argument and the output folder read, the model
card, token decoding and the static export of the figures (:func:`interp.reports.report`,
:func:`interp.reports.task_report`, :func:`interp.reports.weights_report`)."""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch

from interp.engine import load_model
from interp.errors import ArgumentError, ExportError
from interp.models import Model
from interp.models.internal import readable_token
from interp.plots import Exporter

log = logging.getLogger(__name__)


class _Steps:
    """Times named steps, logs them, and advances an optional tqdm bar."""

    def __init__(self, total: int, progress: bool, desc: str) -> None:
        self.times: dict[str, float] = {}
        self._bar = None
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="step")

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self._bar is not None:
            self._bar.set_postfix_str(name)
        log.log(logging.DEBUG if self._bar is not None else logging.INFO, "report: %s", name)  # the bar shows it
        t0 = time.perf_counter()
        yield
        self.times[name] = round(time.perf_counter() - t0, 3)
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _jsonable(x: Any) -> Any:
    """Tensors/arrays/NaN -> JSON values (NaN and inf become null)."""
    if torch.is_tensor(x):
        x = x.detach().cpu().double().numpy() if not x.is_complex() else x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "c":
            return [[_jsonable(float(v.real)), _jsonable(float(v.imag))] for v in x.ravel()]
        return _jsonable(x.tolist())
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, Path):
        return str(x)
    return x


def _resolve_model(model: Any) -> Model:
    if isinstance(model, str):
        return load_model(model)
    if not isinstance(model, Model):
        raise ArgumentError(
            f"model is a {type(model).__name__}; pass an interp Model (interp.load_model) or a catalog name"
        )
    return model


def _prepare_out_dir(out_dir: Any) -> Path:
    if out_dir is None or not isinstance(out_dir, (str, Path)):
        raise ArgumentError(f"out_dir={out_dir!r} must be a directory path (str or Path)")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"out_dir={str(out_dir)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create out_dir={str(out_dir)!r}: {e.strerror or e}") from e
    return out


def _model_card(model: Model) -> list[tuple[str, Any]]:
    a, block = model.arch, model.block
    norms = block.layout if a.norm == "none" else f"{block.layout} {a.norm}"
    wiring = (
        "attention only"
        if not block.has_mlp
        else "sequential"
        if block.sees("mlp", "attn")
        else "parallel attention + MLP"
    )
    rows = [
        ("name", model.name),
        ("family", a.family),
        ("source", getattr(model, "source", "") or "—"),
        ("layers", a.n_layers),
        ("heads (query / KV)", f"{a.n_heads} / {a.n_kv_heads}"),
        ("d_model / d_head / d_mlp", f"{a.d_model} / {a.d_head} / {a.d_mlp}"),
        ("vocabulary", a.d_vocab),
        ("context", a.n_ctx),
        ("norm", f"{norms} (ε = {a.norm_eps:g})"),
        ("positions", a.positional + (f" (rotary dim {a.rotary_dim})" if a.rotary_dim else "")),
        ("block", wiring),
        ("steps", str(block)),
        ("MLP", f"{'gated ' if a.gated_mlp else ''}{a.act_fn}"),
        ("causal", a.causal),
        ("unembedding", a.has_unembed),
        ("dtype / device", f"{model.dtype} / {model.device}"),
        ("weights", getattr(model, "provenance", "") or "—"),
    ]
    return rows


def _decode(model: Model) -> Any:
    tok = getattr(model, "tokenizer", None)
    return (lambda i: readable_token(tok, int(i))) if tok is not None else (lambda i: f"#{int(i)}")


def _export_static(
    figs: dict[str, Any], out: Path, exporter: Optional[Exporter], *, static: bool
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Each figure as PNG and SVG under ``out/figures`` through one browser; (files, seconds per file)."""
    files: dict[str, list[str]] = {name: [] for name in figs}
    seconds: dict[str, float] = {}
    if not static:
        return files, seconds
    (out / "figures").mkdir(exist_ok=True)
    ex = exporter if exporter is not None else Exporter()
    try:
        for name, fig in figs.items():
            for suf in ("png", "svg"):
                t0 = time.perf_counter()
                ex.export(fig, out / "figures" / f"{name}.{suf}")
                seconds[f"{name}.{suf}"] = round(time.perf_counter() - t0, 3)
                files[name].append(f"figures/{name}.{suf}")
    finally:
        if exporter is None:
            ex.close()
    return files, seconds
