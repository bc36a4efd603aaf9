"""Past one machine, on smollm2-135m: a sharded EAP sweep on a local Ray cluster, and a disk-offloaded model.

Workloads (ratios from this run; the machine is shared, so its load is printed beside them):

1. EAP (``interp.edge_attribution(method="eap")``) over ``--pairs`` IOI pairs (default 256), in process
   against ``cluster=interp.RayCluster(workers=2)`` on the same cores (target ≤ 1.15×: Ray's overhead, since
   the cores are the same). Each shard's time in its worker is printed as prompts/s, and the cost of 10k
   and 1M pairs on N workers is projected from it (N workers each running shards at the measured rate,
   plus the measured start-up and model load per worker), not guessed.
2. smollm2 placed by accelerate with ``max_memory={"cpu": "200MB"}`` and the rest on disk, against the same
   model in memory, each in its own subprocess: ``attribute_logits`` on ``--attr-prompts`` IOI prompts, a
   head patching sweep (``interp.patch(nodes="heads")``, every head, ``--patch-pairs`` pairs), and EAP and
   EAP-IG (5 steps) over every edge on ``--eap-pairs`` pairs (warm: after one EAP call) — time ratio
   (target ≤ 3×) and peak resident memory (target ≤ 60 %; the imports alone, ~360–490 MiB, are reported so
   the ratio above them can be read too).

    python benchmarks/bench_scale.py [--pairs 256] [--batch-size 16] [--eap-pairs 2] [--skip-ray] [--skip-offload]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import warnings  # noqa: E402

import torch  # noqa: E402

import interp  # noqa: E402

# EAP's completeness warning (its estimate against M(corrupt) − M(clean)) is not what is measured here
warnings.filterwarnings("ignore", category=interp.CompletenessWarning)


def load() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.1f} / {la[1]:.1f} on {os.cpu_count()} cores"


def ray_eap(n: int, batch_size: int) -> None:
    m = interp.load_model("smollm2-135m")
    task = interp.load_task("ioi", m, n=n)
    kw = dict(metric=task.metric, method="eap", batch_size=batch_size, progress=False)
    print(f"\n1. EAP over {n} IOI pairs of smollm2-135m ({load()})")
    t = time.perf_counter()
    ref = interp.edge_attribution(m, task.clean, task.corrupt, **kw)
    t_in = time.perf_counter() - t
    print(f"   in process: {t_in:.1f} s ({n / t_in:.2f} pairs/s)")
    t = time.perf_counter()
    with interp.RayCluster(workers=2) as c:
        t_start = time.perf_counter() - t
        t = time.perf_counter()
        c.worker_pids(m)  # waits for the workers to load the model (once; every later sweep reuses them)
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        r = interp.edge_attribution(m, task.clean, task.corrupt, cluster=c, **kw)
        t_sweep = time.perf_counter() - t
    rel = float((r.scores.double() - ref.scores.double()).norm() / ref.scores.double().norm())
    d = r.details.get("distributed", r.details)
    print(
        f"   2-worker local cluster: start {t_start:.1f} s, model load in the workers {t_load:.1f} s, "
        f"sweep {t_sweep:.1f} s → sweep {t_sweep / t_in:.2f}× in process (target ≤ 1.15×), with start and load "
        f"{(t_start + t_load + t_sweep) / t_in:.2f}×; scores equal to {rel:.1e} relative"
    )
    rates = []
    for (s, e), sec in zip(d["bounds"], d["shard_seconds"]):
        rates.append((e - s) / sec)
        print(f"   shard prompts {s}–{e - 1}: {sec:.1f} s in its worker, {(e - s) / sec:.2f} pairs/s")
    rate = sum(rates) / len(rates)  # one worker's throughput (each worker runs one shard at a time)
    per_worker_fixed = t_start + t_load
    print(f"   per worker: {rate:.2f} pairs/s on one core of this machine; fixed cost {per_worker_fixed:.0f} s")
    for total in (10_000, 1_000_000):
        cells = []
        for workers in (2, 16, 64, 256):
            secs = per_worker_fixed + total / (rate * workers)
            cells.append(f"{workers} workers {secs / 3600:.2f} h")
        print(f"   projection, {total:,} pairs: " + "; ".join(cells))


_PROBE = r"""
import json, os, sys, tempfile, time, warnings
# this process's own peak (VmHWM, MiB): ru_maxrss would start at the parent's RSS (Linux keeps it across exec)
rss = lambda: int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) / 1024
import torch, interp
warnings.filterwarnings("ignore", category=interp.CompletenessWarning)
imports = rss()
mode, n_attr, n_patch, n_eap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
kw = dict(device_map="auto", max_memory={"cpu": "200MB"}, offload_folder=tempfile.mkdtemp()) if mode == "off" else {}
t = time.perf_counter(); m = interp.load_model("smollm2-135m", **kw); t_load = time.perf_counter() - t
task = interp.load_task("ioi", m, n=max(n_attr, n_patch, n_eap))
t = time.perf_counter()
a = interp.attribute_logits(
    m, task.clean[:n_attr], answer=task.answer[:n_attr], wrong=task.wrong[:n_attr], progress=False
)
t_attr = time.perf_counter() - t
t = time.perf_counter()
p = interp.patch(m, task.clean[:n_patch], task.corrupt[:n_patch], metric=interp.LogitDiff(task.answer[:n_patch],
                 task.wrong[:n_patch]), nodes="heads", progress=False)
