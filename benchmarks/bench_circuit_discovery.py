"""Circuit discovery against circuits known by construction: edge ROC AUC per method × ablation × model.

Models: four tracr-compiled RASP programs (reverse, frac_prevs, sort, hist; their true edges read off the
weights and tracr's residual labels) and the shipped toy-attn-only-2l's induction circuit. Methods: EAP,
EAP-IG along the inputs path (Hanna et al.'s default) and along the activations, exact edge patching (the
oracle) and ACDC's greedy search (τ swept). Ablations: zero, mean (per position over the task's inputs of
that length) and resample (another input of the same length). Metric: the margin of the clean output at
every output position (numerical frac_prevs: its value), each edge scored by its mean |effect| over the
(input, position) prompts — see interp/groundtruth/_tasks.py and _discovery.py.

Each cell prints the AUC against the true circuit and against the truth the ablation can test (true edges,
constant channels counted, along which the ablation changes what the reader reads). Goal: ≥ 0.99 under
zero ablation and ≥ 0.95 under resample for every method and model. Every cell below its goal is explained
edge by edge in the notes (interp/groundtruth/_explain.py: blind, inert, first-order, off-circuit,
spurious).

    python benchmarks/bench_circuit_discovery.py [--models reverse,frac_prevs,sort,hist,induction]
        [--methods eap,eap-ig,eap-ig-act,edge-patching,acdc] [--max-inputs 40] [--n-seqs 8] [--json out.json]

Needs the groundtruth extra (tracr, CPU jax). About 10–20 minutes on 2 CPU cores (ACDC is most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

import interp  # noqa: E402
from interp.groundtruth import compile_program  # noqa: E402
from interp.groundtruth._discovery import METHODS, RANKING_ABLATIONS, edge_ranking  # noqa: E402
from interp.groundtruth._explain import counts, misplaced  # noqa: E402
from interp.groundtruth._tasks import induction_task, tracr_task  # noqa: E402

GOAL = {"zero": 0.99, "mean": 0.95, "resample": 0.95}
MODELS = ("reverse", "frac_prevs", "sort", "hist", "induction")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--ablations", default=",".join(RANKING_ABLATIONS))
    ap.add_argument("--max-inputs", type=int, default=40, help="tracr inputs per length (a seeded sample)")
    ap.add_argument("--n-seqs", type=int, default=8, help="repeated sequences of the induction task")
    ap.add_argument("--ig-steps", type=int, default=5)
    ap.add_argument("--json", default=None, help="write every cell (AUCs, misplaced edges) to this file")
    args = ap.parse_args()
    models, methods, ablations = args.models.split(","), args.methods.split(","), args.ablations.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    tasks = []
    for name in models:
        t0 = time.perf_counter()
        if name == "induction":
            task = induction_task(interp.load_model("toy-attn-only-2l"), n_seqs=args.n_seqs)
        else:
            task = tracr_task(compile_program(name), max_inputs=args.max_inputs)
        print(f"{task!r}  ({task.description}; built in {time.perf_counter() - t0:.0f} s)", flush=True)
        tasks.append(task)

    cells: dict[tuple[str, str, str], object] = {}
    width = max(len(m) for m in methods)
    print(
        "\nedge ROC AUC: against the true circuit / against the truth the ablation can test "
        "(the goal: zero ≥ 0.99, resample ≥ 0.95)"
    )
    print(f"{'model':<11} {'method':<{width}} " + " ".join(f"{a:>17}" for a in ablations) + "   seconds")
    for task in tasks:
        for m in methods:
            row, secs = [], 0.0
            for a in ablations:
                r = edge_ranking(task, m, a, ig_steps=args.ig_steps)
                cells[(task.name, m, a)] = r
                secs += r.seconds
                flag = " " if r.auc >= GOAL[a] else "*"
                row.append(f"{r.auc:7.3f} / {r.auc_testable:5.3f}{flag}")
            print(f"{task.name:<11} {m:<{width}} " + " ".join(f"{c:>17}" for c in row) + f"   {secs:7.1f}", flush=True)
    print("(* below the goal; counts: true edges, testable per ablation, all edges)")
    for task in tasks:
        r0 = cells[(task.name, methods[0], ablations[0])]
        tested = ", ".join(f"{a} {int(cells[(task.name, methods[0], a)].testable.sum())}" for a in ablations)  # type: ignore[attr-defined]
        print(f"  {task.name}: {int(r0.truth.sum())} true of {len(r0.edges)} edges; testable: {tested}")  # type: ignore[attr-defined]

    print(
        "\nnotes — every cell below its goal, its misplaced edges by class "
        "(blind / inert: no single-edge method can see them under this ablation; first-order / spurious: the "
        "method's own error; off-circuit: real effects outside the known circuit)"
    )
    out = []
    for (name, m, a), r in cells.items():
        oracle = cells.get((name, "edge-patching", a))
        groups = misplaced(r, oracle)
        out.append(
            {
                "model": name,
                "method": m,
                "ablation": a,
                "auc": r.auc,
                "auc_testable": r.auc_testable,  # type: ignore[attr-defined]
                "seconds": r.seconds,
                "misplaced": groups,
            }
        )  # type: ignore[attr-defined]
        if r.auc >= GOAL[a]:  # type: ignore[attr-defined]
            continue
        print(f"- {name} · {m} · {a}: AUC {r.auc:.3f} (testable {r.auc_testable:.3f}) — {counts(groups)}")  # type: ignore[attr-defined]
        for c, edges in groups.items():
            if edges:
                shown = ", ".join(edges[:6]) + (f", … ({len(edges)} in all)" if len(edges) > 6 else "")
                print(f"    {c}: {shown}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"\nwrote {args.json}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
