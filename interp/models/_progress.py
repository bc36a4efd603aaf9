"""The progress of a model load: one tqdm bar naming the step under way, and a log record per step with its time.

A first load of a GGUF catalog model (empty cache) takes minutes on a small machine: assembling the GGUF from its
packages, dequantizing it, writing and hashing the safetensors cache entry, loading the Hugging Face model, reading
its weights, booting the transformer-lens bridge and the self-check. Each is a step here: the bar shows it while it
runs (``progress=None``: only when the load builds a cache entry; True: always; False: never) and the logger
``interp.models`` records ``load_model(name): step in s`` at INFO when it ends (``record.step``, ``record.seconds``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from contextvars import ContextVar
from typing import Any, Iterator, Optional

from interp._validate import check_bool

__all__ = ["LoadProgress", "cold_load", "load_progress", "load_step"]

log = logging.getLogger("interp.models")


class LoadProgress:
    """The steps of one load: their times (``times``, seconds by step) and the bar (shown as described above)."""

    def __init__(self, name: str, show: Optional[bool]):
        self.name, self.show = name, show
        self.times: dict[str, float] = {}
        self._bar: Any = None
        self._active: Optional[str] = None
        if show:
            self._open()

    def _open(self) -> None:
        if self._bar is None and self.show is not False:
            from tqdm.auto import tqdm

            self._bar = tqdm(desc=f"load_model {self.name}", unit="step", bar_format="{desc} [{elapsed}]")

    def cold(self) -> None:
        """The load builds a cache entry (minutes): show the bar unless ``progress=False``."""
        self._open()

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        if self._active is not None:  # a step inside a step (one loader calling another): timed by the outer one
            yield
            return
        self._active = what
        if self._bar is not None:
            self._bar.set_description_str(f"load_model {self.name}: {what}", refresh=True)
        t = time.perf_counter()
        try:
            yield
        finally:
            self._active = None
            dt = time.perf_counter() - t
            self.times[what] = self.times.get(what, 0.0) + dt
            log.info(
                "load_model(%r): %s in %.1f s",
                self.name,
                what,
                dt,
                extra={"step": what, "seconds": dt, "model": self.name},
            )
            if self._bar is not None:
                self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_description_str(f"load_model {self.name}: done", refresh=True)
            self._bar.close()


_CURRENT: ContextVar[Optional[LoadProgress]] = ContextVar("interp_load_progress", default=None)


@contextlib.contextmanager
def load_progress(name: str, show: Optional[bool] = None) -> Iterator[LoadProgress]:
    """The load's :class:`LoadProgress`: a new one, or the one already under way (a load inside a load, e.g. the
    self-checking :func:`interp.load_model` around :func:`interp.models.load_model_unchecked`, shares one bar)."""
    check_bool("progress", show, none="automatic")
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    progress = LoadProgress(name, show)
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)
        progress.close()


def load_step(what: str) -> contextlib.AbstractContextManager[None]:
    """Time ``what`` as a step of the load under way (a no-op outside one)."""
    current = _CURRENT.get()
    return contextlib.nullcontext() if current is None else current.step(what)


def cold_load() -> None:
    """Tell the load under way that it builds a cache entry (its bar appears; see :class:`LoadProgress`)."""
    current = _CURRENT.get()
    if current is not None:
        current.cold()
