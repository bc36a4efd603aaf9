"""probe_report and logits_and_patterns: probe lengths bounded by the caller, absurd sizes refused.

probe_report on smollm2 used to build random probes of n_ctx = 8,192 tokens whatever ``n`` was
(24 GB RSS, killed). The scores are checked against patterns captured here with plain bridge hooks
on the same token ids; the memory of the real call is measured in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from toy_reference import capture_patterns

from interp.errors import ArgumentError, MemoryCapError, ShapeError
from interp.models import load_model_unchecked as load_model
from interp.toy import logits_and_patterns, probe_report, random_tokens, repeated_tokens


@pytest.fixture(scope="module")
def toy2():
    return load_model("toy-attn-only-2l")


@pytest.mark.parametrize("n,seq_len", [(None, None), (6, 20), (15, 9)])
def test_scores_equal_patterns_captured_here(toy2, n, seq_len):
    a = toy2.arch
    rep = probe_report(toy2, n=n, seq_len=seq_len, batch=7, seed=5)
    n_, L_ = rep["n"], rep["seq_len"]
    assert (n_, L_) == ((15, 32) if n is None else (n, seq_len))  # a toy's default: its whole context
    g = torch.Generator().manual_seed(5)  # the same ids, drawn in the same order
    r_tok = repeated_tokens(7, n_, a.d_vocab, generator=g)
    x_tok = random_tokens(7, L_, a.d_vocab, generator=g)
    logits, pr = capture_patterns(toy2, r_tok)
    _, px = capture_patterns(toy2, x_tok)
    ind = torch.stack([pr[:, :, :, q, q - n_ + 1] for q in range(n_ + 1, 2 * n_ + 1)], -1).mean(dim=(1, 3))
    prev = torch.stack([px[:, :, :, q, q - 1] for q in range(1, L_)], -1).mean(dim=(1, 3))
    torch.testing.assert_close(torch.tensor(rep["induction_score"]), ind.round(decimals=4), atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(rep["prev_token_score"]), prev.round(decimals=4), atol=1e-4, rtol=0)
    nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), r_tok[:, 1:].flatten(), reduction="none").view(7, -1)
    assert rep["loss_second_half"] == pytest.approx(float(nll[:, n_ + 1 :].mean()), abs=1e-4)


@pytest.mark.parametrize(
    "kwargs,err,name",
    [
        (dict(seq_len=33), ArgumentError, "seq_len"),
        (dict(seq_len=1), ArgumentError, "seq_len"),
        (dict(n=16), ArgumentError, "n="),
        (dict(n=1), ArgumentError, "n="),
        (dict(n=2.5), ArgumentError, "n="),
        (dict(batch=0), ArgumentError, "batch"),
        (dict(max_bytes=0), ArgumentError, "max_bytes"),
        (dict(batch=10**7), MemoryCapError, "batch=10000000"),
        (dict(batch=100, max_bytes=1000), MemoryCapError, "max_bytes"),
    ],
)
def test_bad_sizes_are_refused_before_any_pass(toy2, kwargs, err, name):
    with pytest.raises(err, match=name):
        probe_report(toy2, **kwargs)


def test_logits_and_patterns_refuses_absurd_batches(toy2):
    huge = torch.zeros(1, 32, dtype=torch.long).expand(10**7, 32)  # no memory behind it
    with pytest.raises(MemoryCapError, match="max_bytes"):
        logits_and_patterns(toy2, huge)
    with pytest.raises(ShapeError, match="tokens"):
        logits_and_patterns(toy2, torch.zeros(32, dtype=torch.long))
    logits, pats = logits_and_patterns(toy2, torch.zeros(2, 5, dtype=torch.long))
    assert pats.shape == (2, 2, toy2.arch.n_heads, 5, 5) and logits.shape == (2, 5, toy2.arch.d_vocab)


_CHILD = textwrap.dedent("""
    import gc, json, psutil, interp
    from interp.toy import probe_report
    from interp.errors import MemoryCapError
    m = interp.load_model("smollm2-135m")
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    rep = probe_report(m, n=20, batch=4)
    hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    try:
        probe_report(m, n=4000, batch=200)
        refused = ""
    except MemoryCapError as e:
        refused = str(e)
    print("RESULT " + json.dumps({"delta": hwm - before, "n": rep["n"], "seq_len": rep["seq_len"],
                                  "loss": rep["loss_second_half"], "refused": refused}))
