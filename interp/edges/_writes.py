"""The writes of the circuit graph's writers in one run, and their differences between two runs.

A writer w writes a_w into the residual stream: an embedding part, a head's z_h W_O^h, an MLP's output.
:class:`Acts` keeps a run's writes compactly (the heads as z); :class:`EdgeWrites` lays them out in the
graph's writer order and gives ΔA_w = ã_w − a_w, the ablated minus this run's write, which EAP scores
(ΔA · Jᵀg) and circuit evaluation mixes into each reader's input.

A block with an output norm on its attention (``block.out_norm("attn")``: Gemma 2/3's sandwich norms, OLMo 2's
output norms): a head's write is its image through its layer's output norm at that run's own scale,
γ' ⊙ z_h W_O^h / σ'(Σ_h z_h W_O^h + b_O) — the heads' images sum to the normed attention output, so
every edge kept is the clean run and none the ablated run, exactly; an MLP's write is its normed output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from interp.engine.internal import Engine, RunCache
from interp.errors import UnsupportedArchitectureError
from interp.edges._graph import CircuitGraph
from interp.models import Model

__all__ = ["Acts", "EdgeWrites"]


@dataclass
class Acts:
    """A run's writes, compactly: the embedding parts [P, T, d], each layer's z [P, T, H, d_head] (head h
    writes z_h W_O^h) and each MLP's output [P, T, d] (None without MLPs). ``None`` in place of an Acts
    means zero ablation (every write 0)."""

    embed: dict[str, Tensor]
    z: list[Tensor]
    mlp: list[Optional[Tensor]]

    @classmethod
    def of(cls, run: RunCache) -> "Acts":
        """From an engine run that captured ``z`` and ``mlp_out``."""
        z = run.acts["z"]
        if any(t is None for t in z):
            raise RuntimeError("edges: the run did not capture z")
        return cls(embed=dict(run.embed), z=list(z), mlp=list(run.acts.get("mlp_out", [None] * len(z))))  # type: ignore[arg-type]

    def select(self, idx: Tensor) -> "Acts":
        """The prompts ``idx``."""
        return Acts(
            embed={k: v[idx] for k, v in self.embed.items()},
            z=[t[idx] for t in self.z],
            mlp=[None if t is None else t[idx] for t in self.mlp],
        )


class EdgeWrites:
    """One model's writers and readers in the circuit graph's order (where each layer's heads, MLP and
    readers sit) and the differences ΔA_w = ã_w − a_w of their writes (module docstring). The engine ``e``
    runs the block maths for the edge passes built on it (:class:`interp.edges.internal.ReaderGradients`,
    :class:`interp.edges.internal.EdgeScorer`, :class:`interp.edges.internal.AblatedForward`)."""

    def __init__(self, model: Model, graph: CircuitGraph, engine: Optional[Engine] = None):
        self.block = model.block
        if self.block.out_norm("attn") is not None and model.arch.attn_bias:
            raise UnsupportedArchitectureError(
                f"edge attribution and circuit evaluation: model {model.name!r} has an attention output bias under "
                "an output norm (its image changes with the run's scale and is no edge), which is not implemented"
            )
        self.model, self.g = model, graph
        self.e = engine if engine is not None else Engine.of(model)
        a = model.arch
        self.a, self.w = a, model.weights
        #: the stream is normed after each join (post-norm, :attr:`interp.models.Block.normed_stream`): a write
        #: reaches a later reader only through those norms
        self.post = self.block.normed_stream
        self.has_mlp = self.e.has_mlp
        self.W, self.R = len(graph.writers), len(graph.readers)
        wi, ri = graph.writer_info, graph.reader_info
        self.embed_idx = {w.site: i for i, w in enumerate(wi) if w.kind == "embed"}
        self.n_embed = len(self.embed_idx)
        self.head0 = [next(i for i, w in enumerate(wi) if w.kind == "head" and w.layer == l) for l in range(a.n_layers)]
        self.mlp_w = [
            next((i for i, w in enumerate(wi) if w.kind == "mlp" and w.layer == l), -1) for l in range(a.n_layers)
        ]
        self.q0 = [next(i for i, r in enumerate(ri) if r.kind == "q" and r.layer == l) for l in range(a.n_layers)]
        self.mlp_r = [
            next((i for i, r in enumerate(ri) if r.kind == "mlp" and r.layer == l), -1) for l in range(a.n_layers)
        ]
        self.out_r = self.R - 1
        self.H, self.Hkv, self.dh = a.n_heads, a.n_kv_heads, a.d_head

    def head_writes(self, l: int, z: Tensor) -> Tensor:
        """Each head's write z_h W_O^h, [P, H, T, d_model] (under an output norm on the attention: its image
        γ' ⊙ z_h W_O^h / σ' at the run's own σ' — the layer's output norm, shared by its heads)."""
        out = torch.einsum("pthe,hed->phtd", z, self.w.W_O[l])
        norm = self.block.out_norm("attn")
        if norm is None:
            return out
        gain = self.e.norm_weights(norm, l)[0]
        raw = self.e.attn_out(l, z)
        return out * ((1.0 if gain is None else gain) / self.e.norm_scale(raw))[:, None]

    def head_delta(self, l: int, abl: Optional[Acts], this: Acts) -> Tensor:
        """ã_h − a_h of layer l's heads, [P, H, T, d]: through Δz (one product), or under an output norm on the
        attention the difference of the two runs' images (each at its own σ'; zero ablation: the image is 0)."""
        if self.block.out_norm("attn") is None:
            return self.head_writes(l, (abl.z[l] - this.z[l]) if abl is not None else -this.z[l])
        mine = self.head_writes(l, this.z[l])
        return (self.head_writes(l, abl.z[l]) - mine) if abl is not None else -mine

    def delta(self, abl: Optional[Acts], this: Acts) -> Tensor:
        """ã_w − a_w for every writer, [P, W, T, d] (heads through Δz: one product per layer)."""
        out = self.delta_embed(abl, this)
        for l in range(self.a.n_layers):
            self.delta_layer(out, l, abl, this)
        return out

    def delta_embed(self, abl: Optional[Acts], this: Acts) -> Tensor:
        """[P, W, T, d] with the embedding writers' ã_w − a_w filled (the layers' rows by :meth:`delta_layer`)."""
        ref = next(iter(this.embed.values()))
        P, T, d = ref.shape
        out = torch.empty(P, self.W, T, d, dtype=ref.dtype, device=ref.device)
        for site, i in self.embed_idx.items():
            out[:, i] = (abl.embed[site] - this.embed[site]) if abl is not None else -this.embed[site]
        return out

    def delta_layer(self, out: Tensor, l: int, abl: Optional[Acts], this: Acts) -> None:
        """Fill layer l's writers' rows of ``out`` [P, W, T, d] with ã_w − a_w (its heads through Δz, one
        product with W_O^l: the gradient pass calls it while layer l's weights are in hand)."""
        out[:, self.head0[l] : self.head0[l] + self.H] = self.head_delta(l, abl, this)
        if self.mlp_w[l] >= 0:
            m = this.mlp[l]
            if m is None:
                raise RuntimeError(f"edges: no MLP output of layer {l} in the run")
            out[:, self.mlp_w[l]] = (abl.mlp[l] - m) if abl is not None else -m  # type: ignore[operator]

    def writer_delta(self, abl: Optional[Acts], this: Acts, i: int, p: int) -> Tensor:
        """ã_w − a_w of writer ``i`` for prompt ``p``, [T, d]."""
        wi = self.g.writer_info[i]
        if wi.kind == "embed":
            a = this.embed[wi.site][p]
            return (abl.embed[wi.site][p] - a) if abl is not None else -a
        if wi.kind == "head":
            if self.block.out_norm("attn") is not None:  # the images' difference (see head_delta)
                pick = torch.tensor([p], device=this.z[0].device)
                return self.head_delta(wi.layer, None if abl is None else abl.select(pick), this.select(pick))[
                    0, wi.head
                ]
            z = this.z[wi.layer][p, :, wi.head]
            dz = (abl.z[wi.layer][p, :, wi.head] - z) if abl is not None else -z
            return dz @ self.w.W_O[wi.layer, wi.head]
        m = this.mlp[wi.layer][p]  # type: ignore[index]
        return (abl.mlp[wi.layer][p] - m) if abl is not None else -m  # type: ignore[index]
