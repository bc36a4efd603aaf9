"""The circuit viewer's hover text: an edge's score and exact patching effect, a node's described facts and the
summed scores of the edges out of it and into its input ports."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping, Optional

import numpy as np

from interp import labels as L
from interp._validate import is_real
from interp.plots._circuit_layout import Grid, Node
from interp.plots._common import esc, fmt

__all__ = ["edge_hovers", "node_hovers"]


def edge_hovers(
    w_txt: list[str], r_txt: list[str], s: np.ndarray, ex: Optional[np.ndarray], keep: np.ndarray, score_name: str
) -> list[str]:
    """Each drawn edge's hover: writer → reader, its score and its exact patching effect where computed."""
    hov = []
    for k, i in enumerate(keep):
        h = f"<b>{esc(w_txt[k])} {L.ARROW} {esc(r_txt[k])}</b><br>{esc(score_name)} {fmt(float(s[i]))}"
        if ex is not None:
            h += (
                f"<br>exact patching effect {fmt(float(ex[i]))}"
                if math.isfinite(ex[i])
                else "<br>exact effect not computed"
            )
        hov.append(h)
    return hov


def node_hovers(
    nodes: Mapping[str, Node],
    edges: list[str],
    s: np.ndarray,
    node_info: Any,
    node_value: str,
    score_name: str,
    grid: Grid,
) -> tuple[dict[str, str], dict[str, float]]:
    """Each node's hover text and colour value; degrees and summed scores over every given edge."""
    deg_in: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    deg_out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for edge, v in zip(edges, s):
        w, _, r = str(edge).partition(L.ARROW)
        deg_out[w][0] += 1
        deg_out[w][1] += float(v) if math.isfinite(v) else 0.0
        deg_in[r][0] += 1
        deg_in[r][1] += float(v) if math.isfinite(v) else 0.0
    info = node_info or {}
    hover, value = {}, {}
    for n in nodes.values():
        lines = [f"<b>{esc(n.label)}</b>" + _kind_note(n, parsed_lab=L.parse(n.label), grid=grid)]
        lines += _info_lines(info.get(n.label))
        if n.label in deg_out:
            n_e, tot = deg_out[n.label]
            lines.append(f"out: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        if n.label in deg_in:
            n_e, tot = deg_in[n.label]
            lines.append(f"in: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        for port in _input_ports(n, grid):  # a head's or an MLP's inputs are read through its ports
            if port in deg_in:
                n_e, tot = deg_in[port]
                lines.append(f"in via {esc(port)}: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        hover[n.label] = "<br>".join(lines)
        v = (info.get(n.label) or {}).get(node_value) if n.kind != "port" else None
        value[n.label] = float(v) if is_real(v) else math.nan
    return hover, value


def _info_lines(info: Optional[Mapping[str, Any]]) -> list[str]:
    """``key: value`` hover lines; numbers formatted, text escaped, lists one item per line."""
    out = []
    for k, v in (info or {}).items():
        if isinstance(v, (list, tuple)):
            items = [fmt(float(x)) if is_real(x) else esc(x) for x in v]
            out.append(f"{esc(k)}:<br>&nbsp;&nbsp;" + "<br>&nbsp;&nbsp;".join(items))
        elif is_real(v):
            out.append(f"{esc(k)}: {fmt(float(v))}")
        else:
            out.append(f"{esc(k)}: {esc(v)}")
    return out


def _input_ports(n: Node, grid: Grid) -> list[str]:
    """The read labels through which a head (its q, its KV head's k and v) or an MLP (in, gate) is read."""
    lab = L.parse(n.label)
    if isinstance(lab, L.Head):
        g = lab.head // grid.group
        return [
            str(L.HeadInput(lab.layer, "q", lab.head)),
            str(L.HeadInput(lab.layer, "k", g)),
            str(L.HeadInput(lab.layer, "v", g)),
        ]
    if isinstance(lab, L.Mlp):
        return [str(L.MlpInput(lab.layer, "in")), str(L.MlpInput(lab.layer, "gate"))]
    return []


def _n_edges(n: float) -> str:
    return "1 edge" if int(n) == 1 else f"{int(n)} edges"


def _kind_note(n: Node, *, parsed_lab: Any, grid: Grid) -> str:
    lab = parsed_lab
    if isinstance(lab, L.HeadInput):
        if lab.which == "q":
            return f" — query input of head {lab.head}"
        qs = grid.kv_readers(lab)
        shared = f", read by query heads {', '.join(h.split('.')[-1] for h in qs)}" if grid.group > 1 else ""
        return f" — {'key' if lab.which == 'k' else 'value'} input of KV head {lab.head}{shared}"
    if isinstance(lab, L.MlpInput):
        return " — MLP input" if lab.which == "in" else " — MLP gate input"
    return ""
