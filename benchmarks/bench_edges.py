"""Edge-level circuits on smollm2-135m: the cost of EAP, EAP-IG and circuit evaluation, the comparison with
transformer-lens's edge attribution, and the findings on IOI.

Workloads:

1. cost, on 16 IOI pairs (``interp.load_task("ioi")``): a plain forward of the clean batch (the HF model,
   logits at every position) against ``interp.edge_attribution`` over every edge (70,651; target ≤ 5×),
   EAP-IG with 5 steps (target ≤ 15×) and one ``evaluate_circuit`` run (target ≤ 2×, for circuits of
   0.1% to 50% of the edges); best of interleaved rounds, wall and CPU time (the work this process did,
   which the shared machine's load does not change);
2. transformer-lens 4.3's ``attribution_patch(granularity="edge")`` on a model both can run: a GPT-2-small
   shaped model from config with random weights, one 16-token prompt — time (target: interp ≥ 10× faster)
   and agreement on the shared edges (TL's per-position edges summed over positions; TL takes the gradient
   at its corrupt input and scores clean − corrupt, so interp runs with the two swapped; target ≤ 1e-4);
3. findings on IOI (16 pairs): Spearman rank correlation of EAP (and EAP with the norms' scale frozen) and
   EAP-IG scores with exact edge patching (``interp.edge_patch``) on the top 200 edges (by |EAP-IG|) and on
   200 random edges; the smallest circuit (share of edges, top-n by EAP-IG then pruned; a scan of 33 sizes)
   recovering ≥ 80% of the logit difference under resample ablation (and under the corrupt counterfactual);
   CPR and CMD of EAP and EAP-IG under zero, mean and resample ablation (MIB's ten circuit sizes; CPR from
   the signed ranking, CMD from |score|, as MIB reports them; reference prompts for mean/resample: another
   draw of IOI corrupt prompts of the same length — resample draws one of them per clean prompt, usually
   of another template).

    python benchmarks/bench_edges.py [--threads N] [--iters 2] [--skip-cost] [--skip-tl] [--skip-findings]

On a shared, loaded machine use ``--threads 1``: with two threads every small operation waits for the slower
thread, which inflates the many-small-operation workloads (circuit evaluation) in wall and CPU time alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import interp  # noqa: E402
from bench_atp import interleaved  # noqa: E402
from interp.edges import _select  # noqa: E402
from interp.engine.internal import MetricReader
from interp.edges._evaluate import _K  # noqa: E402
from interp.edges.internal import AblatedForward, Acts, EdgeWrites
from interp.models import tokenize  # noqa: E402


def cost(m, task, iters: int) -> None:
    b = tokenize(m, task.clean)
    hf = m.bridge.original_model
    g = interp.circuit_graph(m)
    print(f"\n1. cost on {task.n} IOI pairs of {b.tokens.shape[1]} tokens; {g}")

    def fwd():
        with torch.no_grad():
            hf(b.tokens, attention_mask=b.attention_mask)

    def eap():
        return interp.edge_attribution(m, task.clean, task.corrupt, metric=task.metric, method="eap", progress=False)

    def eap_ig():
        return interp.edge_attribution(
            m, task.clean, task.corrupt, metric=task.metric, method="eap-ig", ig_steps=5, progress=False
        )

    res = interleaved({"forward": fwd, "eap": eap, "eap-ig": eap_ig}, iters)
    fw_, fc, _ = res["forward"]
    print(f"   plain forward (HF, {torch.get_num_threads()} threads): wall {fw_:.2f} s, CPU {fc:.2f} s")
    for k, target in (("eap", 5), ("eap-ig", 15)):
        w, c, rss = res[k]
        print(
            f"   {k:7s}: wall {w:6.2f} s = {w / fw_:5.1f}x, CPU {c:6.2f} s = {c / fc:5.1f}x (target <= {target}x), "
            f"peak RSS {rss / 2**30:.2f} GiB"
        )
    # one circuit evaluation per circuit size (the engine-level call evaluate_circuit makes three times)
    s = eap()
    pair = interp.causal._common.make_pair(m, task.clean, task.corrupt, task.metric, need_corrupt=True)
    fw = AblatedForward(EdgeWrites(m, g, pair.engine))
    abl = Acts.of(pair.engine.run(pair.corrupt.tokens, pair.corrupt.attention_mask, capture={"z", "mlp_out"}))
    read, prompt = MetricReader(m, pair.bound), torch.arange(task.n)
    fns = {"forward": fwd}
    for frac in (0.001, 0.01, 0.05, 0.2, 0.5):
        K = _K(g, _select.prune(g, _select.top_n(s.scores, int(frac * g.n_edges))))
        fns[f"{frac:g}"] = lambda K=K: fw(pair.clean.tokens, pair.clean.attention_mask, abl, K, read, prompt)
    res = interleaved(fns, iters)
    fw_, fc, _ = res["forward"]
    print("   one circuit evaluation (every edge outside the circuit ablated; target <= 2x):")
    for k, (w, c, _) in res.items():
        if k != "forward":
            print(f"     top {float(k):6.1%} of edges: wall {w / fw_:4.2f}x, CPU {c / fc:4.2f}x")


def tl_comparison() -> None:
    import tempfile

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    torch.manual_seed(0)
    cfg = transformers.GPT2Config()  # GPT-2 small's shape: 12 layers, 12 heads, d_model 768
    cfg._attn_implementation = "eager"
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_word_tokenizer(Tokenizer, models, pre_tokenizers),
        pad_token="<pad>",
        bos_token="<bos>",
        unk_token="<unk>",
    )
    tmp = tempfile.mkdtemp(prefix="bench-edges-tok-")  # the bridge reloads its tokenizer by name_or_path
    tok.save_pretrained(tmp)
    tok = AutoTokenizer.from_pretrained(tmp)
    m = interp.models.model_from_hf_unchecked(hf, tok, name="gpt2-shaped-random")
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(1000, 20000, (1, 16), generator=g)
    corrupt = clean.clone()
    corrupt[0, 3], corrupt[0, 9] = 777, 888
    A, W = 1234, 5678
    print(f"\n2. transformer-lens attribution_patch(granularity='edge') vs interp, {m}, one 16-token prompt")

    def metric_fn(logits):
        return logits[0, -1, A] - logits[0, -1, W]

    with torch.no_grad():
        for _ in range(2):
            m.bridge(clean)
        t = time.perf_counter()
        m.bridge(clean)
        t_f = time.perf_counter() - t
    t = time.perf_counter()
    res = attribution_patch(m.bridge, clean, corrupt, metric_fn, EdgeAttributionConfig(granularity="edge"))
    t_tl = time.perf_counter() - t
    t = time.perf_counter()
    # transformer-lens: gradient at its corrupt input, scores (clean − corrupt)·g; interp: at its clean input,
    # (clean − corrupt)·g — with the inputs swapped, the negative of transformer-lens's
    s = interp.edge_attribution(m, corrupt, clean, metric=interp.LogitDiff(A, W), method="eap", progress=False)
    t_i = time.perf_counter() - t
    agg: dict[str, float] = {}
    for (w, r), v in res.edge_scores.items():
        key = f"{_tl_writer(w)}→{_tl_reader(r)}"
        agg[key] = agg.get(key, 0.0) + v  # TL's edges are per position: sum them
    ours = dict(zip(s.edges, (-s.scores).tolist()))
    shared = [k for k in agg if k in ours]
    diff = max(abs(agg[k] - ours[k]) for k in shared)
    scale = max(abs(v) for v in agg.values())
    print(
        f"   plain forward {t_f:.2f} s; transformer-lens {t_tl:.1f} s ({t_tl / t_f:.0f} forwards); interp {t_i:.2f} s "
        f"({t_i / t_f:.1f} forwards): {t_tl / t_i:.1f}x faster (target >= 10x)"
    )
    print(
        f"   {len(shared):,} shared edges (transformer-lens {len(agg):,}, interp {len(ours):,}: + pos_embed's edges); "
        f"max |difference| {diff:.2e} (largest |score| {scale:.3g}; target <= 1e-4)"
    )


def _word_tokenizer(Tokenizer, models, pre_tokenizers):
    vocab = {"<pad>": 0, "<bos>": 1, "<unk>": 2}
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return t


def _tl_writer(n) -> str:
    return {"embed": "embed", "attn_head_out": f"L{n.layer}.H{n.head}", "mlp_out": f"L{n.layer}.mlp"}[n.kind]


def _tl_reader(n) -> str:
    if n.kind == "logits":
        return "unembed"
    if n.kind == "mlp_in":
        return f"L{n.layer}.mlp.in"
    return f"L{n.layer}.attn.{n.kind[0]}[H{n.head}]"


def findings(m, task) -> None:
    print(f"\n3. findings on IOI ({task.n} pairs)")
    eap = interp.edge_attribution(m, task.clean, task.corrupt, metric=task.metric, method="eap", progress=False)
    frozen = interp.edge_attribution(
        m, task.clean, task.corrupt, metric=task.metric, method="eap", scale="frozen", progress=False
    )
    ig = interp.edge_attribution(m, task.clean, task.corrupt, metric=task.metric, method="eap-ig", progress=False)
    print(f"   {eap!r}\n   {ig!r}")
    print("   top 8 edges by |EAP-IG|: " + ", ".join(f"{e} {v:+.3f}" for e, v in ig.top(8)[["edge", "score"]].values))
    g = interp.circuit_graph(m)
    top = list(ig.top(200)["edge"])
    gen = torch.Generator().manual_seed(0)
    rand = [g.edges[i] for i in torch.randperm(g.n_edges, generator=gen).tolist() if g.edges[i] not in set(top)][:200]
    t = time.perf_counter()
    exact = interp.edge_patch(m, task.clean, task.corrupt, top + rand, metric=task.metric, progress=False)
    t_x = time.perf_counter() - t
    eff = dict(zip(exact.labels, exact.effect.tolist()))
    print(f"   exact edge patching of {len(top) + len(rand)} edges x {task.n} prompts: {t_x:.0f} s")
    for name, edges in (("top 200", top), ("200 random", rand)):
        x = [eff[e] for e in edges]
        r_eap = spearmanr([eap[e] for e in edges], x).statistic
        r_ig = spearmanr([ig[e] for e in edges], x).statistic
        r_fz = spearmanr([frozen[e] for e in edges], x).statistic
        print(
            f"   Spearman with exact edge patching, {name:10s}: EAP {r_eap:.3f}, EAP-IG {r_ig:.3f} "
            f"(EAP with the norms' scale frozen: {r_fz:.3f})"
        )
    # reference prompts for mean / resample: another draw of IOI corrupt prompts of the task's length
    ref = interp.load_task("ioi", m, n=32, seed=1).corrupt
    L = tokenize(m, task.clean).tokens.shape[1]
    if tokenize(m, ref).tokens.shape[1] != L:
        ref = None
    print(f"   reference for mean/resample: {'32 other IOI corrupt prompts' if ref else 'the corrupt prompts'}")
    for ablation in ("resample", "corrupt"):
        for absolute in (False, True):
            smallest_circuit(m, task, ig, ref if ablation == "resample" else None, ablation, absolute)
    print(
        "   faithfulness curves (MIB sizes 0.1% … 100%); CPR from the signed ranking (score: the edges whose "
        "corruption lowers the logit difference most), CMD from |score| — as MIB reports them"
    )
    for s in (eap, ig):
        curves = {
            a: interp.faithfulness_curve(
                m, task.clean, task.corrupt, s, metric=task.metric, reference=ref, absolute=a, progress=False
            )
            for a in (False, True)
        }
        for i, ab in enumerate(curves[True].ablations):
            sg, ab_ = curves[False], curves[True]
            print(
                f"   {s.method.upper():6s} {ab:8s}: CPR {float(sg.cpr[i]):.3f} (|score|: {float(ab_.cpr[i]):.3f})  "
                f"CMD {float(ab_.cmd[i]):.3f} (signed: {float(sg.cmd[i]):.3f})"
            )
            print(f"          f(k) signed  {' '.join(f'{f:5.2f}' for f in sg.faithfulness[i].tolist())}")
            print(f"          f(k) |score| {' '.join(f'{f:5.2f}' for f in ab_.faithfulness[i].tolist())}")


def smallest_circuit(m, task, scores, ref, ablation: str, absolute: bool) -> None:
    """The smallest top-n circuit (pruned) with faithfulness ≥ 0.8 under ``ablation``, on a log grid of 33 sizes
    from 0.01% to 100% of the edges (faithfulness is not monotone in n, so a scan rather than a bisection)."""
    g = interp.circuit_graph(m)
    pair = interp.causal._common.make_pair(m, task.clean, task.corrupt, task.metric, need_corrupt=True)
    writes = EdgeWrites(m, g, pair.engine)
    fw = AblatedForward(writes)
    from interp.edges._patch import ablated_writes

    abl = ablated_writes(m, pair, writes, ablation, ref if ablation in ("mean", "resample") else None, 0)
    read, prompt = MetricReader(m, pair.bound), torch.arange(task.n)
    t, mk = pair.clean.tokens, pair.clean.attention_mask
    full = float(fw(t, mk, abl, torch.zeros_like(g.mask, dtype=torch.float32), read, prompt).double().mean())
    empty = float(fw(t, mk, abl, g.mask.float(), read, prompt).double().mean())
    ns = sorted({max(1, round(g.n_edges * 10**e)) for e in torch.linspace(-4, 0, 33).tolist()})
    rank = "|score|" if absolute else "score"
    for n in ns:
        keep = _select.prune(g, _select.top_n(scores.scores, n, absolute=absolute))
        f = (float(fw(t, mk, abl, _K(g, keep), read, prompt).double().mean()) - empty) / (full - empty)
        if f >= 0.8:
            print(
                f"   smallest circuit with faithfulness >= 0.8 under {ablation} ablation, {scores.method.upper()} by "
                f"{rank}: top {n:,} edges ({n / g.n_edges:.2%}), {int(keep.sum()):,} after pruning "
                f"({int(keep.sum()) / g.n_edges:.2%}); faithfulness {f:.3f}"
            )
            return
    print(
        f"   no circuit on the grid reaches faithfulness 0.8 under {ablation} ablation "
        f"({scores.method.upper()} by {rank})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-tl", action="store_true")
    ap.add_argument("--skip-findings", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    m = interp.load_model("smollm2-135m")
    task = interp.load_task("ioi", m, n=16)
    if not args.skip_cost:
        cost(m, task, args.iters)
    if not args.skip_tl:
        tl_comparison()
    if not args.skip_findings:
        findings(m, task)


if __name__ == "__main__":
    main()
