"""Write tiny dictionaries with SAELens's, sparsify's and circuit-tracer's own save functions, as test fixtures.

Each fixture is a directory under tests/features/fixtures/dictionaries/ for the tests' tiny two-layer model
(d_model 32), 8 features, random weights (seed 0), with ``expected.safetensors``: an input ``x`` [5, 32] and
what the library's own code computes from it — ``acts`` (its encode) and ``out`` (its forward: the
transcoder's output, skip term included). interp's loaders are tested on these files in the main suite.

Run in the side environments (never interp's):

    /work/sidenv/sae/bin/python scripts/sidenv/make_dictionary_fixtures.py saelens sparsify   # sae-lens 6.54, eai-sparsify 1.3
    /work/sidenv/ct/bin/python scripts/sidenv/make_dictionary_fixtures.py circuit_tracer gemma_scope_2  # circuit-tracer 0.5.0

(the environments: ``python -m venv DIR; DIR/bin/pip install torch==2.13.0`` first, then
``sae-lens eai-sparsify``, or ``circuit-tracer==0.5.0 "nnsight<0.8"``).
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
            scale = 0.1 if "b_" in name or "bias" in name or "threshold" in name else 1 / D ** 0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def _expected(path: Path, x: torch.Tensor, acts: torch.Tensor, out: torch.Tensor) -> None:
    save_file({"x": x.contiguous(), "acts": acts.detach().contiguous(), "out": out.detach().contiguous()},
              str(path / "expected.safetensors"))


def saelens() -> None:
    from sae_lens import SAE  # noqa: F401
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig
    from sae_lens.saes.transcoder import (JumpReLUTranscoder, JumpReLUTranscoderConfig, SkipTranscoder,
                                          SkipTranscoderConfig, Transcoder, TranscoderConfig)

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    kinds = {"relu": (Transcoder, TranscoderConfig, "blocks.{l}.ln2.hook_normalized"),
             "skip": (SkipTranscoder, SkipTranscoderConfig, "blocks.{l}.hook_mlp_in"),
             "jumprelu": (JumpReLUTranscoder, JumpReLUTranscoderConfig, "blocks.{l}.ln2.hook_normalized")}
    for kind, (cls, cfg_cls, hook) in kinds.items():
        for l in range(LAYERS):
            meta = SAEMetadata(hook_name=hook.format(l=l), hook_name_out=f"blocks.{l}.hook_mlp_out",
                               model_name="tiny-llama")
            sae = cls(cfg_cls(d_in=D, d_sae=F, d_out=D, dtype="float32", device="cpu", metadata=meta,
                                  apply_b_dec_to_input=False))
            _randomize(sae, 10 * l + len(kind))
            if kind == "jumprelu":
                with torch.no_grad():
                    sae.threshold.abs_()
            p = OUT / f"saelens_{kind}" / f"layer_{l}"
            sae.save_model(p)
            _expected(p, x, sae.encode(x), sae(x))
    sae = StandardSAE(StandardSAEConfig(d_in=D, d_sae=F, dtype="float32", device="cpu",
                                        metadata=SAEMetadata(hook_name="blocks.1.hook_resid_post")))
    _randomize(sae, 7)
    p = OUT / "saelens_resid_sae"
    sae.save_model(p)
    _expected(p, x, sae.encode(x), sae(x))


def sparsify() -> None:
    from sparsify import SparseCoder, SparseCoderConfig

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    for name, skip in (("sparsify", False), ("sparsify_skip", True)):
        for l in range(LAYERS):
            sc = SparseCoder(D, SparseCoderConfig(num_latents=F, k=3, transcode=True, skip_connection=skip),
                             dtype=torch.float32)
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


def circuit_tracer() -> None:
    from circuit_tracer.transcoder.activation_functions import JumpReLU
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    root = OUT / "circuit_tracer"
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for l in range(LAYERS):
        tc = SingleLayerTranscoder(D, F, JumpReLU(torch.full((F,), 0.05), 0.1), l, skip_connection=True,
                                   device=torch.device("cpu"), dtype=torch.float32)
        _randomize(tc, 200 + l)
        with torch.no_grad():
            tc.activation_function.threshold.abs_()
        tc.to_safetensors(str(root / f"layer_{l}.safetensors"))
        files.append(f"layer_{l}.safetensors")
        acts = tc.encode(x)
        out = tc(x)
        save_file({"x": x, "acts": acts.detach().contiguous(), "out": out.detach().contiguous()},
                  str(root / f"expected_{l}.safetensors"))
    (root / "config.yaml").write_text("model_kind: transcoder_set\nscan: tiny-llama-fixture\n"
                                      "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
                                      "transcoders:\n" + "".join(f"  - {f}\n" for f in files))


def gemma_scope_2() -> None:
    """Gemma Scope 2's transcoder keys (w_enc [d, F], w_dec, b_enc, b_dec, threshold, affine_skip_connection
    [d_in, d_out]), read back by circuit-tracer's own load_gemma_scope_2_transcoder for the expected numbers."""
    from circuit_tracer.transcoder.single_layer_transcoder import load_gemma_scope_2_transcoder

    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    root = OUT / "gemma_scope_2"
    root.mkdir(parents=True, exist_ok=True)
    for l in range(LAYERS):
        g = torch.Generator().manual_seed(300 + l)
        t = {"w_enc": torch.randn(D, F, generator=g) / D ** 0.5, "w_dec": torch.randn(F, D, generator=g) / F ** 0.5,
             "b_enc": torch.randn(F, generator=g) * 0.1, "b_dec": torch.randn(D, generator=g) * 0.1,
             "threshold": torch.rand(F, generator=g) * 0.1,
             "affine_skip_connection": torch.randn(D, D, generator=g) * 0.05}
        path = root / f"layer_{l}.safetensors"
        save_file(t, str(path))
        tc = load_gemma_scope_2_transcoder(str(path), l, device=torch.device("cpu"), dtype=torch.float32)
        save_file({"x": x, "acts": tc.encode(x).detach().contiguous(), "out": tc(x).detach().contiguous()},
                  str(root / f"expected_{l}.safetensors"))


if __name__ == "__main__":
    for what in sys.argv[1:]:
        {"saelens": saelens, "sparsify": sparsify, "circuit_tracer": circuit_tracer,
         "gemma_scope_2": gemma_scope_2}[what]()
        print("wrote", what)
