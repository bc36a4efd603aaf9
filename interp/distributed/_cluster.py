"""RayCluster: dataset-level sweeps sharded over Ray actors, merged exactly, resumable from ``out=DIR``.

``interp.patch(model, clean, corrupt, metric=..., cluster=interp.RayCluster(workers=2))`` cuts the prompt
pairs into contiguous shards, runs interp's own function (``cluster=None``) on each shard in a worker and
merges the shards' results exactly (:mod:`interp.distributed._merge`). Workers are Ray actors that load the
model once, from its own source (catalog name, local folder or ``.gguf``, hub id: never weights through the
object store). A worker whose process dies mid-sweep is restarted by Ray and its shard retried (the actor's
``max_restarts`` / ``max_task_retries``; the driver resubmits it to a new worker if that fails too); the
result records how many workers were restarted and shards resubmitted, and that none was lost. A shard that fails
deterministically (bad input) fails the sweep with an error naming the shard and the first prompt that fails on its own.
With ``out=DIR`` each finished shard is written there (safetensors + JSON, each atomically) and a rerun
computes only the shards that are missing. Ray is imported only when a cluster is made.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from tqdm.auto import tqdm

from interp._io import atomic_write
from interp.distributed._merge import MERGES
from interp.distributed._shard import fingerprint, input_keys, model_source, n_prompts, shard_bounds, take_args
from interp._validate import check_int_min, check_positive_int
from interp.errors import ArgumentError, CompletenessWarning, InterpError, MissingPackageError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["RayCluster", "DEFAULT_OBJECT_STORE"]

log = logging.getLogger(__name__)

#: the object store's default cap: 1 GiB (shard results are per-prompt score tensors, never weights)
DEFAULT_OBJECT_STORE = 1 << 30
_RETRIES = 3


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise MissingPackageError("interp.RayCluster needs Ray: pip install 'interp[distributed]' (or ray>=2.9)") from e
    return ray


def _functions() -> dict[str, Callable[..., Any]]:
    from interp.attribution import attribute_logits
    from interp.causal import attribution_patch, effects, patch
    from interp.edges import edge_attribution, evaluate_circuit, faithfulness_curve
    from interp.features import aggregate_graphs

    return {
        "patch": patch,
        "effects": effects,
        "attribution_patch": attribution_patch,
        "edge_attribution": edge_attribution,
        "evaluate_circuit": evaluate_circuit,
        "attribute_logits": attribute_logits,
        "faithfulness_curve": faithfulness_curve,
        "aggregate_graphs": aggregate_graphs,
    }


#: arguments that are the same for every shard and large (transcoders: weights, but inputs of the call rather than the
#: model, so they cannot be reloaded by the workers): put in the object store once per sweep
_SHARED = ("transcoders",)

#: the sharded functions that take progress= (the workers run them without a bar; the driver shows one)
_WITH_PROGRESS = ("patch", "effects", "edge_attribution", "attribute_logits", "faithfulness_curve", "aggregate_graphs")


class _Worker:
    """One Ray actor: the model loaded once from its source; runs interp's own function on a shard."""

    def __init__(self, source: str, dtype: str, device: str):
        import torch

        from interp.engine import load_model

        torch.set_num_threads(1)
        self.model = load_model(source, dtype=getattr(torch, dtype.replace("torch.", "")), device=device)

    def pid(self) -> int:
        return os.getpid()

    def run(self, fn: str, start: int, args: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``{"ok": result, "pid": ...}`` or ``{"error": ..., "prompt": first failing prompt or None}``; an argument
        the driver put in the object store once (:data:`_SHARED`) arrives as its reference and is read here."""
        f = _functions()[fn]
        args = {k: (_ray().get(v) if k in _SHARED and v is not None else v) for k, v in args.items()}
        try:
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                res = f(self.model, **args, **kwargs)
            return {
                "ok": res,
                "pid": os.getpid(),
                "warnings": [(w.category, str(w.message)) for w in caught],
                "seconds": time.perf_counter() - t0,
            }
        except Exception as e:  # reported to the driver, which raises it naming the shard
            return {"error": e, "prompt": self._first_failing(fn, f, start, args, kwargs), "pid": os.getpid()}

    def _first_failing(
        self, fn: str, f: Callable[..., Any], start: int, args: dict[str, Any], kwargs: dict[str, Any]
    ) -> Optional[int]:
        n = n_prompts(args[input_keys(fn)[0]])
        if n <= 1:
            return start
        for i in range(n):
            one = take_args(fn, args, n, i, i + 1)
            try:
                f(self.model, **one, **kwargs)
            except Exception:
                return start + i
        return None


def _distinct(x: Any) -> int:
    """How many distinct prompts an input holds (0 for None)."""
    import torch

    if x is None:
        return 0
    if isinstance(x, str):
        return 1
    if isinstance(x, torch.Tensor):
        return 1 if x.ndim == 1 else int(torch.unique(x, dim=0).shape[0])
    return len({tuple(v.tolist()) if isinstance(v, torch.Tensor) else str(v) for v in x})


def _write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=1)))


@dataclass
class _Tally:
    """What a sweep's run records: each computed shard's worker pid and seconds, how many shards were resubmitted
    after losing their worker and how many workers Ray restarted."""

    pids: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    retried: int = 0
    restarts: int = 0


class RayCluster:
    """A Ray cluster for sharded sweeps: ``RayCluster(workers=N)`` starts a local one (shut down by
    :meth:`shutdown` or on leaving a ``with`` block); ``RayCluster(address=...)`` joins an existing one (left
    running). ``object_store_memory``: the local object store's cap in bytes (default 1 GiB).
    ``shards_per_worker``: how many contiguous shards each worker gets (default 2; more shards = finer
    resume and retries). Pass it as ``cluster=`` to :func:`interp.attribute_logits`, :func:`interp.patch`,
    :func:`interp.effects`, :func:`interp.attribution_patch`, :func:`interp.edge_attribution`,
    :func:`interp.evaluate_circuit`, :func:`interp.faithfulness_curve` or
    :func:`interp.features.aggregate_graphs`.
    """

    def __init__(
        self,
        workers: Optional[int] = None,
        *,
        address: Optional[str] = None,
        object_store_memory: Optional[int] = None,
        shards_per_worker: int = 2,
    ):
        workers = check_positive_int("workers", workers, allow_none=True)
        object_store_memory = check_positive_int("object_store_memory", object_store_memory, allow_none=True)
        check_int_min("shards_per_worker", shards_per_worker, 1)
        if address is not None and (not isinstance(address, str) or not address):
            raise ArgumentError(f"address={address!r} must be a Ray address string (e.g. 'ray://host:10001', 'auto')")
        if address is not None and object_store_memory is not None:
            raise ArgumentError(
                "object_store_memory= caps a local cluster's store; an existing cluster (address=) keeps its own"
            )
        if address is None and workers is None:
            raise ArgumentError("RayCluster() needs workers=N (a local cluster) or address=... (an existing one)")
        ray = _ray()
        t0 = time.perf_counter()
        self.address = address
        self._owned = address is None and not ray.is_initialized()
        self._connected = not ray.is_initialized()  # this object connected the process (so it disconnects it)
        if address is not None:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        elif self._owned:
            # Ray 2.60 turns token authentication on for a cluster it starts and says so at WARNING on every start
            # (unless RAY_AUTH_MODE is set): the cluster is this process's own, so the notice is silenced here
            # and the authentication itself left as Ray sets it
            auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
            level = auth_log.level
            auth_log.setLevel(logging.ERROR)
            try:
                ray.init(
                    num_cpus=workers,
                    object_store_memory=object_store_memory or DEFAULT_OBJECT_STORE,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            finally:
                auth_log.setLevel(level)
        self.workers = int(workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
        self.shards_per_worker = shards_per_worker
        self.start_seconds = time.perf_counter() - t0
        self._actors: dict[tuple[str, str, str], list[Any]] = {}
        self._after_shard: Optional[Callable[[int, "RayCluster"], None]] = None  # tests: fault injection
        log.info("RayCluster: %d workers (%s) in %.1f s", self.workers, address or "local", self.start_seconds)

    def __enter__(self) -> "RayCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"RayCluster(workers={self.workers}, {'address=' + repr(self.address) if self.address else 'local'})"

    def shutdown(self) -> None:
        """Kill this cluster's workers; a local cluster it started is shut down too, a joined one is left running
        (this process disconnects from it)."""
        ray = _ray()
        for actors in self._actors.values():
            for a in actors:
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # already gone
                    pass
        self._actors.clear()
        if self._connected and ray.is_initialized():
            ray.shutdown()  # a local cluster started here stops; a joined one only loses this driver

    def actors(self, model: Model) -> list[Any]:
        """The workers holding ``model`` (started on first use: each loads it from its source)."""
        ray = _ray()
        key = (model_source(model), str(model.dtype), str(model.device))
        if key not in self._actors:
            cls = ray.remote(num_cpus=1, max_restarts=_RETRIES, max_task_retries=_RETRIES)(_Worker)
            self._actors[key] = [cls.remote(*key) for _ in range(self.workers)]
        return self._actors[key]

    def worker_pids(self, model: Model) -> list[int]:
        """The process id of each worker holding ``model``."""
        return [int(p) for p in _ray().get([a.pid.remote() for a in self.actors(model)])]

    def sweep(
        self,
        fn: str,
        model: Model,
        *,
        out: Optional[Union[str, os.PathLike]] = None,
        progress: bool = True,
        **args: Any,
    ) -> Any:
        """``fn(model, **args)`` sharded over the prompts, merged exactly (what ``cluster=`` calls)."""
        require_model(model)
        # 1. the shards: the prompts cut into contiguous ranges (with out=, the manifest's when it is this sweep)
        if fn not in MERGES:
            raise ArgumentError(f"cluster=: {fn!r} is not sharded yet; the sharded functions are {sorted(MERGES)}")
        ray = _ray()
        result_cls, merge = MERGES[fn]
        source = model_source(model)
        n = n_prompts(args[input_keys(fn)[0]], input_keys(fn)[0])
        if args.get("corrupt") is not None and n_prompts(args["corrupt"], "corrupt") != n:
            raise ArgumentError(f"corrupt has {n_prompts(args['corrupt'], 'corrupt')} prompts but clean has {n}")
        args = self._ablation_args(fn, args)
        key = fingerprint(fn, source, model.dtype, args)
        bounds = shard_bounds(n, self.workers * self.shards_per_worker)
        folder = Path(out) if out is not None else None
        if folder is not None:
            bounds = self._prepare(folder, fn, key, bounds)
        # the dictionaries go through the object store once, not once per shard (workers read the reference)
        shared = {k: ray.put(args[k]) for k in _SHARED if args.get(k) is not None}

        # 2. the shards an earlier run finished (out=), the workers
        done = self._finished(folder, bounds, result_cls)
        resumed = len(done)
        actors = self.actors(model)

        # 3. every other shard run on a free worker (a lost worker replaced and its shard resubmitted)
        bar = tqdm(total=n, desc=f"{fn} on {len(actors)} workers", unit="prompt", disable=not progress)
        bar.update(sum(bounds[i][1] - bounds[i][0] for i in done))
        try:
            tally = self._run_shards(fn, model, actors, args, shared, n, bounds, done, folder, bar)
        finally:
            bar.close()

        # 4. the shards merged, the run recorded
        details = {
            "workers": len(actors),
            "shards": len(bounds),
            "bounds": [list(b) for b in bounds],
            "computed": len(bounds) - resumed,
            "resumed": resumed,
            "restarted_workers": tally.restarts,
            "resubmitted": tally.retried,
            "lost": 0,
            "worker_pids": [tally.pids.get(i) for i in range(len(bounds))],
            # each computed shard's time in its worker (None: resumed from out=), for throughput figures
            "shard_seconds": [tally.seconds.get(i) for i in range(len(bounds))],
        }
        return merge([done[i] for i in range(len(bounds))], details, model, args)

    @staticmethod
    def _finished(folder: Optional[Path], bounds: list[tuple[int, int]], result_cls: Any) -> dict[int, Any]:
        """The results of the shards ``folder`` holds whole (the result and its JSON), by shard (none without
        ``folder``)."""
        done: dict[int, Any] = {}
        if folder is not None:
            for i in range(len(bounds)):
                f = folder / f"shard-{i:05d}.safetensors"
                if f.is_file() and (folder / f"shard-{i:05d}.json").is_file():
                    done[i] = result_cls.load(f)
        return done

    def _run_shards(
        self,
        fn: str,
        model: Model,
        actors: list[Any],
        args: dict[str, Any],
        shared: dict[str, Any],
        n: int,
        bounds: list[tuple[int, int]],
        done: dict[int, Any],
        folder: Optional[Path],
        bar: Any,
    ) -> _Tally:
        """Every shard not in ``done`` run, each on a free worker as one frees up, its result put in ``done`` (and
        written to ``folder``). A worker whose process dies past Ray's own retries is replaced and its shard
        resubmitted (at most :data:`_RETRIES` times); a shard that fails raises (:meth:`_raise`). The shards'
        warnings are given here, each once (completeness warnings: the merged result's check gives its own)."""
        ray = _ray()
        todo = [i for i in range(len(bounds)) if i not in done]
        tries = {i: 0 for i in todo}
        tally = _Tally()
        known = {w: int(p) for w, p in enumerate(ray.get([a.pid.remote() for a in actors]))} if todo else {}
        warned: set[tuple[Any, str]] = set()
        pending: dict[Any, tuple[int, int]] = {}  # ref -> (shard, actor index)
        free = list(range(len(actors)))
        kw = {"progress": False} if fn in _WITH_PROGRESS else {}
        try:
            while todo or pending:
                while todo and free:
                    i, w = todo.pop(0), free.pop(0)
                    s, e = bounds[i]
                    shard = {**take_args(fn, args, n, s, e), **shared}
                    pending[actors[w].run.remote(fn, s, shard, kw)] = (i, w)
                ready, _ = ray.wait(list(pending), num_returns=1)
                ref = ready[0]
                i, w = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except ray.exceptions.RayActorError as err:  # the worker died past Ray's own retries
                    tries[i] += 1
                    tally.retried += 1
                    self._replace_worker(model, actors, w, i, bounds[i], tries[i], err)
                    known.pop(w, None)
                    todo.insert(0, i)
                    free.append(w)
                    continue
                free.append(w)
                if "error" in res:
                    self._raise(fn, i, bounds[i], res)
                done[i] = res["ok"]
                tally.pids[i] = res["pid"]
                tally.seconds[i] = float(res.get("seconds", float("nan")))
                if w in known and known[w] != res["pid"]:  # Ray restarted this worker (its process died)
                    tally.restarts += 1
                known[w] = res["pid"]
                for category, message in res.get("warnings", []):  # the shards' warnings, each once, here
                    if category is not CompletenessWarning and (category, message) not in warned:
                        warned.add((category, message))
                        warnings.warn(message, category, stacklevel=4)  # the call that passed cluster=
                if folder is not None:
                    self._write_shard(folder, i, bounds[i], res["ok"])
                bar.update(bounds[i][1] - bounds[i][0])
                if self._after_shard is not None:
                    self._after_shard(i, self)
        finally:
            for ref in pending:
                ray.cancel(ref, force=False)
        return tally

    @staticmethod
    def _replace_worker(
        model: Model, actors: list[Any], w: int, i: int, bound: tuple[int, int], tries: int, err: Exception
    ) -> None:
        """Worker ``w`` (which ran shard ``i``) is gone: a new actor in its place, unless the shard has lost its worker
        more than :data:`_RETRIES` times (then the sweep gives up, naming the shard)."""
        if tries > _RETRIES:
            raise InterpError(
                f"cluster=: shard {i} (prompts {bound[0]}–{bound[1] - 1}) lost its "
                f"worker {tries} times; giving up ({err})"
            ) from err
        log.warning("shard %d: worker %d died (%s); retrying on another worker", i, w, err)
        actors[w] = (
            _ray()
            .remote(num_cpus=1, max_restarts=_RETRIES, max_task_retries=_RETRIES)(_Worker)
            .remote(model_source(model), str(model.dtype), str(model.device))
        )

    @staticmethod
    def _ablation_args(fn: str, args: dict[str, Any]) -> dict[str, Any]:
        """``reference`` (mean ablation) goes whole to every shard; where it defaults to the corrupt prompts
        (``evaluate_circuit``, ``faithfulness_curve``) and they are not all one prompt, the whole corrupt input is
        passed as the reference, so no shard takes the mean of its own prompts only. A resample draw depends on
        the whole batch, so shards cannot reproduce it: refused. ``faithfulness_curve``'s scores travel without
        their per-prompt scores (only the mean ranks the edges)."""
        import dataclasses

        from interp.errors import UnsupportedOperationError

        ablations = list(args.get("ablations") or []) + [args.get("ablation")]
        if "resample" in ablations:
            raise UnsupportedOperationError(
                f"{fn}(..., cluster=...) with resample ablation: the resample draw depends "
                "on the whole batch, so shards cannot reproduce it; use 'mean' (with "
                "reference=), 'zero' or 'corrupt' (faithfulness_curve: pass ablations="
                "('corrupt', 'zero', 'mean')), or cluster=None"
            )
        if fn in ("evaluate_circuit", "faithfulness_curve"):
            args = {**args, "_reference_given": args.get("reference") is not None}
            if "mean" in ablations and args.get("reference") is None and _distinct(args.get("corrupt")) > 1:
                args["reference"] = args["corrupt"]
        if fn == "faithfulness_curve" and args.get("scores") is not None:
            sc = args["scores"]
            args["scores"] = dataclasses.replace(sc, per_prompt=sc.per_prompt[:, :0], exact=None)
        return args

    @staticmethod
    def _raise(fn: str, i: int, bound: tuple[int, int], res: dict[str, Any]) -> None:
        err, prompt = res["error"], res["prompt"]
        where = f"at prompt {prompt}" if prompt is not None else "(no prompt fails on its own)"
        msg = f"{fn}(cluster=...): shard {i} (prompts {bound[0]}–{bound[1] - 1}) failed {where}: {err}"
        cls = type(err) if isinstance(err, InterpError) else InterpError
        try:
            new = cls(msg)
        except Exception:
            new = InterpError(msg)
        raise new from err

    @staticmethod
    def _prepare(folder: Path, fn: str, key: str, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The sweep's manifest in ``folder``: a new one, or the existing one's shards when it is this sweep."""
        folder.mkdir(parents=True, exist_ok=True)
        manifest = folder / "sweep.json"
        if manifest.is_file():
            old = json.loads(manifest.read_text())
            if old.get("fingerprint") != key:
                raise ArgumentError(
                    f"out={str(folder)!r} holds the shards of another sweep ({old.get('function')!r} "
                    "with other inputs or options); give an empty or new folder"
                )
            return [(int(a), int(b)) for a, b in old["bounds"]]
        _write_json(manifest, {"function": fn, "fingerprint": key, "bounds": [list(b) for b in bounds]})
        return bounds

    @staticmethod
    def _write_shard(folder: Path, i: int, bound: tuple[int, int], result: Any) -> None:
        """``shard-i.safetensors`` (the result, written atomically), then ``shard-i.json`` (its prompt range):
        a shard counts as done only when both exist."""
        result.save(folder / f"shard-{i:05d}.safetensors")
        _write_json(folder / f"shard-{i:05d}.json", {"shard": i, "prompts": list(bound)})
