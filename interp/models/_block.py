"""The transformer block, described once: the ordered steps of one layer, which every forward interprets.

A block is a short program over one stream register (the residual stream x) and two sublayer registers
(``attn`` and ``mlp``: what the sublayer read, then what it wrote). Its steps:

* ``point(site)`` — a named place where a forward may patch or keep a tensor: ``resid_pre`` / ``resid_mid`` /
  ``resid_post`` hold the stream, ``attn_out`` / ``mlp_out`` a sublayer's output as it joins the stream;
* ``read(sub, norm)`` — sublayer ``sub`` reads the stream, through pre-norm ``norm`` ("ln1", "ln2") or raw (None);
* ``apply(sub)`` — the sublayer itself (attention, the MLP) on what it read;
* ``out_norm(sub, norm)`` — a norm on the sublayer's output before it is added ("ln1_post", "ln2_post");
* ``add(sub)`` — the sublayer's output joins the stream, x ← x + out;
* ``norm(norm)`` — a norm of the whole stream (post-norm blocks: "ln1" after the attention's add, "ln2" after
  the MLP's).

The families' blocks (nanoGPT's ``x = x + attn(ln_1(x))`` written as data; docs/architecture.md):

    pre-norm   pre · read attn ln1 · attn · add attn · mid · read mlp ln2 · mlp · add mlp · post
    sandwich   … attn · out_norm attn ln1_post · add attn … mlp · out_norm mlp ln2_post · add mlp …
    output     (OLMo 2) as sandwich, with both reads raw (no pre-norm)
    parallel   pre · read attn ln1 · read mlp ln2 · attn · mlp · add attn · add mlp · post
    post-norm  pre · read attn · attn · add attn · norm ln1 · mid · read mlp · mlp · add mlp · norm ln2 · post

A forward is an interpreter of these steps (:func:`run_block` with its own :class:`BlockOps`): the engine runs
them live with patch points, the replacement model with frozen scales, the gradient pass keeps what autograd
needs; the linearised maps walk them forwards and backwards (:meth:`Block.walk`). Analyses that only ask a
question of the wiring — does the MLP read this layer's attention? is the stream normed after a join? — ask
the description (:class:`Block`'s queries), never the configuration flags, which only this module reads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Protocol

from interp.errors import UnsupportedArchitectureError
from interp.models._arch import ArchInfo

__all__ = ["Block", "BlockOps", "Step", "describe_block", "run_block"]

SUBLAYERS = ("attn", "mlp")


@dataclass(frozen=True)
class Step:
    """One step of a block: ``op`` ∈ point | read | apply | out_norm | add | norm (module docstring); ``sub`` the
    sublayer ("attn" | "mlp") of read/apply/out_norm/add, ``site`` the name of a point, ``norm`` the norm id of
    read/out_norm/norm ("ln1", "ln2", "ln1_post", "ln2_post"; None: a raw read)."""

    op: str
    sub: str = ""
    site: str = ""
    norm: Optional[str] = None

    def __str__(self) -> str:
        arg = self.site or " ".join(x for x in (self.sub, self.norm or "") if x)
        return f"{self.op} {arg}".strip()


@dataclass(frozen=True)
class Block:
    """One layer's ordered :class:`Step` s, and the questions analyses ask of the wiring."""

    steps: tuple[Step, ...]
    layout: str  # what the block is called: "pre-norm", "sandwich-norm", "output-norm", "post-norm", "parallel …"

    def __str__(self) -> str:
        return " · ".join(map(str, self.steps))

    def walk(self, *, reverse: bool = False) -> Iterator[Step]:
        """The steps in order, or last to first (a backward map's order)."""
        return iter(self.steps[::-1] if reverse else self.steps)

    def _index(self, op: str, sub: str) -> int:
        if sub not in SUBLAYERS:
            raise ValueError(f"sub={sub!r}: a block's sublayers are {SUBLAYERS}")
        for i, s in enumerate(self.steps):
            if s.op == op and s.sub == sub:
                return i
        return -1

    @property
    def has_mlp(self) -> bool:
        return self._index("apply", "mlp") >= 0

    def read_norm(self, sub: str) -> Optional[str]:
        """The pre-norm sublayer ``sub`` reads the stream through ("ln1", "ln2"), or None: it reads it raw."""
        i = self._index("read", sub)
        return self.steps[i].norm if i >= 0 else None

    def out_norm(self, sub: str) -> Optional[str]:
        """The norm on sublayer ``sub``'s output before it is added ("ln1_post" / "ln2_post"), or None."""
        i = self._index("out_norm", sub)
        return self.steps[i].norm if i >= 0 else None

    def stream_norm(self, sub: str) -> Optional[str]:
        """The norm of the whole stream right after sublayer ``sub``'s add (post-norm: "ln1" / "ln2"), or None."""
        i = self._index("add", sub)
        nxt = self.steps[i + 1] if 0 <= i < len(self.steps) - 1 else None
        return nxt.norm if nxt is not None and nxt.op == "norm" else None

    @property
    def normed_stream(self) -> bool:
        """The stream itself is normed after each join (post-norm): a write reaches a later reader only through
        those norms, and the residual stream is not a sum of the writes."""
        return any(s.op == "norm" for s in self.steps)

    @property
    def sublayer_norms(self) -> bool:
        """A norm on the sublayers' outputs before they are added (sandwich / output norms)."""
        return any(s.op == "out_norm" for s in self.steps)

    @property
    def reads_normed(self) -> bool:
        """The sublayers read the stream through pre-norms of their own (each read's norm is not None)."""
        return self.read_norm("attn") is not None

    def sees(self, reader: str, writer: str) -> bool:
        """True iff sublayer ``reader``'s read of this block comes after sublayer ``writer``'s add: the MLP of a
        sequential block sees its attention, a parallel block's does not."""
        r, w = self._index("read", reader), self._index("add", writer)
        return r >= 0 and 0 <= w < r

    @property
    def points(self) -> tuple[str, ...]:
        """The sites of the block's points, in order (``resid_mid`` only where the stream has a middle)."""
        return tuple(s.site for s in self.steps if s.op == "point")

    def resid_sites(self) -> tuple[str, ...]:
        """The points on the stream: resid_pre, (resid_mid,) resid_post."""
        return tuple(p for p in self.points if p.startswith("resid_"))


