"""Static export (PNG/SVG/PDF) of many figures through one reused browser vs one browser per figure.

Builds the report's kinds of figures from a tiny model's results (attribution heatmap and
waterfall, residual stream, composition graph, attention patterns, copying map), then times

  (a) baseline: kaleido's one-shot ``kaleido.calc_fig_sync`` per figure (a new Chromium each time);
  (b) interp: ``interp.plots.Exporter`` — the first export (browser start included), then every
      later figure in every format through the same browser.

Prints seconds per figure for each, the ratio a/b, and whether the target (≤ 1 s per figure
after the first) is met. Exit status 1 if it is not.

    python benchmarks/bench_export.py [--rounds 2] [--baseline 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def build_figures() -> dict:
    import torch

    from tiny_models import tiny_model
    from interp.attribution import attribute_logits
    from interp.circuits import composition_graph
    from interp.plots import (
        attention_pattern_figure,
        attribution_heatmap,
        attribution_waterfall,
        copying_score_map,
        residual_stream_figure,
    )
    from interp.stream import attention_patterns, trace

    m = tiny_model("llama")
    prompt = "w1 w2 w3 w4 w5 w1 w2 w3"
    attr = attribute_logits(m, prompt, answer="w4", wrong="w6")
    g = torch.Generator().manual_seed(0)
    L, H = m.arch.n_layers, m.arch.n_heads
    scores = {k: torch.rand(L, H, L, H, generator=g) for k in "QKV"}
    return {
        "heatmap": attribution_heatmap(attr),
        "waterfall": attribution_waterfall(attr),
        "stream": residual_stream_figure(trace(m, prompt)),
        "graph": composition_graph(scores, max_edges=10),
        "patterns": attention_pattern_figure(attention_patterns(m, prompt, ["L0.H0", "L1.H1", "L1.H3"])),
        "copying": copying_score_map(torch.rand(L, H, generator=g) * 2 - 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="passes over all figures × formats through one browser")
    ap.add_argument("--baseline", type=int, default=3, help="figures exported with a fresh browser each (baseline)")
    args = ap.parse_args()

    import kaleido

    from interp.plots import Exporter
    from interp.plots._export import find_browser

    browser = find_browser()
    print(f"browser: {browser}")
    figs = build_figures()
    fmts = ("png", "svg", "pdf")

    # (a) baseline: a new browser for every figure (kaleido's one-shot sync API, no server running)
    base = []
    names = list(figs)[: args.baseline]
    for name in names:
        t0 = time.perf_counter()
        kaleido.calc_fig_sync(
            figs[name],
            opts={"format": "png", "width": figs[name].layout.width, "height": figs[name].layout.height},
            kopts={"mathjax": False, "path": browser},
        )
        base.append(time.perf_counter() - t0)

    # (b) one Exporter for everything
    per_fig: list[float] = []
    with tempfile.TemporaryDirectory() as d, Exporter() as ex:
        t0 = time.perf_counter()
        ex.export(figs["heatmap"], Path(d) / "first.png")
        first = time.perf_counter() - t0
        for r in range(args.rounds):
            for name, fig in figs.items():
                for fmt in fmts:
                    t0 = time.perf_counter()
                    ex.export(fig, Path(d) / f"{name}-{r}.{fmt}")
                    per_fig.append(time.perf_counter() - t0)
        by_fmt = {}
        i = 0
        for _ in range(args.rounds):
            for _name in figs:
                for fmt in fmts:
                    by_fmt.setdefault(fmt, []).append(per_fig[i])
                    i += 1

    b_mean = statistics.mean(base)
    o_mean = statistics.mean(per_fig)
    print(f"baseline, new browser per figure (png, {len(base)} figures): {b_mean:.2f} s/figure")
    print(f"interp Exporter, first figure (browser start included): {first:.2f} s")
    print(
        f"interp Exporter, later figures ({len(per_fig)} exports): mean {o_mean:.3f} s, "
        f"median {statistics.median(per_fig):.3f} s, max {max(per_fig):.3f} s"
    )
    for fmt, ts in by_fmt.items():
        print(f"   {fmt}: mean {statistics.mean(ts):.3f} s, max {max(ts):.3f} s")
    print(f"ratio baseline / reused browser: {b_mean / o_mean:.1f}x")
    ok = o_mean <= 1.0
    print(f"target ≤ 1 s per figure after the first: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
