"""Sharded sweeps on a 2-worker local Ray cluster equal the in-process results; faults, bad input, resume.

One local cluster (2 workers, object store capped at 1 GiB) for the module, on the shipped toy model
(``toy-attn-only-2l``: a catalog model the workers reload by name).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

import interp
from interp.distributed._shard import model_source, shard_bounds
from interp.errors import ArgumentError, InterpError, UnsupportedOperationError

pytestmark = pytest.mark.slow  # Ray workers (their CPU is not this process's): out of the fast tier

ray = pytest.importorskip("ray")

P, T = 8, 10


@pytest.fixture(scope="module")
def toy():
    return interp.load_model("toy-attn-only-2l")


@pytest.fixture(scope="module")
def pairs(toy):
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(1, toy.arch.d_vocab, (P, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, 4] = (corrupt[:, 4] + 7) % toy.arch.d_vocab
    metric = interp.LogitDiff(list(range(3, 3 + P)), 2)  # per-prompt answers: sliced per shard
    return clean, corrupt, metric


@pytest.fixture(scope="module")
def cluster():
    with interp.RayCluster(workers=2, object_store_memory=1 << 30) as c:
        yield c
    assert not ray.is_initialized()  # the local cluster it started is shut down


#: sharded vs in-process, relative: a shard runs its prompts in batches of another size, so its float32 GEMMs sum in
#: another order (how far apart depends on the CPU's kernels: within 1e-6 on AVX-512, up to ~5e-6 measured on AVX2,
#: where a mean of prompts of opposite sign cancels); a lost or doubled shard moves values by whole per-prompt terms
TOL = 64 * torch.finfo(torch.float32).eps  # 7.6e-6


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _same_mean(r, ref, fields) -> None:
    """The batch means ``clean``/``corrupt`` agree to 1e-6 of the per-prompt values they average: a shard runs a
    smaller batch (other GEMM blocking, fp32 rounding ~1e-7 per prompt), and prompts of opposite sign can cancel
    in the mean (the toy's clean mean is 0.043 of per-prompt values up to 3.8), so its *relative* error is not
    bounded by 1e-6 — its error relative to the values averaged is."""
    for f in fields:
        scale = float(getattr(ref, f"{f}_per_prompt").abs().max())
        assert getattr(r, f) == pytest.approx(getattr(ref, f), rel=1e-6, abs=1e-6 * scale), f


def _same_patch(r, ref) -> None:
    assert r.labels == ref.labels and r.n_prompts == ref.n_prompts
    for f in ("values", "per_prompt", "clean_per_prompt", "corrupt_per_prompt"):
        assert getattr(r, f).shape == getattr(ref, f).shape, f
        assert _rel(getattr(r, f), getattr(ref, f)) <= TOL, f
    _same_mean(r, ref, ("clean", "corrupt"))
    assert (r.metric, r.direction, r.ablation, r.positions, r.str_tokens) == (
        ref.metric,
        ref.direction,
        ref.ablation,
        ref.positions,
        ref.str_tokens,
    )


def _same_edges(e, ref) -> None:
    assert e.edges == ref.edges and e.n_prompts == ref.n_prompts
    for f in ("scores", "per_prompt", "clean_per_prompt", "corrupt_per_prompt"):
        assert getattr(e, f).shape == getattr(ref, f).shape, f
        assert _rel(getattr(e, f), getattr(ref, f)) <= 1e-6, f
    _same_mean(e, ref, ("clean", "corrupt"))
    assert e.completeness == pytest.approx(ref.completeness, rel=1e-6)


@pytest.mark.parametrize(
    "kw", [dict(), dict(positions="each", nodes="heads"), dict(direction="noise", ablation="mean", nodes="components")]
)
def test_patch_on_two_workers_equals_in_process(toy, pairs, cluster, kw):
    clean, corrupt, metric = pairs
    if kw.get("ablation") == "mean":
        kw = {**kw, "reference": corrupt}  # the mean over every reference prompt, in each shard
    ref = interp.patch(toy, clean, corrupt, metric=metric, progress=False, **kw)
    r = interp.patch(toy, clean, corrupt, metric=metric, cluster=cluster, progress=False, **kw)
    _same_patch(r, ref)
    d = r.details["distributed"]
    assert d["workers"] == 2 and d["shards"] == 4 and d["lost"] == 0
    assert {k: v for k, v in r.details.items() if k != "distributed"} == ref.details


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")  # the toy is far from complete at 3 steps
@pytest.mark.parametrize("method", ["eap", "eap-ig"])
def test_edge_attribution_on_two_workers_equals_in_process(toy, pairs, cluster, method):
    clean, corrupt, metric = pairs
    ref = interp.edge_attribution(toy, clean, corrupt, metric=metric, method=method, ig_steps=3, progress=False)
    e = interp.edge_attribution(
        toy, clean, corrupt, metric=metric, method=method, ig_steps=3, cluster=cluster, progress=False
    )
    _same_edges(e, ref)
    assert e.details["distributed"]["shards"] == 4


@pytest.mark.parametrize("kw", [dict(), dict(qk_fix=True, nodes="head_inputs", positions="each")])
def test_attribution_patch_on_two_workers_equals_in_process(toy, pairs, cluster, kw):
    clean, corrupt, metric = pairs
    ref = interp.attribution_patch(toy, clean, corrupt, metric=metric, **kw)
    r = interp.attribution_patch(toy, clean, corrupt, metric=metric, cluster=cluster, **kw)
    _same_patch(r, ref)
    assert r.details["distributed"]["lost"] == 0


@pytest.mark.parametrize("ablation", ["corrupt", "zero"])
def test_effects_on_two_workers_equals_in_process(toy, pairs, cluster, ablation):
    clean, corrupt, metric = pairs
    ref = interp.effects(toy, clean, corrupt, metric=metric, ablation=ablation, progress=False)
    r = interp.effects(toy, clean, corrupt, metric=metric, ablation=ablation, cluster=cluster, progress=False)
    assert r.labels == ref.labels
    for f in ("total", "direct", "indirect", "per_prompt", "clean_per_prompt"):
        assert getattr(r, f).shape == getattr(ref, f).shape, f
        assert _rel(getattr(r, f), getattr(ref, f)) <= TOL, f
    _same_mean(r, ref, ("clean",))
    # Effects keeps no corrupt per-prompt values: the clean ones give the scale of what the mean averages
    scale = float(ref.clean_per_prompt.abs().max())
    assert r.corrupt == pytest.approx(ref.corrupt, rel=1e-6, abs=1e-6 * scale, nan_ok=True)
    assert r.details["distributed"]["lost"] == 0


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
@pytest.mark.parametrize("ablation", ["corrupt", "mean"])
def test_evaluate_circuit_on_two_workers_equals_in_process(toy, pairs, cluster, ablation):
    clean, corrupt, metric = pairs
    circuit = interp.edge_attribution(toy, clean, corrupt, metric=metric, method="eap", progress=False).circuit(n=12)
    ref = interp.evaluate_circuit(toy, clean, corrupt, circuit, metric=metric, ablation=ablation)
    r = interp.evaluate_circuit(toy, clean, corrupt, circuit, metric=metric, ablation=ablation, cluster=cluster)
    assert r.per_prompt.shape == ref.per_prompt.shape and (r.n_edges, r.n_total) == (ref.n_edges, ref.n_total)
    assert _rel(r.per_prompt, ref.per_prompt) <= TOL
    # values are batch means (circuit, all edges, no edges): within 1e-6 of the per-prompt values they average
    assert (r.values - ref.values).abs().max() <= 1e-6 * ref.per_prompt.abs().max()
    # the mean ablation is over every corrupt prompt in each shard, not over the shard's own
    assert r.details["distributed"]["shards"] == 4


def test_the_shards_warnings_reach_the_caller_once(toy, pairs, cluster):
    clean, corrupt, metric = pairs
    one = clean[:1].repeat(3, 1)  # a reference of one distinct prompt: mean ablation is ablation with it
    with pytest.warns(interp.AblationWarning) as rec:
        interp.patch(
            toy,
            clean,
            corrupt,
            metric=metric,
            direction="noise",
            ablation="mean",
            reference=one,
            cluster=cluster,
            progress=False,
        )
    assert len([w for w in rec if issubclass(w.category, interp.AblationWarning)]) == 1


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
def test_faithfulness_curve_on_two_workers_equals_in_process(toy, pairs, cluster):
    clean, corrupt, metric = pairs
    scores = interp.edge_attribution(toy, clean, corrupt, metric=metric, method="eap", progress=False)
    kw = dict(metric=metric, ablations=("corrupt", "zero", "mean"), sizes=(0.05, 0.2, 0.5, 1.0), progress=False)
    ref = interp.faithfulness_curve(toy, clean, corrupt, scores, **kw)
    r = interp.faithfulness_curve(toy, clean, corrupt, scores, cluster=cluster, **kw)
    for f in ("values", "full", "empty", "faithfulness", "cpr", "cmd"):
        assert _rel(getattr(r, f), getattr(ref, f)) <= TOL, f
    assert torch.equal(r.kept, ref.kept) and torch.equal(r.n_edges, ref.n_edges)
    assert {k: v for k, v in r.details.items() if k != "distributed"} == ref.details
    with pytest.raises(UnsupportedOperationError, match="resample"):  # the default ablations include it
        interp.faithfulness_curve(toy, clean, corrupt, scores, metric=metric, cluster=cluster, progress=False)


def test_resample_ablation_is_refused_on_a_cluster(toy, pairs, cluster):
    clean, corrupt, metric = pairs
    with pytest.raises(UnsupportedOperationError, match="resample"):
        interp.patch(
            toy,
            clean,
            corrupt,
            metric=metric,
            direction="noise",
            ablation="resample",
            reference=corrupt,
            cluster=cluster,
            progress=False,
        )


WORDS = "dog sun moon tree leaf rock sand fish bird frog bear wolf deer lion duck rain".split()


@pytest.mark.parametrize(
    "kw",
    [
        dict(unit="head"),
        dict(unit="component", wrong={"sun", "moon"}),
        dict(unit="head", target="logprob", wrong="per-prompt"),
    ],
)
def test_attribute_logits_on_two_workers_equals_in_process(toy, cluster, kw):
    # text prompts of different lengths, one answer per prompt: shards see different paddings and answers
    prompts = [" ".join(WORDS[i : i + 3 + i % 4]) for i in range(P)]
    answers = [WORDS[(3 * i) % len(WORDS)] for i in range(P)]
    if kw.get("wrong") == "per-prompt":
        kw = {**kw, "wrong": [WORDS[(5 * i + 1) % len(WORDS)] for i in range(P)]}
    ref = interp.attribute_logits(toy, prompts, answer=answers, progress=False, **kw)
    r = interp.attribute_logits(toy, prompts, answer=answers, cluster=cluster, progress=False, **kw)
    assert r.labels == ref.labels and r.values.shape == ref.values.shape
    assert _rel(r.values, ref.values) <= TOL and _rel(r.total, ref.total) <= TOL
    assert torch.equal(r.positions, ref.positions) and torch.equal(r.answer_ids, ref.answer_ids)
    assert (r.wrong_ids is None) == (ref.wrong_ids is None)
    if ref.wrong_ids is not None:
        assert torch.equal(r.wrong_ids, ref.wrong_ids)
    for f in (
        "prompts",
        "str_tokens",
        "prompt_str_tokens",
        "prompt_targets",
        "target",
        "target_kind",
        "wrong_agg",
        "unit",
    ):
        assert getattr(r, f) == getattr(ref, f), f
    assert r.closure_error <= max(ref.closure_error, 1e-5) and r.relative_error <= max(ref.relative_error, TOL)
    assert r.details["distributed"]["shards"] == 4


def test_a_bad_prompt_fails_the_sweep_naming_shard_and_prompt(toy, pairs, cluster):
    clean, corrupt, metric = pairs
    bad = corrupt.clone()
    bad[5, 2] = 10**6  # not a token id: prompt 5, in shard 2 (prompts 4–5)
    with pytest.raises(ArgumentError, match=r"shard 2 \(prompts 4–5\) failed at prompt 5: .*token id 1000000"):
        interp.patch(toy, clean, bad, metric=metric, cluster=cluster, progress=False)


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")  # EAP on this toy is far from complete
def test_out_resumes_computing_only_the_missing_shards(toy, pairs, cluster, tmp_path):
    clean, corrupt, metric = pairs
    ref = interp.edge_attribution(toy, clean, corrupt, metric=metric, method="eap", progress=False)
    seen: list[int] = []

    def interrupt(i, _c):
        seen.append(i)
        if len(seen) == 2:
            raise KeyboardInterrupt  # the sweep is interrupted after two finished shards

    cluster._after_shard = interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            interp.edge_attribution(
                toy, clean, corrupt, metric=metric, method="eap", cluster=cluster, out=tmp_path, progress=False
            )
    finally:
        cluster._after_shard = None
    files = sorted(p.name for p in tmp_path.glob("shard-*.safetensors"))
    assert len(files) == 2 and len(list(tmp_path.glob("shard-*.json"))) == 2
    assert not list(tmp_path.glob(".tmp-*"))  # atomic writes leave no partial file
    e = interp.edge_attribution(
        toy, clean, corrupt, metric=metric, method="eap", cluster=cluster, out=tmp_path, progress=False
    )
    d = e.details["distributed"]
    assert (d["computed"], d["resumed"], d["shards"]) == (2, 2, 4)
    assert len(list(tmp_path.glob("shard-*.safetensors"))) == 4
    _same_edges(e, ref)
    again = interp.edge_attribution(
        toy, clean, corrupt, metric=metric, method="eap", cluster=cluster, out=tmp_path, progress=False
    )
    assert again.details["distributed"]["computed"] == 0
    assert torch.equal(again.per_prompt, e.per_prompt)
    with pytest.raises(ArgumentError, match="another sweep"):  # a different sweep never reads these shards
        interp.edge_attribution(
            toy, clean, corrupt, metric=metric, method="eap-ig", cluster=cluster, out=tmp_path, progress=False
        )


@pytest.mark.slow
def test_a_killed_worker_has_its_shard_retried_and_nothing_lost(toy, pairs, cluster):
    clean, corrupt, metric = pairs
    ref = interp.patch(toy, clean, corrupt, metric=metric, nodes="components", progress=False)
    before = cluster.worker_pids(toy)
    killed: list[int] = []

    def kill(i, c):
        if not killed:  # after the first finished shard, mid-sweep
            killed.append(before[0])
            os.kill(before[0], signal.SIGKILL)

    cluster._after_shard = kill
    try:
        r = interp.patch(toy, clean, corrupt, metric=metric, nodes="components", cluster=cluster, progress=False)
    finally:
        cluster._after_shard = None
    _same_patch(r, ref)
    d = r.details["distributed"]
    assert d["lost"] == 0 and None not in d["worker_pids"] and len(d["worker_pids"]) == d["shards"]
    assert d["restarted_workers"] + d["resubmitted"] >= 1  # the result says the worker died and was replaced
    after = cluster.worker_pids(toy)
    assert killed[0] not in after and len(after) == 2  # the dead worker was replaced (restarted by Ray)
    assert killed[0] not in d["worker_pids"][1:]  # no shard after the first came from the dead process
    assert set(d["worker_pids"]) - set(before)  # the restarted worker ran shards (its own retry included)


def test_a_model_without_a_reloadable_source_is_refused(toy):
    from interp.toy import ToyConfig, build_toy

    assert model_source(toy) == "toy-attn-only-2l"
    with pytest.raises(UnsupportedOperationError, match="no source a worker can reload"):
        model_source(build_toy(ToyConfig()))


def test_arguments(toy, pairs):
    clean, corrupt, metric = pairs
    with pytest.raises(ArgumentError, match="out="):
        interp.patch(toy, clean, corrupt, metric=metric, out="somewhere", progress=False)
    with pytest.raises(ArgumentError, match="cluster="):
        interp.edge_attribution(toy, clean, corrupt, metric=metric, cluster=2, progress=False)
    with pytest.raises(ArgumentError, match="workers"):
        interp.RayCluster()
    assert shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]
    assert issubclass(UnsupportedOperationError, InterpError)


def test_import_interp_does_not_import_ray():
    code = "import sys, interp; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
