"""interp on one GPU: randomly initialised Hugging Face models at the configs of real checkpoints.

Models (seeded; norm gains perturbed so they matter): Llama-3.2-1B, Qwen3-1.7B (QK-norm), Gemma-2-2B (soft-capping,
sandwich norms, alternating sliding windows), each in float32 and bfloat16, built with transformers'
``AutoModelForCausalLM.from_config`` on the device and wrapped WITHOUT a tokenizer by interp's checked
``interp.engine.model_from_hf`` (token ids only; nothing downloaded). Per model and dtype, on a batch of 8 × 32
random token ids (clean / corrupt pairs differing at 2 positions; metric logit[A] − logit[W] at the last position):

  self-check   the load-time check's largest relative error (docs/math.md §31 for half precision)
  forward      the Hugging Face module's forward of the batch (the unit of every ratio below)
  attribute    interp.attribute_logits(unit="head") ÷ forward, and its closure (relative)
  patch        every head patched at all positions: interp.patch vs transformer-lens's
               get_act_patch_attn_head_out_all_pos (values ≤ 1e-4 of the metric's range, time ratio); past
               --tl-budget-s both run on the same evenly spaced layers
  eap          interp.edge_attribution(method="eap") ÷ forward
  eap-ig       interp.edge_attribution(method="eap-ig", ig_steps=5) ÷ forward
  graph        interp.features.attribution_graph on a 64-token prompt over random TopK transcoders on every layer
               (width --width, 16,384 by default): build time
  memory       peak GPU memory of each step (torch.cuda.max_memory_allocated) beside the model's own footprint
  syncs        per call of attribute / patch / eap / eap-ig, one more untimed run: the host synchronisations made
               from interp's own frames and its host-to-device copies of Python data (tests/device/guard.py's
               counter; "<step>_syncs", "<step>_copies"), and on a GPU every synchronisation of the call
               (torch.cuda.set_sync_debug_mode; "<step>_cuda_syncs", torch's and transformers' own included)

Issue #29's targets (docs/scaling.md, "On a GPU"): attribute ≤ 1.0× a forward with closure ≤ 1e-5 (fp32); EAP ≤ 5×;
EAP-IG(5) ≤ 15×; patching ≥ 5× transformer-lens at equal values. The card's name and the date are printed first.

    python benchmarks/bench_gpu.py [--device cuda] [--models llama,qwen3,gemma2] [--dtypes fp32,bf16]
                                   [--small] [--json OUT.json]

``--small``: 2-layer, 64-wide versions of the configs (each keeps its head-layout quirks), 8 × 16 tokens, width-64
transcoders, Llama only unless --models names more: a smoke run of every step in under a minute on a CPU.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import time
import warnings
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402

import interp  # noqa: E402
import interp.engine.internal  # noqa: E402

#: the real checkpoints' config.json values (architecture fields only)
REAL: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": (
        "llama-3.2-1b",
        dict(
            model_type="llama",
            hidden_size=2048,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            intermediate_size=8192,
            vocab_size=128256,
            max_position_embeddings=131072,
            rms_norm_eps=1e-5,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
            bos_token_id=128000,
            eos_token_id=128001,
            initializer_range=0.02,
        ),
    ),
    "qwen3": (
        "qwen3-1.7b",
        dict(
            model_type="qwen3",
            hidden_size=2048,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=6144,
            vocab_size=151936,
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            hidden_act="silu",
            attention_bias=False,
            tie_word_embeddings=True,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=28,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            bos_token_id=151643,
            eos_token_id=151645,
            initializer_range=0.02,
        ),
    ),
    "gemma2": (
        "gemma-2-2b",
        dict(
            model_type="gemma2",
            hidden_size=2304,
            num_hidden_layers=26,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            intermediate_size=9216,
            vocab_size=256000,
            max_position_embeddings=8192,
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            hidden_act="gelu_pytorch_tanh",
            attention_bias=False,
            query_pre_attn_scalar=256,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            sliding_window=4096,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(26)],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=True,
            bos_token_id=2,
            eos_token_id=1,
            pad_token_id=0,
            initializer_range=0.02,
        ),
    ),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def small(cfg: dict[str, Any]) -> dict[str, Any]:
    """2 layers, hidden 64, vocab 1000, keeping each checkpoint's head-layout quirks (Llama 4 query heads per KV head,
    Qwen 3 n_heads × d_head = d_model, Gemma 2 n_heads × d_head < d_model and a sliding window that bites)."""
    c = dict(
        cfg, num_hidden_layers=2, hidden_size=64, vocab_size=1000, intermediate_size=128, bos_token_id=1, eos_token_id=2
    )
    if "pad_token_id" in c:
        c["pad_token_id"] = 0
    if c["model_type"] == "llama":
        c.update(num_attention_heads=8, num_key_value_heads=2, head_dim=8)
    elif c["model_type"] == "qwen3":
        c.update(num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_window_layers=2)
    elif c["model_type"] == "gemma2":
        c.update(
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            query_pre_attn_scalar=12,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
        )
    return c


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def best_of(fn: Callable[[], Any], dev: torch.device, repeats: int = 3, slow_s: float = 8.0) -> tuple[Any, float]:
    """One warm-up, then the best of ``repeats`` timed runs (one when the warm-up took over ``slow_s``)."""
    sync(dev)
    t = time.perf_counter()
    out = fn()
    sync(dev)
    n = repeats if time.perf_counter() - t < slow_s else 1
    times = []
    for _ in range(n):
        sync(dev)
        t = time.perf_counter()
        out = fn()
        sync(dev)
        times.append(time.perf_counter() - t)
    return out, min(times)


def count_syncs(fn: Callable[[], Any], dev: torch.device) -> dict[str, Any]:
    """One more (untimed) call of ``fn``: host syncs and copies from interp's frames, and on a GPU all its syncs."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))
    from device.guard import HostTensorGuard

    with HostTensorGuard(raise_=False, count_syncs=True) as g:
        fn()
    out: dict[str, Any] = {"syncs": sum(g.syncs.values()), "copies": sum(g.copies.values())}
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        out["cuda_syncs"] = sum("synchroniz" in str(x.message) for x in w)
    return out


