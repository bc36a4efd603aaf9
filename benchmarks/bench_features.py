"""Attribution graphs against circuit-tracer 0.5.0 on smollm2-135m, one run, same inputs.

Both build the attribution graph of the same 16-token prompt (token ids, BOS first) over the same transcoders:
one random JumpReLU transcoder per layer (30 layers, ``--width`` features, seed 0; each layer's thresholds
set so that about ``--per-pos`` features are active per position on this prompt, and none at BOS, where
circuit-tracer zeroes every feature), written in circuit-tracer's
format (``layer_{i}.safetensors`` + ``config.yaml``), which ``interp.features.load_transcoders`` reads back.
circuit-tracer runs in its own environment (it pins transformers 4.57 and transformer-lens 3.2; see
scripts/compare_circuit_tracer.py) on its nnsight backend, from smollm2 saved here as a local Hugging Face
folder; it is started as a subprocess and times itself at several batch sizes (``--ct-batch-sizes``; 512 is
its default, smaller ones are faster on a CPU), each after a warm-up run and as the faster of two runs, as
interp is timed here (at its defaults, and with the per-feature logit effects for its viewer, which circuit-tracer
does not compute); the ratio is taken against circuit-tracer's fastest batch size. The script then compares the two
adjacency matrices on their shared nodes and edges (circuit-tracer has no features at the BOS position and demeans its
logit rows; see that script) and prints the time ratio (target: interp ≥ 5× faster) with the largest differences
(target ≤ 1e-4 relative).

    python benchmarks/bench_features.py [--ct-python /work/sidenv/ct/bin/python] [--width 1024] [--per-pos 4] [--clt]

``--clt``: one random JumpReLU cross-layer transcoder (``--width`` features per layer, each writing to its layer and
every later one) in circuit-tracer's CLT layout instead, read by both (circuit-tracer's ``load_clt``). Measured
here (2026-11-27, ``--clt --width 128 --per-pos 2 --ct-batch-sizes 64``, machine shared): 843 features, 1,349 nodes,
the same in both; adjacency on shared nodes max |Δ| / max |edge| 1.8e-7 (features' rows), 1.4e-6 (logit rows after
circuit-tracer's demeaning); interp's closure 9.1e-7 relative; CPU time interp 8.5 s, circuit-tracer 25.8 s
(3.0× less), wall 15.2 s vs 53.1 s warm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import interp  # noqa: E402
from interp.features import attribution_graph, load_transcoders  # noqa: E402

PROMPT = "When Mary and John went to the store yesterday, John gave a drink to"
ROOT = Path(__file__).resolve().parents[1]


def save_hf_dir(m: "interp.Model", out: Path) -> None:
    """smollm2 as a local Hugging Face folder (float32 safetensors, config with an explicit rope_theta and
    architectures, the tokenizer): the GGUF-loaded module cannot save_pretrained, so rebuild its class."""
    hf = m.bridge.original_model
    cfg = hf.config
    for k in ("quantization_config",):
        if hasattr(cfg, k):
            delattr(cfg, k)
    fresh = type(hf)(cfg)
    want = fresh.state_dict().keys()
    raw = {k.replace("._original_component", ""): v for k, v in hf.state_dict().items()}  # the bridge's wrappers
    missing = [k for k in want if k not in raw]
    assert not missing, f"weights missing from the bridge's module: {missing[:5]}"
    fresh.load_state_dict({k: raw[k] for k in want})
    fresh.to(torch.float32).save_pretrained(out, safe_serialization=True)
    m.tokenizer.save_pretrained(out)
    conf = json.loads((out / "config.json").read_text())
    rp = conf.get("rope_parameters") or {}
    conf["rope_theta"] = conf.get("rope_theta", rp.get("rope_theta"))
    conf["architectures"] = [type(hf).__name__]
    conf["torch_dtype"] = "float32"
    conf.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(conf, indent=1))
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"  # transformers 5 writes "TokenizersBackend", unknown to 4.57
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=1))


def write_transcoders(m: "interp.Model", tokens: torch.Tensor, out: Path, width: int, per_pos: float) -> None:
    """Random JumpReLU transcoders (seed 0) in circuit-tracer's format, thresholds set per layer on this prompt."""
    from interp.engine.internal import Engine

    e = Engine(m)
    cache = e.run(tokens, torch.ones_like(tokens), capture={"resid_mid"}, keep_scales=True)
    g = torch.Generator().manual_seed(0)
    d, L = m.arch.d_model, m.arch.n_layers
    paths = []
    for l in range(L):
        W_enc = torch.randn(width, d, generator=g) / d**0.5
        b_enc = torch.randn(width, generator=g) * 0.1
        W_dec = torch.randn(width, d, generator=g) / width**0.5
        b_dec = torch.randn(d, generator=g) * 0.01
        mid = cache.acts["resid_mid"][l][0].float()
        h2 = e.norm(mid, m.weights.ln2_w[l].float(), None if m.weights.ln2_b is None else m.weights.ln2_b[l])
        pre = h2 @ W_enc.T + b_enc
        thr = torch.quantile(pre[1:].flatten(), 1 - per_pos / width).clamp_min(1e-3)
        # circuit-tracer zeroes every feature at BOS (interp keeps them): no feature fires there, so both graphs
        # have the same features
        thr = torch.maximum(torch.full((width,), float(thr)), pre[0] + 1e-3)
        p = out / f"layer_{l}.safetensors"
        save_file(
            {
                "W_enc": W_enc,
                "W_dec": W_dec,
                "b_enc": b_enc,
                "b_dec": b_dec,
                "activation_function.threshold": thr.contiguous(),
            },
            str(p),
        )
        paths.append(str(p))
    (out / "config.yaml").write_text(
        "model_kind: transcoder_set\nscan: bench-random-jumprelu\nfeature_input_hook: mlp.hook_in\n"
        "feature_output_hook: mlp.hook_out\ntranscoders:\n" + "".join(f"  - {p}\n" for p in paths)
    )