def _sublayer(sub: str, read: Optional[str], out: Optional[str]) -> list[Step]:
    steps = [Step("read", sub, norm=read), Step("apply", sub)]
    if out is not None:
        steps.append(Step("out_norm", sub, norm=out))
    return steps + [Step("point", site=f"{sub}_out")]


@functools.lru_cache(maxsize=64)
def describe_block(arch: ArchInfo, has_mlp: Optional[bool] = None) -> Block:
    """``arch``'s block (module docstring). ``has_mlp`` overrides ``not arch.attn_only`` (a model whose MLP
    weights are empty, e.g. a tracr program without MLPs)."""
    if arch.norm_placement not in ("pre", "post"):
        raise UnsupportedArchitectureError(
            f"model {arch.name!r}: norm_placement={arch.norm_placement!r}; a block's norms are placed 'pre' or 'post'"
        )
    mlp = (not arch.attn_only) if has_mlp is None else has_mlp
    post = arch.norm_placement == "post"
    normed = arch.norm != "none"
    pre = normed and not post and arch.pre_norms
    sandwich = normed and not post and arch.sandwich_norms
    n1, n2 = ("ln1", "ln2") if pre else (None, None)
    o1, o2 = ("ln1_post", "ln2_post") if sandwich else (None, None)
    attn = _sublayer("attn", n1, o1)
    ffn = _sublayer("mlp", n2, o2) if mlp else []
    head, tail = [Step("point", site="resid_pre")], [Step("point", site="resid_post")]
    if arch.parallel_attn_mlp:
        # both sublayers read x; each applies after both reads, and the outputs join in the order attn, mlp
        reads = [attn[0]] + ([ffn[0]] if mlp else [])
        body = reads + attn[1:] + ffn[1:] + [Step("add", "attn")] + ([Step("add", "mlp")] if mlp else [])
        layout = "parallel " + ("pre-norm" if pre else "no-norm")
    else:
        body = attn + [Step("add", "attn")]
        if post and normed:
            body.append(Step("norm", norm="ln1"))
        if mlp:
            body += [Step("point", site="resid_mid")] + ffn + [Step("add", "mlp")]
            if post and normed:
                body.append(Step("norm", norm="ln2"))
        layout = (
            "post-norm"
            if post
            else "sandwich-norm"
            if sandwich and pre
            else "output-norm"
            if sandwich
            else "pre-norm"
            if pre
            else "no-norm"
        )
    return Block(steps=tuple(head + body + tail), layout=layout)


class BlockOps(Protocol):
    """What a forward does at each step (:func:`run_block`); ``Any`` is the forward's own value type (a tensor,
    a tensor with its gradient, …)."""

    def point(self, site: str, value: Any) -> Any: ...

    def read(self, sub: str, norm: Optional[str], stream: Any) -> Any: ...

    def apply(self, sub: str, read: Any) -> Any: ...

    def out_norm(self, sub: str, norm: str, out: Any) -> Any: ...

    def add(self, sub: str, stream: Any, out: Any) -> Any: ...

    def norm(self, norm: str, stream: Any) -> Any: ...


def run_block(block: Block, ops: BlockOps, x: Any) -> Any:
    """Interpret ``block`` on the stream ``x`` with ``ops``: the stream after the block.

    A point on the stream (``resid_*``) sees the stream; one named ``{sub}_out`` sees that sublayer's output."""
    stream = x
    reads: dict[str, Any] = {}
    outs: dict[str, Any] = {}
    for s in block.steps:
        if s.op == "point":
            if s.site.startswith("resid_"):
                stream = ops.point(s.site, stream)
            else:
                sub = s.site[: -len("_out")]
                outs[sub] = ops.point(s.site, outs[sub])
        elif s.op == "read":
            reads[s.sub] = ops.read(s.sub, s.norm, stream)
        elif s.op == "apply":
            outs[s.sub] = ops.apply(s.sub, reads.pop(s.sub))
        elif s.op == "out_norm":
            outs[s.sub] = ops.out_norm(s.sub, s.norm, outs[s.sub])  # type: ignore[arg-type]
        elif s.op == "add":
            stream = ops.add(s.sub, stream, outs.pop(s.sub))
        elif s.op == "norm":
            stream = ops.norm(s.norm, stream)  # type: ignore[arg-type]
        else:
            raise AssertionError(f"unknown block step {s}")
    return stream
