"""Exact all-heads activation patching on gemma3-270m: interp.patch vs transformer-lens, timed side by side.

The IOI pair ("When Mary and John went to the store, John gave a drink to" → " Mary" vs " John"; corrupt:
the subject name swapped, same token length): interp.patch over all 72 heads (18 layers × 4 query heads,
one KV head; sliding windows, QK-norm and sandwich norms all run by the engine) vs transformer-lens's
``patching.get_act_patch_attn_head_out_all_pos`` on the same bridge (one forward per head). Prints both
times, the ratio (target ≥ 10×) and the largest difference of the values (target ≤ 1e-4). Then EAP on every
edge of a batch of 8 IOI pairs against a plain forward of the same batch (target ≤ 5×), and EAP-IG(5).
``--threads 1`` gives both sides the same footing on a shared machine (see bench_patching.py).

    python benchmarks/bench_gemma3.py [--threads N]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformer_lens import patching  # noqa: E402

import interp  # noqa: E402
from interp.causal import LogitDiff  # noqa: E402

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    m = interp.load_model("gemma3-270m")
    met = LogitDiff(" Mary", " John")
    a, w = (m.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    ct, kt = m.to_tokens(CLEAN), m.to_tokens(CORRUPT)

    def tl_metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, a] - logits[0, -1, w]

    interp.patch(m, CLEAN, CORRUPT, metric=met, progress=False)  # warm-up
    t0 = time.perf_counter()
    r = interp.patch(m, CLEAN, CORRUPT, metric=met, progress=False)
    t_interp = time.perf_counter() - t0
    _, cache = m.bridge.run_with_cache(ct)
    t0 = time.perf_counter()
    tl = patching.get_act_patch_attn_head_out_all_pos(m.bridge, kt, cache, tl_metric)
    t_tl = time.perf_counter() - t0
    diff = float((r.head_matrix() - tl.double()).abs().max())
    print(
        f"gemma3-270m IOI, {m.arch.n_layers * m.arch.n_heads} heads, {ct.shape[1]} tokens; "
        f"M(clean) = {r.clean:.3f}, M(corrupt) = {r.corrupt:.3f}"
    )
    print(f"  interp.patch       {t_interp:7.2f} s")
    print(f"  transformer-lens   {t_tl:7.2f} s   ratio {t_tl / t_interp:.1f}×   max |difference| {diff:.2e}")
    print("target (≥ 10× at ≤ 1e-4):", "met" if t_tl / t_interp >= 10 and diff <= 1e-4 else "NOT met")

    names = [
        (" John", " Mary"),
        (" Tom", " Anna"),
        (" James", " Sarah"),
        (" David", " Lisa"),
        (" Paul", " Emma"),
        (" Mark", " Kate"),
        (" Peter", " Alice"),
        (" Jack", " Rose"),
    ]
    clean = [f"When{b} and{s} went to the store,{s} gave a drink to" for s, b in names]
    corrupt = [f"When{b} and{s} went to the store,{b} gave a drink to" for s, b in names]
    m_batch = LogitDiff([b for _, b in names], [s for s, _ in names])
    toks = m.to_tokens(clean)

    def best(fn, n: int = 3) -> float:
        fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    def forward() -> None:
        with torch.inference_mode():
            m.bridge(toks)

    t_fwd = best(forward)
    t_eap = best(lambda: interp.edge_attribution(m, clean, corrupt, metric=m_batch, method="eap", progress=False))
    t_ig = best(lambda: interp.edge_attribution(m, clean, corrupt, metric=m_batch, method="eap-ig", progress=False), 1)
    n_edges = len(interp.circuit_graph(m).edges)
    print(f"edges ({n_edges:,} of them), {len(clean)} IOI pairs × {toks.shape[1]} tokens:")
    print(
        f"  plain forward {t_fwd:6.2f} s   EAP {t_eap:6.2f} s ({t_eap / t_fwd:.1f}×, target ≤ 5×)   "
        f"EAP-IG(5) {t_ig:6.2f} s ({t_ig / t_fwd:.1f}×)"
    )


if __name__ == "__main__":
    main()
