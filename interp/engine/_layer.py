"""The live forward's interpreter of the block: each step of :attr:`interp.models.Model.block` run on a batch's
rows, each point's patches written and its value kept when captured (:meth:`interp.engine.internal.Engine.layer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from torch import Tensor

from interp.engine._patches import MLPWrite, Patch, apply_patches

if TYPE_CHECKING:
    from interp.engine._forward import Engine

__all__ = ["LiveLayer"]


class LiveLayer:
    """:meth:`Engine.layer`'s interpreter of the block (:class:`interp.models.internal.BlockOps`): each step run on the
    rows, each point's patches written and its value kept when captured."""

    def __init__(
        self,
        e: "Engine",
        l: int,
        by: dict[str, list[Patch]],
        cap: set[str],
        store: Optional[dict[str, Tensor]],
        *,
        t0: int,
        prompt: Tensor,
        mask: Tensor,
        prefix: Optional[tuple[Tensor, Tensor]],
        inplace: bool,
        writes: Sequence[MLPWrite] = (),
        scales: Optional[dict[str, Tensor]] = None,
        record: Optional[dict[str, Tensor]] = None,
    ):
        self.e, self.l, self.by, self.cap, self.store = e, l, by, cap, store
        self.t0, self.prompt, self.mask, self.prefix, self.inplace = t0, prompt, mask, prefix, inplace
        self.x: Optional[Tensor] = None  # the stream the attention read (its q_in/k_in/v_in patches shift it)
        self.writes = writes  # MLP writes made from what the MLP reads in this pass
        self.h_mlp: Optional[Tensor] = None  # that input
        self.scales, self.record = scales or {}, record  # σ held per norm; σ of this pass kept per norm

    def wants(self, site: str) -> bool:
        return site in self.cap or (site.startswith("kv_") and "kv" in self.cap)

    def keep(self, site: str, t: Tensor) -> None:
        if self.store is not None and self.wants(site):
            self.store[site] = t

    def point(self, site: str, v: Tensor) -> Tensor:
        # ``inplace`` (the sweep's own rows): the stream is patched and updated in place
        v = apply_patches(v, self._patches(site), self.t0, inplace=self.inplace and site.startswith("resid_"))
        self.keep(site, v)
        return v

    def _patches(self, site: str) -> Optional[list[Patch]]:
        """The patches of ``site``; at ``mlp_out`` also each :class:`MLPWrite`'s, made from what the MLP read."""
        ps = self.by.get(site)
        if site != "mlp_out" or not self.writes:
            return ps
        assert self.h_mlp is not None  # the MLP has read before it writes
        made = [q for q in (w.patch(self.h_mlp) for w in self.writes) if q is not None]
        return [*(ps or ()), *made]

    def _norm(self, norm: Optional[str], x: Tensor) -> Tensor:
        """x through the layer's norm ``norm``: its σ kept (``record``) and held where ``scales`` gives one."""
        if norm is None:
            return x
        if self.record is not None:
            self.record[norm] = self.e.norm_scale(x)
        sigma = self.scales.get(norm)
        if sigma is None:
            return self.e.norm_at(norm, self.l, x)
        return self.e.frozen_norm_at(norm, self.l, x, sigma)

    def read(self, sub: str, norm: Optional[str], stream: Tensor) -> Tensor:
        h = self._norm(norm, stream)
        if norm is not None:  # a pre-norm's input and output ("ln1_in", "ln1_out"), kept when captured
            self.keep(f"{norm}_in", stream)
        if sub == "attn":
            self.x = stream
            if norm is not None:
                self.keep(f"{norm}_out", h)
            return h
        for p in self.by.get("mlp_in", ()):  # one reader sees the residual shifted by p.value
            h = h.clone() if h is stream else h
            h[p.rows] = self.e.norm_at(norm, self.l, stream[p.rows] + p.value)
        self.h_mlp = h
        if norm is not None:
            self.keep(f"{norm}_out", h)
        return h

    def apply(self, sub: str, h: Tensor) -> Tensor:
        if sub == "attn":
            assert self.x is not None
            return self.e.attention_live(self.l, self.x, h, self)
        return self.e.mlp(self.l, h, keep=self.keep if self.wants("mlp_post") else None)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        self.keep(f"{norm}_in", out)
        y = self._norm(norm, out)
        self.keep(f"{norm}_out", y)
        return y

    def add(self, sub: str, stream: Tensor, out: Tensor) -> Tensor:
        return stream.add_(out) if self.inplace else stream + out

    def norm(self, norm: str, stream: Tensor) -> Tensor:
        self.keep(f"{norm}_in", stream)
        out = self.e.norm_at(norm, self.l, stream)
        self.keep(f"{norm}_out", out)
        return out
