"""Transcoder training, interp against EleutherAI's sparsify, on the same model, layer, tokens, width and k.

    .venv/bin/python benchmarks/bench_train_transcoders.py [--layer 15 --width 1024 --k 16 --tokens 32768
        --corpus modern --sparsify-python /work/side/sparsify-venv/bin/python]

Both libraries train a TopK transcoder of layer ``--layer`` of smollm2-135m (MLP input → MLP output) on the same
token rows — interp's own training rows of ``--corpus`` in interp's seeded order, seq_len 128, position 0 of each row
(the attention sink) left out on both sides — each in its own process with one thread (torch.set_num_threads(1)),
the model's forward cut after the trained layer on both sides:

* interp: ``interp.features.train_transcoders(model, layers=[layer], width, k, tokens)`` with its defaults
  (Adam, batch 8 rows, lr and passes scaled to the budget); tokens/s is the run's own (forward + updates).
* sparsify (``eai-sparsify`` 1.3.3, in a side environment: ``--sparsify-python``, a venv holding eai-sparsify,
  schedulefree, natsort and simple-parsing, and reading this venv's torch/transformers through a .pth file): its
  ``Trainer`` as shipped with its defaults (signum under a schedule-free wrapper at 5e-3 / √(width / 2¹⁴), batch 32
  rows, no AuxK, ``transcode=True``) on the Hugging Face model truncated after the trained layer; its token mask
  (``torch.isin`` over ``exclude_tokens``) is made to drop position 0 as interp does. tokens/s: ``Trainer.fit``.

Then one scoring, the same code for both (:func:`interp.features.evaluate_dictionary`, in this process): held-out
rows of the training corpus and as many rows of another source (news articles): FVU, L0, fraction never active,
spliced-in loss recovered, KL. And the floor: the engine's forward to the trained layer plus the encoder's GEMM
[N, d] × [d, F], per token, measured here with one thread. Prints one table (markdown) and the machine's load.
Throughput is given per wall second and per CPU second of the training process (one thread each: on a machine
other jobs share, the CPU seconds are what each library's work cost; wall seconds also count the waits).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]


def _interp_worker(a: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(1)
    import interp
    import interp.dictionaries._train as T
    from interp.features import train_transcoders

    cpu: list[float] = []
    optimise = T._optimise

    def timed(*args):  # the CPU seconds of training alone (activations + updates), robust to other jobs' load
        c = time.process_time()
        out = optimise(*args)
        cpu.append(time.process_time() - c)
        return out

    T._optimise = timed
    model = interp.load_model("smollm2-135m")
    r = train_transcoders(
        model,
        layers=[a.layer],
        width=a.width,
        k=a.k,
        tokens=a.tokens,
        corpus=a.corpus,
        cache_dir=a.out,
        eval_tokens=a.eval_tokens,
        progress=False,
    )
    return dict(
        path=str(r.path),
        tokens=r.tokens,
        tokens_per_second=r.tokens_per_second,
        tokens_per_cpu_second=r.tokens / cpu[0],
        seconds=r.train_seconds,
        lr=r.config["lr"],
        passes=r.config["passes"],
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def _sparsify_worker(a: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from sparsify import SparseCoderConfig, Trainer, TrainConfig

    import interp.models

    hf, _ = interp.models.load_catalog_hf("smollm2-135m")
    base = hf.model
    base.layers = base.layers[: a.layer + 1]  # the forward cut after the trained layer
    hf.config.use_cache = False
    rows = torch.load(a.rows, weights_only=True)
    ds = Dataset.from_dict({"input_ids": rows.tolist()}).with_format("torch")
    isin = torch.isin

    def isin_without_position_0(x, test, *, invert=False):  # sparsify's token mask, position 0 dropped as in interp
        m = isin(x, test, invert=invert)
        m[:, 0] = False
        return m

    torch.isin = isin_without_position_0
    cfg = TrainConfig(
        SparseCoderConfig(num_latents=a.width, k=a.k, transcode=True),
        hookpoints=[f"layers.{a.layer}.mlp"],
        log_to_wandb=False,
        save_dir=a.out,
        run_name="sparsify",
    )
    trainer = Trainer(cfg, ds, base)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.fit()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(ds) // cfg.batch_size * cfg.batch_size * rows.shape[1]
    return dict(
        path=str(Path(a.out) / "sparsify"),
        tokens=n,
        tokens_per_second=n / seconds,
        tokens_per_cpu_second=n / cpu,
        seconds=seconds,
        lr=5e-3 / (a.width / 2**14) ** 0.5,
        batch=cfg.batch_size,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def _run(python: str, worker: str, a: argparse.Namespace, out: str, rows: str) -> dict:
    cmd = [python, __file__, "--worker", worker, "--out", out, "--rows", rows]
    cmd += ["--layer", str(a.layer), "--width", str(a.width), "--k", str(a.k), "--tokens", str(a.tokens)]
    cmd += ["--corpus", a.corpus, "--eval-tokens", str(a.eval_tokens)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", SPARSIFY_DISABLE_TRITON="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"{worker} failed:\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _floor(model, layer: int, width: int) -> tuple[float, float]:
    """CPU seconds per token of the engine's forward to ``layer`` (8 × 128 tokens) and of the encoder's GEMM."""
    import torch

    from interp.engine.internal import Engine

    torch.set_num_threads(1)
    e = Engine.of(model)
    ids = torch.randint(100, model.arch.d_vocab, (8, 128), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            x = e.embed(e.embed_parts(ids))
            for l in range(layer + 1):
                x = e.layer(l, x, prompt=torch.arange(8), mask=torch.ones_like(ids))
            best = min(best, time.process_time() - t)
        X = torch.randn(8 * 127, model.arch.d_model)
        W = torch.randn(width, model.arch.d_model)
        g = float("inf")
        for _ in range(5):
            t = time.process_time()
            X @ W.T
            g = min(g, time.process_time() - t)
    return best / ids.numel(), g / X.shape[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layer", type=int, default=15)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--eval-tokens", type=int, default=2048)
    p.add_argument("--corpus", default="modern", help="'modern' (interp's default) or 'kjv'")
    p.add_argument("--sparsify-python", default="/work/side/sparsify-venv/bin/python")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps((_interp_worker if a.worker == "interp" else _sparsify_worker)(a)))
        return

    import torch

    import interp
    import interp.dictionaries._train as T
    from interp.features import evaluate_dictionary, load_transcoders

    model = interp.load_model("smollm2-135m")
    corpus = T._Corpus(a.corpus)
    n_rows = a.tokens // 128
    train = T._sequences(model, corpus.train, 128, n_rows)
    order = torch.randperm(train.shape[0], generator=torch.Generator().manual_seed(0))
    held = T._sequences(model, corpus.held, 128, a.eval_tokens // 128)
    other = T._sequences(model, T.held_out_corpus(), 128, a.eval_tokens // 128)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tc_"))
    torch.save(train[order], tmp / "rows.pt")
    loads = [os.getloadavg()[0]]
    runs = {
        "interp": _run(sys.executable, "interp", a, str(tmp / "interp"), str(tmp / "rows.pt")),
        "sparsify": _run(a.sparsify_python, "sparsify", a, str(tmp / "sparsify"), str(tmp / "rows.pt")),
    }
    loads.append(os.getloadavg()[0])
    fwd, gemm = _floor(model, a.layer, a.width)
    print(
        f"smollm2-135m layer {a.layer}, width {a.width}, k {a.k}, {a.tokens} tokens of the {a.corpus} corpus; one "
        f"thread per process; load average {loads[0]:.1f} at start, {loads[1]:.1f} after training, "
        f"{os.cpu_count()} cpus. Floor (per CPU second): forward to layer {a.layer} {1 / fwd:.0f} tok/s + encoder GEMM "
        f"{1 / gemm:.0f} tok/s = {1 / (fwd + gemm):.0f} tok/s\n"
    )
    print(
        "| library | tokens | tok/s (wall) | tok/CPU-s | FVU | L0 | never active | loss recovered | KL | transfer: FVU "
        "| never active | loss recovered | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        (tc,) = load_transcoders(r["path"])
        ev = evaluate_dictionary(model, [tc], tokens=held)
        tr = evaluate_dictionary(model, [tc], tokens=other)
        print(
            f"| {name} | {r['tokens']} | {r['tokens_per_second']:.0f} | {r['tokens_per_cpu_second']:.0f} "
            f"| {float(ev.fvu[0]):.3f} | {float(ev.l0[0]):.1f} "
            f"| {float(ev.dead_fraction[0]):.3f} | {float(ev.loss_recovered[0]):.3f} | {float(ev.kl_spliced[0]):.3f} "
            f"| {float(tr.fvu[0]):.3f} | {float(tr.dead_fraction[0]):.3f} | {float(tr.loss_recovered[0]):.3f} "
            f"| {r['peak_rss_mb']:.0f} |"
        )
    print(f"\nscored on {ev.n_tokens} held-out tokens of the training corpus and {tr.n_tokens} of news articles")
    print("runs:", json.dumps(runs))


if __name__ == "__main__":
    main()
