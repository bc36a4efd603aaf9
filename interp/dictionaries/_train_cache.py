"""Where :func:`interp.features.train_transcoders` keeps a run: its resumable checkpoint and its finished dictionaries.

``<cache>/transcoders/<model>/<config hash>/``: ``checkpoint.pt`` (the whole training state: parameters, Adam
moments, dead-feature counters, scales, step) while training; when finished, the dictionaries (per-layer
``layer_{l}.safetensors``, metadata k, layer, context_length; a cross-layer transcoder in circuit-tracer's layout,
``W_enc_{i}`` / ``W_dec_{i}.safetensors`` and ``config.yaml``), their scores (``evaluation.safetensors``, and
``transfer.safetensors`` on text of another source) and ``metrics.json``, written last: its presence marks a
finished run. Every file is written atomically (:func:`interp._io.atomic_write`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import torch

from interp._io import atomic_write, write_safetensors
from interp.errors import ResultFormatError
from interp.dictionaries._evaluate import DictionaryEvaluation
from interp.dictionaries._formats import clt_files, read_clt
from interp.dictionaries._train_state import TrainState
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder

__all__ = ["load_final", "resume", "save_checkpoint", "save_final"]

_EVALS = ("evaluation", "transfer")


def save_checkpoint(path: Path, s: TrainState, opt: torch.optim.Optimizer, step: int) -> None:
    """The whole state after ``step`` steps (parameters, dead-feature counters, scales, Adam), atomically."""
    st = {
        "params": [p.detach() for p in s.params()],
        "since": s.since,
        "sx": s.sx,
        "sy": s.sy,
        "opt": opt.state_dict(),
        "step": step,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: torch.save(st, p))


def resume(path: Path, s: TrainState, opt: torch.optim.Optimizer) -> int:
    """Load the checkpoint at ``path`` into ``s`` and ``opt``; returns its step. A checkpoint that cannot be read, or
    whose tensors do not fit this run, is a :class:`ResultFormatError` (training on garbage is worse than starting
    again)."""
    try:
        st = torch.load(path, map_location="cpu", weights_only=True)
        params = s.params()
        got = [tuple(v.shape) for v in st["params"]]
        want = [tuple(p.shape) for p in params]
        if got != want:
            raise ValueError(f"its parameters have shapes {got}; this run's are {want}")
        with torch.no_grad():
            for p, v in zip(params, st["params"]):
                p.copy_(v)
        s.since, s.sx, s.sy = st["since"], st["sx"], st["sy"]
        opt.load_state_dict(st["opt"])
        return int(st["step"])
    except Exception as ex:  # a damaged checkpoint: start again rather than train on garbage
        raise ResultFormatError(
            f"checkpoint {str(path)!r} is damaged ({type(ex).__name__}: {ex}); delete it to start this run again"
        ) from None


def save_final(
    root: Path,
    layers: list[int],
    trained: Union[list[Transcoder], CrossLayerTranscoder],
    evals: dict[str, Optional[DictionaryEvaluation]],
    metrics: dict[str, Any],
) -> None:
    """The finished run (module docstring); ``metrics.json`` last."""
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(trained, CrossLayerTranscoder):
        files, config = clt_files(trained)
        for name, (ts, meta) in files.items():
            write_safetensors(root / name, {n: v.contiguous() for n, v in ts.items()}, meta)
        atomic_write(root / "config.yaml", lambda p: Path(p).write_text(config))
    else:
        for l, t in zip(layers, trained):
            meta = {"k": str(t.k), "layer": str(l)} | (
                {} if t.context_length is None else {"context_length": str(t.context_length)}
            )
            ts = {"W_enc": t.W_enc, "W_dec": t.W_dec, "b_enc": t.b_enc, "b_dec": t.b_dec}
            if t.W_skip is not None:
                ts["W_skip"] = t.W_skip
            write_safetensors(root / f"layer_{l}.safetensors", {n: v.contiguous() for n, v in ts.items()}, meta)
    for name, ev in evals.items():
        if ev is not None:
            ev.save(root / f"{name}.safetensors")
    atomic_write(root / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))


def load_final(
    root: Path,
) -> tuple[Union[list[Transcoder], CrossLayerTranscoder], dict[str, Optional[DictionaryEvaluation]], dict[str, Any]]:
    """(dictionaries, evaluations, metrics) of a finished run at ``root``; a damaged one is a ResultFormatError."""
    from safetensors import safe_open

    try:
        metrics = json.loads((root / "metrics.json").read_text())
        evals = {
            n: DictionaryEvaluation.load(root / f"{n}.safetensors") if (root / f"{n}.safetensors").is_file() else None
            for n in _EVALS
        }
        if metrics["config"].get("cross_layer"):
            clt = read_clt(root)
            if list(clt.model_layers) != metrics["layers"] or clt.k != metrics["config"]["k"]:
                raise ValueError(
                    f"its files hold layers {list(clt.model_layers)}, k={clt.k}; metrics.json says "
                    f"{metrics['layers']}, k={metrics['config']['k']}"
                )
            return clt, evals, metrics
        tcs = []
        for l in metrics["layers"]:
            with safe_open(str(root / f"layer_{l}.safetensors"), framework="pt") as f:
                t = {k: f.get_tensor(k) for k in f.keys()}
            tcs.append(
                Transcoder(
                    t["W_enc"],
                    t["b_enc"],
                    t["W_dec"],
                    t["b_dec"],
                    W_skip=t.get("W_skip"),
                    activation="topk",
                    k=metrics["config"]["k"],
                    context_length=metrics["config"].get("seq_len"),
                    layer=l,
                )
            )
    except Exception as e:  # OSError, JSON and safetensors' own errors, a bad shape
        raise ResultFormatError(
            f"the cached transcoders in {str(root)!r} are damaged ({type(e).__name__}: {e}); "
            "delete that directory to retrain"
        ) from None
    return tcs, evals, metrics