def write_clt(m: "interp.Model", tokens: torch.Tensor, out: Path, width: int, per_pos: float) -> None:
    """A random JumpReLU cross-layer transcoder (seed 0; W_dec[l] [F, L − l, d]) in circuit-tracer's CLT layout
    (interp.dictionaries._formats.clt_files), each layer's thresholds set on this prompt as in write_transcoders."""
    from interp.engine.internal import Engine
    from interp.features import CrossLayerTranscoder
    from interp.dictionaries._formats import clt_files

    e = Engine(m)
    cache = e.run(tokens, torch.ones_like(tokens), capture={"resid_mid"}, keep_scales=True)
    g = torch.Generator().manual_seed(0)
    d, L = m.arch.d_model, m.arch.n_layers
    W_enc = torch.randn(L, width, d, generator=g) / d**0.5
    b_enc = torch.randn(L, width, generator=g) * 0.1
    W_dec = tuple(torch.randn(width, L - l, d, generator=g) / (width * (L - l)) ** 0.5 for l in range(L))
    b_dec = torch.randn(L, d, generator=g) * 0.01
    thr = []
    for l in range(L):
        mid = cache.acts["resid_mid"][l][0].float()
        h2 = e.norm(mid, m.weights.ln2_w[l].float(), None if m.weights.ln2_b is None else m.weights.ln2_b[l])
        pre = h2 @ W_enc[l].T + b_enc[l]
        t = torch.quantile(pre[1:].flatten(), 1 - per_pos / width).clamp_min(1e-3)
        thr.append(
            torch.maximum(torch.full((width,), float(t)), pre[0] + 1e-3)
        )  # none at BOS, as for the per-layer set
    clt = CrossLayerTranscoder(W_enc, b_enc, W_dec, b_dec, activation="jumprelu", threshold=torch.stack(thr))
    files, config = clt_files(clt)
    for name, (ts, meta) in files.items():
        save_file(ts, str(out / name), metadata=meta)
    (out / "config.yaml").write_text(config.replace("model_kind", "scan: bench-random-clt\nmodel_kind"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ct-python", default="/work/sidenv/ct/bin/python")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--per-pos", type=float, default=4.0)
    ap.add_argument("--n-tokens", type=int, default=16)
    ap.add_argument("--ct-batch-sizes", default="512,64,32", help="circuit-tracer's batch sizes (512: its default)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--clt", action="store_true", help="one random cross-layer transcoder instead of per-layer ones")
    a = ap.parse_args()
    torch.manual_seed(0)
    m = interp.load_model("smollm2-135m")
    tokens = m.to_tokens(PROMPT)[:, : a.n_tokens]
    assert tokens.shape[1] == a.n_tokens, f"the prompt has {tokens.shape[1]} tokens"
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_features_"))
    (work / "model").mkdir(parents=True, exist_ok=True)
    (work / "tc").mkdir(exist_ok=True)
    save_hf_dir(m, work / "model")
    (write_clt if a.clt else write_transcoders)(m, tokens, work / "tc", a.width, a.per_pos)
    tcs = load_transcoders(work / "tc", m)

    def timed(**kw):  # a warm-up run, then two timed ones (circuit-tracer's side does the same)
        secs, cpu = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            g = attribution_graph(m, tokens, tcs, **kw)
            secs.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        return g, secs[0], min(secs[1:]), min(cpu[1:])

    g, cold, warm, cpu_warm = timed()
    _, cold5, warm5, cpu5 = timed(logit_effects=5)
    n_feat = sum(k == "feature" for k in g.node_kind)
    print(
        f"interp: {len(g.tokens)} tokens, {n_feat} features, {g.n_nodes} nodes; {cold:.2f} s cold, {warm:.2f} s "
        f"warm (CPU {cpu_warm:.2f} s); with every feature's top tokens for the viewer (logit_effects=5) {cold5:.2f} / "
        f"{warm5:.2f} s (CPU {cpu5:.2f} s); closure {g.closure_error:.2e} ({g.relative_error:.2e} relative)",
        flush=True,
    )
    torch.save(
        {
            "adjacency": g.adjacency,
            "node_kind": g.node_kind,
            "node_layer": g.node_layer,
            "node_pos": g.node_pos,
            "node_feature": g.node_feature,
            "tokens": g.tokens,
            "target_ids": g.target_ids,
            "activation": g.activation,
            "output_weight": g.output_weight,
            "bias": g.bias,
            "value": g.value,
            "interp_seconds": [cold, warm],
            "interp_cpu_seconds": cpu_warm,
        },
        work / "interp_graph.pt",
    )
    g.export(work / "interp_graph.json")

    if not Path(a.ct_python).exists():
        print(
            f"circuit-tracer's environment {a.ct_python} is missing: build it as scripts/compare_circuit_tracer.py "
            "says; no ratio"
        )
        return
    r = subprocess.run(
        [
            a.ct_python,
            str(ROOT / "scripts" / "compare_circuit_tracer.py"),
            str(work),
            "--batch-sizes",
            a.ct_batch_sizes,
        ],
        capture_output=True,
        text=True,
    )
    sys.stderr.write(r.stderr[-3000:] if r.returncode else "")
    print(r.stdout)
    if r.returncode:
        raise SystemExit(f"circuit-tracer's side failed (exit {r.returncode})")
    res = json.loads((work / "comparison.json").read_text())
    ct = {int(b): t for b, t in res["ct_timing"].items()}
    best = min(ct, key=lambda b: ct[b]["warm"])
    default = 512 if 512 in ct else best
    print(
        f"wall time (warm): interp {warm:.2f} s; circuit-tracer at its fastest batch size ({best}) "
        f"{ct[best]['warm']:.2f} s: interp {ct[best]['warm'] / warm:.1f}× faster (target ≥ 5×); at its default "
        f"batch size ({default}) {ct[default]['warm']:.2f} s: {ct[default]['warm'] / warm:.1f}×; interp with logit "
        f"effects (logit_effects=5, which circuit-tracer does not compute) {ct[best]['warm'] / warm5:.1f}× / "
        f"{ct[default]['warm'] / warm5:.1f}×"
    )
    print(
        f"cold: interp {cold:.2f} s, circuit-tracer {ct[best]['cold']:.2f} s ({best}): {ct[best]['cold'] / cold:.1f}×"
    )
    print(
        f"CPU time (this process's threads; the shared machine's load does not inflate it): interp {cpu_warm:.2f} s, "
        f"circuit-tracer {ct[best]['cpu_warm']:.2f} s ({best}): interp {ct[best]['cpu_warm'] / cpu_warm:.1f}× less"
    )
    print(
        f"adjacency on shared nodes and edges: max |Δ| / max |edge| = {res['feature_rows_rel']:.2e} over the "
        f"features' rows (per row max |Δ| / max |row|: median {res['row_rel_median']:.1e}, max "
        f"{res['row_rel_max']:.1e}), {res['logit_rows_rel']:.2e} over the logit rows after circuit-tracer's "
        f"demeaning (target ≤ 1e-4)"
    )


if __name__ == "__main__":
    main()