t_patch = time.perf_counter() - t
eap = lambda method: interp.edge_attribution(m, task.clean[:n_eap], task.corrupt[:n_eap], metric=interp.LogitDiff(
    task.answer[:n_eap], task.wrong[:n_eap]), method=method, ig_steps=5, progress=False)
eap("eap")  # warm (the first call builds the circuit graph)
t = time.perf_counter(); e = eap("eap"); t_eap = time.perf_counter() - t
t = time.perf_counter(); ig = eap("eap-ig"); t_ig = time.perf_counter() - t
print(json.dumps(dict(imports=imports, peak=rss(), load=t_load, attr=t_attr, patch=t_patch, eap=t_eap, eap_ig=t_ig,
                      closure=a.closure_error, attr_sum=float(a.values.double().sum()),
                      patch_sum=float(p.values.double().sum()), eap_sum=float(e.scores.double().abs().sum()),
                      eap_ig_sum=float(ig.scores.double().abs().sum()))))
"""


def offload(n_attr: int, n_patch: int, n_eap: int) -> None:
    print(
        f"\n2. smollm2-135m fp32 (~540 MB of weights) with max_memory 200 MB and disk offload, against in memory "
        f"({load()}); attribution on {n_attr} IOI prompts, head patching (270 heads) on {n_patch} pairs, EAP and "
        f"EAP-IG (5 steps, every edge) on {n_eap} pairs"
    )
    runs = {}
    for mode in ("mem", "off"):
        r = subprocess.run(
            [sys.executable, "-c", _PROBE, mode, str(n_attr), str(n_patch), str(n_eap)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        runs[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    m, o = runs["mem"], runs["off"]
    for k in ("load", "attr", "patch", "eap", "eap_ig"):
        print(
            f"   {k:6s}: in memory {m[k]:6.1f} s, offloaded {o[k]:6.1f} s → {o[k] / m[k]:.2f}×"
            + ("" if k == "load" else " (target ≤ 3×)")
        )
    print(
        f"   peak RSS: in memory {m['peak']:.0f} MiB, offloaded {o['peak']:.0f} MiB → {o['peak'] / m['peak']:.0%} "
        f"(target ≤ 60 %); above the imports ({m['imports']:.0f} / {o['imports']:.0f} MiB): "
        f"{(o['peak'] - o['imports']) / (m['peak'] - m['imports']):.0%}"
    )
    print(
        f"   same results: closure {m['closure']:.2e} / {o['closure']:.2e}; Σ attribution {m['attr_sum']:.9g} / "
        f"{o['attr_sum']:.9g}; Σ patching effects {m['patch_sum']:.9g} / {o['patch_sum']:.9g}; Σ|EAP| "
        f"{m['eap_sum']:.9g} / {o['eap_sum']:.9g}; Σ|EAP-IG| {m['eap_ig_sum']:.9g} / {o['eap_ig_sum']:.9g}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--attr-prompts", type=int, default=8)
    ap.add_argument("--patch-pairs", type=int, default=2)
    ap.add_argument("--eap-pairs", type=int, default=2)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-offload", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {load()}")
    if not args.skip_offload:
        offload(args.attr_prompts, args.patch_pairs, args.eap_pairs)
    if not args.skip_ray:
        ray_eap(args.pairs, args.batch_size)


if __name__ == "__main__":
    main()