def peak_mib(fn: Callable[[], Any], dev: torch.device) -> tuple[Any, float]:
    """(fn(), the peak GPU memory it reached in MiB; NaN off a GPU)."""
    if dev.type != "cuda":
        return fn(), float("nan")
    sync(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = fn()
    sync(dev)
    return out, torch.cuda.max_memory_allocated(dev) / 2**20


def build(cfg: dict[str, Any], dev: torch.device, dtype: torch.dtype, name: str) -> Any:
    """The seeded random HF model on ``dev`` (eager attention, norm gains + 0.1 N(0, 1)), wrapped without a
    tokenizer by interp's checked model_from_hf (self-check on)."""
    import transformers

    d = dict(cfg)
    hf_cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    with torch.device(dev):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "norm" in n.lower():
                p.add_(0.1 * torch.randn_like(p))
    return interp.engine.model_from_hf(hf.eval(), None, name=name, device=dev, dtype=dtype)


def inputs(m: Any, dev: torch.device, batch: int, n_tok: int) -> dict[str, Any]:
    """Random ids ≥ 16 (no special token inside), BOS first; corrupt = clean with 2 positions changed."""
    g = torch.Generator().manual_seed(0)
    V, bos = m.arch.d_vocab, 1
    clean = torch.randint(16, V, (batch, n_tok), generator=g, device="cpu")
    clean[:, 0] = bos
    corrupt = clean.clone()
    corrupt[:, 2:4] = torch.randint(16, V, (batch, 2), generator=g, device="cpu")
    A, W = torch.randint(16, V, (2,), generator=g, device="cpu").tolist()
    prompt = torch.randint(16, V, (1, 64 if n_tok >= 32 else n_tok), generator=g, device="cpu")
    prompt[:, 0] = bos
    return dict(clean=clean.to(dev), corrupt=corrupt.to(dev), A=A, W=W, prompt=prompt.to(dev))


def tl_patch(m: Any, x: dict[str, Any], layers: list[int]) -> torch.Tensor:
    """transformer-lens's all-positions head-output patching (denoising: the corrupt run with each head's clean
    output) on ``layers``; the metric is the batch mean of logit[A] − logit[W] at the last position."""
    import pandas as pd
    from transformer_lens import patching

    A, W = x["A"], x["W"]

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return (logits[:, -1, A] - logits[:, -1, W]).mean()

    H = m.arch.n_heads
    with torch.no_grad():
        _, cache = m.bridge.run_with_cache(x["clean"])
        if len(layers) == m.arch.n_layers:
            return patching.get_act_patch_attn_head_out_all_pos(m.bridge, x["corrupt"], cache, metric).reshape(-1)
        df = pd.DataFrame([(l, h) for l in layers for h in range(H)], columns=["layer", "head"])
        return patching.generic_activation_patch(
            m.bridge,
            x["corrupt"],
            cache,
            metric,
            patch_setter=patching.layer_head_vector_patch_setter,
            activation_name="z",
            index_df=df,
        ).reshape(-1)


def run_one(key: str, dtype_name: str, args: argparse.Namespace, dev: torch.device) -> dict[str, Any]:
    name, cfg = REAL[key]
    cfg = small(cfg) if args.small else cfg
    dtype = DTYPES[dtype_name]
    r: dict[str, Any] = {"model": f"{name}{'-small' if args.small else ''}", "dtype": dtype_name}
    t = time.perf_counter()
    m = build(cfg, dev, dtype, name)
    r["build_s"] = time.perf_counter() - t
    r["self_check"] = interp.engine.self_check(m)
    r["model_mib"] = sum(p.numel() * p.element_size() for p in m.bridge.original_model.parameters()) / 2**20
    x = inputs(m, dev, args.batch, 16 if args.small else args.tokens)
    hf = m.bridge.original_model
    metric = interp.LogitDiff(x["A"], x["W"])

    def forward() -> Any:
        with torch.inference_mode():
            return hf(x["clean"])

    _, fwd = best_of(forward, dev)
    r["forward_ms"] = fwd * 1e3

    (a, t_a), r["attribute_peak_mib"] = peak_mib(
        lambda: best_of(lambda: interp.attribute_logits(m, x["clean"], answer=x["A"], wrong=x["W"], unit="head"), dev),
        dev,
    )
    r["attribute_x_forward"], r["attribute_closure_rel"] = t_a / fwd, float(a.relative_error)
    r.update(
        {
            f"attribute_{k}": v
            for k, v in count_syncs(
                lambda: interp.attribute_logits(m, x["clean"], answer=x["A"], wrong=x["W"], unit="head"), dev
            ).items()
        }
    )

    (p, t_p), r["patch_peak_mib"] = peak_mib(
        lambda: best_of(
            lambda: interp.patch(m, x["clean"], x["corrupt"], metric=metric, nodes="heads", progress=False),
            dev,
            slow_s=6.0,
        ),
        dev,
    )
    r["patch_s"] = t_p
    r.update(
        {
            f"patch_{k}": v
            for k, v in count_syncs(
                lambda: interp.patch(m, x["clean"], x["corrupt"], metric=metric, nodes="heads", progress=False), dev
            ).items()
        }
    )
    if not args.no_tl:
        L = m.arch.n_layers
        tl_patch(m, x, [0])  # warm-up; one layer sizes the sweep
        sync(dev)
        t = time.perf_counter()
        tl_patch(m, x, [L - 1])
        sync(dev)
        per_layer = time.perf_counter() - t
        n = max(1, min(L, int(args.tl_budget_s / max(per_layer, 1e-9))))
        layers = sorted({round(i * (L - 1) / max(n - 1, 1)) for i in range(n)})
        sync(dev)
        t = time.perf_counter()
        theirs = tl_patch(m, x, layers).double().cpu()
        sync(dev)
        t_tl = time.perf_counter() - t
        mine = p.head_matrix().double().cpu()[layers].reshape(-1)
        # interp's patch is one sweep over every layer: on a subset, scale its time by the layers' share of work
        share = sum(L - l for l in layers) / sum(L - l for l in range(L))
        scale = max(abs(p.clean - p.corrupt), float(theirs.abs().max()), 1e-30)
        r.update(
            tl_layers=f"{len(layers)}/{L}",
            tl_s=t_tl,
            patch_x_tl=t_tl / (t_p * share),
            patch_max_diff_rel=float((mine - theirs).abs().max()) / scale,
        )

    for method, key_ in (("eap", "eap"), ("eap-ig", "eap_ig")):
        (s, t_e), r[f"{key_}_peak_mib"] = peak_mib(
            lambda: best_of(
                lambda: interp.edge_attribution(
                    m, x["clean"], x["corrupt"], metric=metric, method=method, ig_steps=5, progress=False
                ),
                dev,
            ),
            dev,
        )
        r[f"{key_}_x_forward"], r[f"{key_}_edges"] = t_e / fwd, len(s.edges)
        r.update(
            {
                f"{key_}_{k}": v
                for k, v in count_syncs(
                    lambda: interp.edge_attribution(
                        m, x["clean"], x["corrupt"], metric=metric, method=method, ig_steps=5, progress=False
                    ),
                    dev,
                ).items()
            }
        )

    if not args.no_graph:
        from interp.features import Transcoder, attribution_graph

        a_, width = m.arch, 64 if args.small else args.width
        g = torch.Generator(device=dev).manual_seed(0)
        tcs = [
            Transcoder(
                W_enc=torch.randn(width, a_.d_model, generator=g, device=dev, dtype=torch.float32) / a_.d_model**0.5,
                b_enc=torch.randn(width, generator=g, device=dev) * 0.1,
                W_dec=torch.randn(width, a_.d_model, generator=g, device=dev) / width**0.5,
                b_dec=torch.randn(a_.d_model, generator=g, device=dev) * 0.01,
                activation="topk",
                k=16,
                layer=l,
            )
            for l in range(a_.n_layers)
        ]
        try:
            (gr, t_g), r["graph_peak_mib"] = peak_mib(
                lambda: best_of(lambda: attribution_graph(m, x["prompt"], tcs), dev, slow_s=10.0), dev
            )
            r.update(
                graph_s=t_g,
                graph_tokens=int(x["prompt"].shape[1]),
                graph_width=width,
                graph_nodes=gr.n_nodes,
                graph_closure_rel=float(gr.relative_error),
            )
        except interp.InterpError as e:  # e.g. a dtype the graph refuses: say so and go on
            r["graph"] = f"refused: {type(e).__name__}: {e}"
        del tcs
    interp.engine.internal.Engine.drop(m)
    return r  # the model and its closures die with this frame: the caller frees the device memory (free_device)


def free_device(dev: torch.device) -> None:
    """Collect the last model's garbage and hand its cached blocks back (before the next model is built)."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default=None, help="default llama,qwen3,gemma2 (--small: llama)")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--small", action="store_true", help="2-layer 64-wide configs, 8 × 16 tokens: a CPU smoke run")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--width", type=int, default=16384, help="transcoder features per layer for the graph")
    ap.add_argument("--tl-budget-s", type=float, default=30.0, help="time for transformer-lens's sweep per model")
    ap.add_argument("--no-tl", action="store_true")
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args()
    args.models = args.models or ("llama" if args.small else "llama,qwen3,gemma2")
    dev = torch.device(args.device)
    card = (
        torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({platform.processor() or platform.machine()})"
    )
    print(
        f"bench_gpu: {card}; {datetime.datetime.now().isoformat(timespec='seconds')}; torch {torch.__version__}; "
        f"{'small configs' if args.small else 'real configs'}; batch {args.batch} × "
        f"{16 if args.small else args.tokens} tokens",
        flush=True,
    )
    warnings.simplefilter("ignore")  # completeness / metric-gap warnings on random weights are expected
    rows = []
    for key in args.models.split(","):
        for dt in args.dtypes.split(","):
            t = time.perf_counter()
            try:
                r = run_one(key, dt, args, dev)
            except Exception as e:  # noqa: BLE001 — one model's failure never stops the others
                r = {"model": key, "dtype": dt, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            free_device(dev)
            r["section_s"] = time.perf_counter() - t
            rows.append(r)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
            if args.json:  # rewritten after every row: a run stopped at its time limit keeps the finished ones
                with open(args.json, "w") as f:
                    json.dump(
                        {"card": card, "date": datetime.date.today().isoformat(), "args": vars(args), "rows": rows},
                        f,
                        indent=1,
                    )
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