""")


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's VmHWM reset")
def test_smollm2_probe_report_stays_small():
    """The reported call (n=20, batch=4) peaks at ~150 MB over the loaded model, not 24 GB."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=900)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert out.returncode == 0 and line, out.stderr[-3000:]
    r = json.loads(line[0][len("RESULT ") :])
    assert (r["n"], r["seq_len"]) == (20, 128)
    assert r["delta"] < 600 * 2**20, f"probe_report peaked {r['delta'] / 2**20:.0f} MiB above the loaded model"
    assert r["loss"] == r["loss"]  # a number, not NaN
    assert "max_bytes" in r["refused"] and "n=4000" in r["refused"]


# ---- skip_trigrams: the full OV / QK circuits are streamed, never vocab × vocab ----------------


def test_skip_trigrams_in_blocks_equal_the_materialised_circuits():
    import math

    from interp.toy import skip_trigrams

    toy1 = load_model("toy-attn-only-1l")
    w, a = toy1.weights, toy1.arch
    E = w.W_E[2:].double()  # words only
    for h in range(a.n_heads):
        kv = a.kv_head(h)
        ov = (E @ w.W_V[0, kv].double() @ w.W_O[0, h].double()) @ w.W_U[:, 2:].double()
        qk = (E @ w.W_Q[0, h].double()) @ (E @ w.W_K[0, kv].double()).T / math.sqrt(a.d_head)
        qk = qk - qk.mean(1, keepdim=True)
        top = torch.topk(ov.flatten(), 8)
        for chunk in (256 << 20, 1000):  # one block; a few rows per block
            t = skip_trigrams(toy1, 0, h, k=8, max_chunk_bytes=chunk)
            assert list(t["ov"]) == pytest.approx(top.values.tolist(), rel=1e-12)
            ids = lambda col: [toy1.tokenizer.convert_tokens_to_ids(x) - 2 for x in t[col]]  # noqa: E731
            src, out, dst = ids("source"), ids("output"), ids("destination")
            assert [s * ov.shape[1] + o for s, o in zip(src, out)] == top.indices.tolist()
            assert dst == [int(qk[:, s].argmax()) for s in src]
            assert list(t["qk"]) == pytest.approx([float(qk[d, s]) for d, s in zip(dst, src)], rel=1e-9)
    with pytest.raises(ArgumentError, match="max_chunk_bytes"):
        skip_trigrams(toy1, 0, 0, max_chunk_bytes=0)


_SKIP_CHILD = textwrap.dedent("""
    import gc, json, psutil
    from interp.toy import ToyConfig, build_toy, skip_trigrams
    m = build_toy(ToyConfig(n_layers=1, n_heads=2, d_model=16, d_head=8, d_vocab=12000))
    gc.collect()
    before = psutil.Process().memory_info().rss
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t = skip_trigrams(m, 0, 1, k=5, max_chunk_bytes=64 << 20)
    hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    print("RESULT " + json.dumps({"delta": hwm - before, "rows": len(t)}))
""")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's VmHWM reset")
def test_skip_trigrams_memory_does_not_grow_with_vocab_squared():
    """d_vocab = 12,000: the two float64 vocab² circuits were 2.3 GB (4.4 GB peak measured); now one
    64 MiB block plus vocab × d_head factors."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", _SKIP_CHILD], capture_output=True, text=True, env=env, timeout=600)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert out.returncode == 0 and line, out.stderr[-3000:]
    r = json.loads(line[0][len("RESULT ") :])
    assert r["rows"] == 5
    assert r["delta"] < 200 * 2**20, f"skip_trigrams peaked {r['delta'] / 2**20:.0f} MiB"
