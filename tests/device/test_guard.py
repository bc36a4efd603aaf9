"""The CPU-side guard over every documented entry point (see ``guard.py``): docs/api.md's ``>>>`` examples — which
call each public function on the tiny models — run under :class:`HostTensorGuard`, and no tensor may be made inside
interp without ``device=``. Every entry point docs/api.md documents must be called by one of those examples or
by a call in :data:`EXTRA` below, so a new entry point cannot skip the guard."""

from __future__ import annotations

import doctest
import os
import re
from pathlib import Path

import pytest
import torch

import interp
import interp.features
import interp.plots
import interp.stream

from device.guard import HostTensorGuard, StrayHostTensor
from test_docs_api import DOCUMENTED

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"

FIX = Path(__file__).resolve().parents[1] / "features" / "fixtures" / "dictionaries"
CLEAN, CORRUPT = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6"], ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16"]


def _tcs(m):
    from tiny_transcoders import random_transcoders

    return random_transcoders(m, 8, seed=0)


def _task(m):
    from types import SimpleNamespace

    return SimpleNamespace(
        name="tiny", clean=CLEAN, corrupt=CORRUPT, metric=interp.LogitDiff(["w3", "w7"], ["w4", "w8"])
    )


def _jsonl(m, tmp):
    import json

    p = tmp / "pairs.jsonl"
    p.write_text(
        "\n".join(json.dumps({"clean": c, "corrupt": k, "answer": "w3", "wrong": "w4"}) for c, k in zip(CLEAN, CORRUPT))
    )
    return interp.Task.from_jsonl(p, m)


def _train(m, tmp):
    from interp.features import train_transcoders

    docs = [" ".join(f"w{(7 * i + j) % 90 + 3}" for j in range(40)) for i in range(8)]
    return train_transcoders(
        m,
        layers="all",
        width=8,
        k=2,
        tokens=8 * 4 * 2,
        seq_len=8,
        batch_size=4,
        lr=1e-2,
        corpus=docs,
        cache_dir=tmp,
        progress=False,
        eval_tokens=8 * 4,
    )


def _sae(m):
    from interp.features import load_saes, sae_reconstruction

    return sae_reconstruction(m, "w1 w2 w3 w4", load_saes(FIX / "saelens_saes", m))


#: documented entry points without a runnable ``>>>`` example: a guarded call on the tiny llama (m) with a scratch
#: folder (tmp), or the reason the guard cannot run it here (a string). Anything else must be called by an example.
GUARDED = {
    "interp.RayCluster": "starts a Ray cluster (tests/distributed run the sharded sweeps, whose workers run the same "
    "functions guarded here)",
    "interp.models.load_catalog_hf": "loads a real catalog checkpoint (tests marked real)",
    "interp.features.TrainConfig": "training options (no model, no tensor); train_transcoders is guarded",
    "interp.plots.Page": "an HTML page being assembled from figures (no model, no tensor)",
    "interp.plots.CircuitGraphOptions": "drawing options of circuit_graph_figure (no model, no tensor)",
    "interp.dictionaries.DictionarySet.of": lambda m, tmp: interp.dictionaries.DictionarySet.of(_tcs(m)).check(m),
    "interp.models._gguf.verify_entry": lambda m, tmp: _verify(tmp),
    "interp.Logit": lambda m, tmp: interp.patch(m, CLEAN, CORRUPT, metric=interp.Logit("w3")),
    "interp.Prob": lambda m, tmp: interp.patch(m, CLEAN, CORRUPT, metric=interp.Prob("w3")),
    "interp.Task": lambda m, tmp: _eap(interp.Task("t", CLEAN, CORRUPT, ["w3", "w7"], ["w4", "w8"], model=m), m),
    "interp.Task.from_jsonl": lambda m, tmp: _jsonl(m, tmp),
    "interp.task_report": lambda m, tmp: interp.task_report(
        m,
        _task(m),
        out_dir=tmp / "c",
        method="eap",
        n_exact=2,
        max_edges=10,
        sizes=(0.5, 1.0),
        ablations=("zero",),
        static=False,
    ),
    "interp.weights_report": lambda m, tmp: interp.weights_report(m, out_dir=tmp / "cs", max_edges=5, static=False),
    "interp.features.Intervention": lambda m, tmp: interp.features.intervene(
        m, "w1 w2 w3 w4", _tcs(m), interp.features.Intervention.scale("L0.F1@2", 2.0), target="w3"
    ),
    "interp.features.aggregate_graphs": lambda m, tmp: interp.features.aggregate_graphs(
        m, ["w1 w2 w3 w4", "w5 w6 w7"], _tcs(m), target="w3", progress=False
    ),
    "interp.plots.graph_faithfulness_figure": lambda m, tmp: interp.plots.graph_faithfulness_figure(
        interp.features.attribution_graph(m, "w1 w2 w3 w4", _tcs(m), target="w3").faithfulness(
            m, _tcs(m), thresholds=(0.5, 1.0)
        )
    ),
    "interp.features.generate": lambda m, tmp: interp.features.generate(
        m, "w1 w2 w3 w4", _tcs(m), [(0, 1, 2, 3.0)], max_new_tokens=2, frozen_attention=True
    ),
    "interp.features.Steer": lambda m, tmp: interp.features.generate(
        m, "w1 w2 w3", None, [interp.features.Steer(1, torch.ones(m.arch.d_model, device=m.device))], max_new_tokens=2
    ),
    "interp.models.describe_block": lambda m, tmp: interp.models.describe_block(m.arch),  # pure Python: no tensors
    "interp.features.attribution_graph": lambda m, tmp: interp.features.attribution_graph(m, "w1 w2 w3 w4", _tcs(m)),
    "interp.features.intervene": lambda m, tmp: interp.features.intervene(
        m, "w1 w2 w3 w4", _tcs(m), [(0, 1, 2, 3.0)], top_k=3
    ),
    "interp.features.default_lr": lambda m, tmp: interp.features.default_lr(8, 16),  # pure Python: no tensors
    "interp.features.default_passes": lambda m, tmp: interp.features.default_passes(16),
    "interp.features.load_saes": lambda m, tmp: interp.features.load_saes(FIX / "saelens_saes", m),
    "interp.features.load_transcoders": lambda m, tmp: interp.features.load_transcoders(FIX / "circuit_tracer", m),
    "interp.features.qk_attribution": lambda m, tmp: interp.features.qk_attribution(
        m, "w1 w2 w3 w4", _tcs(m), 1, 2, query_pos=3, key_pos=1
    ),
    "interp.features.sae_reconstruction": lambda m, tmp: _sae(m),
    "interp.features.top_activating_contexts": lambda m, tmp: interp.features.top_activating_contexts(
        m, _tcs(m), ["w1 w2 w3 w4 w5", "w6 w7 w8 w9"], ["L0.F1", "L1.F2"], k=2
    ),
    "interp.features.train_transcoders": lambda m, tmp: _train(m, tmp),
    "interp.plots.attention_view": lambda m, tmp: interp.plots.attention_view(
        interp.stream.attention_patterns(m, "w1 w2 w3 w4", ["L0.H1"])
    ),
    "interp.plots.feature_graph_view": lambda m, tmp: interp.plots.feature_graph_view(
        interp.features.attribution_graph(m, "w1 w2 w3 w4", _tcs(m))
    ),
}


