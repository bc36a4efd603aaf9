r"""Write tiny dictionaries with SAELens's, sparsify's and circuit-tracer's own save functions, as test fixtures.

Each fixture is a directory under tests/features/fixtures/dictionaries/ for the tests' tiny two-layer model
(d_model 32), 8 features, random weights (seed 0), with ``expected.safetensors``: an input ``x`` [5, 32] and
what the library's own code computes from it — ``acts`` (its encode) and ``out`` (its forward: the
transcoder's output, skip term included). interp's loaders are tested on these files in the main suite.

Run in the side environments (never interp's):

    /work/sidenv/sae/bin/python scripts/sidenv/make_dictionary_fixtures.py \
        saelens saelens_saes sparsify dictionary_learning
    # sae-lens 6.54, eai-sparsify 1.3, dictionary-learning 0.1.0 (--no-deps)
    /work/sidenv/ct/bin/python scripts/sidenv/make_dictionary_fixtures.py \
        circuit_tracer circuit_tracer_clt gemma_scope_2  # circuit-tracer 0.5.0

(the environments: ``python -m venv DIR; DIR/bin/pip install torch==2.13.0`` first, then
``sae-lens eai-sparsify`` (and ``--no-deps dictionary-learning==0.1.0``), or ``circuit-tracer==0.5.0 "nnsight<0.8"``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

OUT = Path(__file__).resolve().parents[2] / "tests" / "features" / "fixtures" / "dictionaries"
D, F, LAYERS = 32, 8, 2


def _randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = 0.1 if "b_" in name or "bias" in name or "threshold" in name else 1 / D**0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def _expected(path: Path, x: torch.Tensor, acts: torch.Tensor, out: torch.Tensor) -> None:
    save_file(
        {"x": x.contiguous(), "acts": acts.detach().contiguous(), "out": out.detach().contiguous()},
        str(path / "expected.safetensors"),
    )


def saelens() -> None:
    from sae_lens import SAE  # noqa: F401
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig
    from sae_lens.saes.transcoder import (
        JumpReLUTranscoder,
        JumpReLUTranscoderConfig,
        SkipTranscoder,
        SkipTranscoderConfig,
        Transcoder,
        TranscoderConfig,
    )

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    kinds = {
        "relu": (Transcoder, TranscoderConfig, "blocks.{l}.ln2.hook_normalized"),
        "skip": (SkipTranscoder, SkipTranscoderConfig, "blocks.{l}.hook_mlp_in"),
        "jumprelu": (JumpReLUTranscoder, JumpReLUTranscoderConfig, "blocks.{l}.ln2.hook_normalized"),
    }
    for kind, (cls, cfg_cls, hook) in kinds.items():
        for l in range(LAYERS):
            meta = SAEMetadata(
                hook_name=hook.format(l=l), hook_name_out=f"blocks.{l}.hook_mlp_out", model_name="tiny-llama"
            )
            sae = cls(
                cfg_cls(
                    d_in=D, d_sae=F, d_out=D, dtype="float32", device="cpu", metadata=meta, apply_b_dec_to_input=False
                )
            )
            _randomize(sae, 10 * l + len(kind))
            if kind == "jumprelu":
                with torch.no_grad():
                    sae.threshold.abs_()
            p = OUT / f"saelens_{kind}" / f"layer_{l}"
            sae.save_model(p)
            _expected(p, x, sae.encode(x), sae(x))
    sae = StandardSAE(
        StandardSAEConfig(
            d_in=D, d_sae=F, dtype="float32", device="cpu", metadata=SAEMetadata(hook_name="blocks.1.hook_resid_post")
        )
    )
    _randomize(sae, 7)
    p = OUT / "saelens_resid_sae"
    sae.save_model(p)
    _expected(p, x, sae.encode(x), sae(x))


def saelens_saes() -> None:
    """Residual-stream SAEs, one folder each under saelens_saes/, as SAELens saves them: a standard (ReLU) SAE with
    apply_b_dec_to_input, a TopK SAE with rescale_acts_by_decoder_norm, a JumpReLU SAE (some thresholds negative)
    and a BatchTopK SAE saved for inference (save_inference_model: JumpReLU with its global threshold, learnt by
    the trainer's own update_topk_threshold); its training checkpoint (save_model) in saelens_batchtopk_ckpt/.
    The expected numbers are those of the SAE SAELens loads back from each folder (SAE.load_from_disk)."""
    from sae_lens import SAE
    from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig
    from sae_lens.saes.jumprelu_sae import JumpReLUSAE, JumpReLUSAEConfig
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig
    from sae_lens.saes.topk_sae import TopKSAE, TopKSAEConfig

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    root = OUT / "saelens_saes"
    meta = lambda hook: SAEMetadata(hook_name=hook, model_name="tiny-llama", context_size=16)  # noqa: E731
    made = {
        "standard_resid_pre_0": StandardSAE(
            StandardSAEConfig(d_in=D, d_sae=F, metadata=meta("blocks.0.hook_resid_pre"))
        ),
        "topk_resid_mid_0": TopKSAE(
            TopKSAEConfig(
                d_in=D, d_sae=F, k=3, rescale_acts_by_decoder_norm=True, metadata=meta("blocks.0.hook_resid_mid")
            )
        ),
        "jumprelu_resid_post_0": JumpReLUSAE(
            JumpReLUSAEConfig(d_in=D, d_sae=F, metadata=meta("blocks.0.hook_resid_post"))
        ),
    }
    for i, (name, sae) in enumerate(made.items()):
        _randomize(sae, 400 + i)
        if name.startswith("topk"):
            with torch.no_grad():
                sae.W_dec.mul_(torch.linspace(0.5, 2.0, F)[:, None])  # decoder rows far from unit norm
        sae.save_model(root / name)
    bt = BatchTopKTrainingSAE(
        BatchTopKTrainingSAEConfig(
            d_in=D, d_sae=F, k=2.0, topk_threshold_lr=1.0, metadata=meta("blocks.1.hook_resid_post")
        )
    )
    _randomize(bt, 410)
    with torch.no_grad():
        bt.W_dec.mul_(torch.linspace(0.5, 2.0, F)[:, None])
        xs = torch.randn(64, D, generator=torch.Generator().manual_seed(2))
        bt.update_topk_threshold(bt.encode(xs))  # the trainer's rule: θ ← min positive activation (lr 1)
    bt.save_inference_model(root / "batchtopk_resid_post_1")
    bt.save_model(OUT / "saelens_batchtopk_ckpt")
    for p in sorted(root.iterdir()):
        sae = SAE.load_from_disk(p)
        _expected(p, x, sae.encode(x), sae(x))
    _expected(
        OUT / "saelens_batchtopk_ckpt", x, *((s := SAE.load_from_disk(root / "batchtopk_resid_post_1")).encode(x), s(x))
    )


def sparsify() -> None:
    from sparsify import SparseCoder, SparseCoderConfig

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    for name, skip in (("sparsify", False), ("sparsify_skip", True)):
        for l in range(LAYERS):
            sc = SparseCoder(
                D, SparseCoderConfig(num_latents=F, k=3, transcode=True, skip_connection=skip), dtype=torch.float32
            )
            _randomize(sc, 100 + l)
            p = OUT / name / f"layers.{l}.mlp"  # the trainer's layout: one folder per hookpoint
            sc.save_to_disk(p)
            enc = sc.encode(x)
            acts = torch.zeros(5, F).scatter_(-1, enc.top_indices, enc.top_acts)
            out = sc.decode(enc.top_acts, enc.top_indices) + (x @ sc.W_skip.mT if skip else 0)
            _expected(p, x, acts, out)
    sc = SparseCoder(D, SparseCoderConfig(num_latents=F, k=3), dtype=torch.float32)  # an SAE on the stream
    _randomize(sc, 7)
    p = OUT / "sparsify_sae" / "layers.1"
    sc.save_to_disk(p)
    enc = sc.encode(x)  # sparsify encodes x - b_dec
    _expected(p, x, torch.zeros(5, F).scatter_(-1, enc.top_indices, enc.top_acts), sc(x).sae_out)


def dictionary_learning() -> None:
    """dictionary_learning's BatchTopKSAE (``pip install --no-deps dictionary-learning==0.1.0``: its package __init__
    imports nnsight<0.4, which the dictionary classes never use, so the package is mounted without running it),
    trained 20 steps on random activations by its own BatchTopKTrainer (which learns the global threshold), saved
    as its trainSAE saves (``ae.pt``: the state dict; ``config.json``: {"trainer": trainer.config}); the expected
    numbers are those of BatchTopKSAE.from_pretrained on the saved file (its load_dictionary)."""
    import importlib.util
    import json
    import types

    spec = importlib.util.find_spec("dictionary_learning")
    pkg = types.ModuleType("dictionary_learning")
    pkg.__path__ = list(spec.submodule_search_locations)  # type: ignore[union-attr]
    sys.modules["dictionary_learning"] = pkg
    from dictionary_learning.trainers.batch_top_k import BatchTopKSAE, BatchTopKTrainer

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    xs = torch.randn(20, 64, D, generator=torch.Generator().manual_seed(3))
    tr = BatchTopKTrainer(
        steps=20,
        activation_dim=D,
        dict_size=F,
        k=2,
        layer=1,
        lm_name="tiny-llama",
        warmup_steps=1,
        threshold_start_step=0,
        seed=0,
        device="cpu",
        submodule_name="resid_post_layer_1",
    )
    for step in range(20):
        tr.update(step, xs[step])
    p = OUT / "dictionary_learning" / "trainer_0"
    p.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.cpu() for k, v in tr.ae.state_dict().items()}, p / "ae.pt")
    (p / "config.json").write_text(json.dumps({"trainer": tr.config}, indent=4))
    ae = BatchTopKSAE.from_pretrained(str(p / "ae.pt"), k=tr.config["k"])
    with torch.no_grad():
        _expected(p, x, ae.encode(x), ae(x))


def circuit_tracer() -> None:
    from circuit_tracer.transcoder.activation_functions import JumpReLU
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    root = OUT / "circuit_tracer"
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for l in range(LAYERS):
        tc = SingleLayerTranscoder(
            D,
            F,
            JumpReLU(torch.full((F,), 0.05), 0.1),
            l,
            skip_connection=True,
            device=torch.device("cpu"),
            dtype=torch.float32,
        )
        _randomize(tc, 200 + l)
        with torch.no_grad():
            tc.activation_function.threshold.abs_()
        tc.to_safetensors(str(root / f"layer_{l}.safetensors"))
        files.append(f"layer_{l}.safetensors")
        acts = tc.encode(x)
        out = tc(x)
        save_file(
            {"x": x, "acts": acts.detach().contiguous(), "out": out.detach().contiguous()},
            str(root / f"expected_{l}.safetensors"),
        )
    (root / "config.yaml").write_text(
        "model_kind: transcoder_set\nscan: tiny-llama-fixture\n"
        "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
        "transcoders:\n" + "".join(f"  - {f}\n" for f in files)
    )


def circuit_tracer_clt() -> None:
    """Cross-layer transcoders (model_kind: cross_layer_transcoder) written by circuit-tracer's own
    CrossLayerTranscoder.to_safetensors (W_enc_{i}.safetensors: W_enc_i [F, d], b_enc_i, b_dec_i, threshold_i;
    W_dec_{i}.safetensors: W_dec_i [F, L − i, d]), a ReLU one and a JumpReLU one; the expected numbers are those of
    the CLT circuit-tracer's load_clt reads back from the folder: x [L, 5, d] (each layer's MLP input), ``acts``
    (its encode) and ``out`` (its forward: every layer's reconstruction Σ_{i ≤ j} f_i W_dec[i → j] + b_dec[j])."""
    from circuit_tracer.transcoder.cross_layer_transcoder import CrossLayerTranscoder, load_clt

    x = torch.randn(LAYERS, 5, D, generator=torch.Generator().manual_seed(1))
    for name, act in (("circuit_tracer_clt", "relu"), ("circuit_tracer_clt_jumprelu", "jump_relu")):
        root = OUT / name
        root.mkdir(parents=True, exist_ok=True)
        clt = CrossLayerTranscoder(
            LAYERS,
            F,
            D,
            activation_function=act,
            lazy_decoder=False,
            feature_input_hook="mlp.hook_in",
            feature_output_hook="mlp.hook_out",
            device=torch.device("cpu"),
            dtype=torch.float32,
        )
        _randomize(clt, 500 + len(act))
        if act == "jump_relu":
            with torch.no_grad():
                clt.activation_function.threshold.abs_()
        clt.to_safetensors(str(root))
        (root / "config.yaml").write_text(
            "model_kind: cross_layer_transcoder\nscan: tiny-llama-clt-fixture\n"
            "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
        )
        back = load_clt(
            str(root),
            feature_input_hook="mlp.hook_in",
            feature_output_hook="mlp.hook_out",
            device=torch.device("cpu"),
            dtype=torch.float32,
        )
        with torch.no_grad():
            acts, out = back.encode(x), back(x)
        assert out.shape == x.shape and int((acts != 0).sum()) > 0
        save_file({"x": x, "acts": acts.contiguous(), "out": out.contiguous()}, str(root / "expected.safetensors"))


def gemma_scope_2() -> None:
    """Gemma Scope 2's transcoder keys (w_enc [d, F], w_dec, b_enc, b_dec, threshold, affine_skip_connection
    [d_in, d_out]), read back by circuit-tracer's own load_gemma_scope_2_transcoder for the expected numbers."""
    from circuit_tracer.transcoder.single_layer_transcoder import load_gemma_scope_2_transcoder

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    root = OUT / "gemma_scope_2"
    root.mkdir(parents=True, exist_ok=True)
    for l in range(LAYERS):
        g = torch.Generator().manual_seed(300 + l)
        t = {
            "w_enc": torch.randn(D, F, generator=g) / D**0.5,
            "w_dec": torch.randn(F, D, generator=g) / F**0.5,
            "b_enc": torch.randn(F, generator=g) * 0.1,
            "b_dec": torch.randn(D, generator=g) * 0.1,
            "threshold": torch.rand(F, generator=g) * 0.1,
            "affine_skip_connection": torch.randn(D, D, generator=g) * 0.05,
        }
        path = root / f"layer_{l}.safetensors"
        save_file(t, str(path))
        tc = load_gemma_scope_2_transcoder(str(path), l, device=torch.device("cpu"), dtype=torch.float32)
        save_file(
            {"x": x, "acts": tc.encode(x).detach().contiguous(), "out": tc(x).detach().contiguous()},
            str(root / f"expected_{l}.safetensors"),
        )


if __name__ == "__main__":
    for what in sys.argv[1:]:
        {
            "saelens": saelens,
            "saelens_saes": saelens_saes,
            "sparsify": sparsify,
            "dictionary_learning": dictionary_learning,
            "circuit_tracer": circuit_tracer,
            "circuit_tracer_clt": circuit_tracer_clt,
            "gemma_scope_2": gemma_scope_2,
        }[what]()
        print("wrote", what)