def _verify(tmp):
    """verify_entry on a folder that is not a cache entry (no manifest) and on one whose weights file is missing."""
    import json

    from interp.models import _gguf

    assert _gguf.verify_entry(tmp, full=True) is False
    (tmp / "e").mkdir()
    (tmp / "e" / _gguf._MANIFEST).write_text(json.dumps({"format": _gguf._FORMAT}))
    assert _gguf.verify_entry(tmp / "e") is False


def _eap(task, m):
    return interp.edge_attribution(m, task.clean, task.corrupt, metric=task.metric, progress=False)


def _examples() -> str:
    return "\n".join(ex.source for ex in doctest.DocTestParser().get_examples(DOC.read_text(encoding="utf-8")))


def _called(name: str, source: str) -> bool:
    """Whether ``name`` (``interp.a.b``) is called in ``source``: by its full path or its last part(s)."""
    parts = name.split(".")
    tails = {".".join(parts[i:]) for i in range(1, len(parts))}
    return any(re.search(rf"(?<![\w]){re.escape(t)}\s*\(", source) for t in tails)


def test_every_documented_entry_point_is_guarded():
    source = _examples()
    names = sorted({name for name, *_ in DOCUMENTED})
    assert len(names) > 40, names  # the enumeration found the documented API
    missing = [n for n in names if n not in GUARDED and not _called(n, source)]
    assert not missing, (
        f"documented entry points without a >>> example in docs/api.md (so the device guard does not "
        f"run them): {missing}; add an example, or a guarded call here"
    )


def test_the_guard_catches_a_stray_factory(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import torch\ndef f():\n    return torch.zeros(3)\n")
    import importlib.util

    import interp

    # a module counted as interp's: its file under interp/ (exec'd with that filename, never written there)
    fake = os.path.join(os.path.dirname(interp.__file__), "_guard_probe.py")
    code = compile(bad.read_text(), fake, "exec")
    ns: dict = {}
    exec(code, ns)
    with HostTensorGuard(), pytest.raises(StrayHostTensor, match=r"interp/_guard_probe\.py:3"):
        ns["f"]()
    with HostTensorGuard():  # an explicit device, or a caller outside interp, passes
        torch.zeros(3)
    del importlib


@pytest.mark.slow
def test_api_examples_make_no_host_tensor(tmp_path, monkeypatch):
    """Every example of docs/api.md under the guard: no factory call without device= in interp (file:line named)."""
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(DOC.read_text(encoding="utf-8"), {}, "api.md", str(DOC), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    with HostTensorGuard(raise_=False) as g:
        result = runner.run(test, out=out.append)
    assert result.failed == 0, "".join(out)[:4000]
    assert not g.violations, f"tensors made inside interp without device=: {dict(g.violations)}"


@pytest.mark.parametrize("name", sorted(k for k, v in GUARDED.items() if callable(v)))
def test_guarded_calls_make_no_host_tensor(name, tmp_path):
    from tiny_models import tiny_model

    m = tiny_model("llama")
    with HostTensorGuard(raise_=False) as g:
        GUARDED[name](m, tmp_path)
    assert not g.violations, f"{name}: tensors made inside interp without device=: {dict(g.violations)}"
