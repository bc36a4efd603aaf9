"""Residual-stream SAEs and BatchTopK: load_saes on files written by SAELens's and sparsify's own code, and the
reconstruction of the model's real stream.

The fixtures (fixtures/dictionaries/saelens_saes, saelens_batchtopk_ckpt, sparsify_sae; written by
scripts/sidenv/make_dictionary_fixtures.py with sae-lens 6.54.12 and eai-sparsify 1.3.3) hold an input x and what
the library computes from it — SAELens: the SAE it loads back from the folder (SAE.load_from_disk), so a BatchTopK
SAE runs as SAELens runs it at inference. The stream values are checked against Hugging Face's own modules.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from interp.errors import ArgumentError, ShapeError, UnsupportedArchitectureError, UnsupportedOperationError
from interp.features import (
    SAE,
    Transcoder,
    attribution_graph,
    intervene,
    load_saes,
    load_transcoders,
    qk_attribution,
    sae_reconstruction,
)
from tiny_models import tiny_hf_model, tiny_model

FIX = Path(__file__).parent / "fixtures" / "dictionaries"
PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"]  # unequal lengths: the second is padded


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")  # d_model 32, 2 layers: the fixtures' shape


def _max_diff(sae, exp):
    x = exp["x"]
    f = sae.encode(x)
    return float((f - exp["acts"]).abs().max()), float((sae.decode(f) - exp["out"]).abs().max()), f


def test_saelens_saes_equal_saelens(llama):
    saes = load_saes(FIX / "saelens_saes", llama)
    assert [(s.layer, s.site, s.activation) for s in saes] == [
        (0, "resid_pre", "relu"),
        (0, "resid_mid", "topk"),
        (0, "resid_post", "jumprelu"),
        (1, "resid_post", "batchtopk"),
    ]
    assert [s.hook_name for s in saes] == [
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_resid_mid",
        "blocks.0.hook_resid_post",
        "blocks.1.hook_resid_post",
    ]
    names = ["standard_resid_pre_0", "topk_resid_mid_0", "jumprelu_resid_post_0", "batchtopk_resid_post_1"]
    for s, n in zip(saes, names):
        da, do, f = _max_diff(s, load_file(str(FIX / "saelens_saes" / n / "expected.safetensors")))
        assert da <= 1e-5 and do <= 1e-5, (n, da, do)
        assert 0 < int((f != 0).sum()) < f.numel()
        assert s.context_length == 16
    bt = saes[-1]
    assert bt.threshold is not None and bt.threshold.ndim == 0 and float(bt.threshold) > 0  # the one global θ
    assert saes[2].threshold is not None and float(saes[2].threshold.min()) >= 0  # SAELens's relu(pre)·[pre > θ]


def test_batchtopk_training_checkpoint_equals_saelens_inference():
    """SAELens's BatchTopK training checkpoint (topk_threshold, decoder norms not folded) read as SAELens runs the
    same SAE saved for inference."""
    (s,) = load_saes(FIX / "saelens_batchtopk_ckpt")
    assert s.activation == "batchtopk" and (s.layer, s.site) == (1, "resid_post")
    da, do, _ = _max_diff(s, load_file(str(FIX / "saelens_batchtopk_ckpt" / "expected.safetensors")))
    assert da <= 1e-5 and do <= 1e-5


def test_sparsify_sae_equals_sparsify(llama):
    (s,) = load_saes(FIX / "sparsify_sae", llama)
    assert (s.layer, s.site, s.activation, s.k) == (1, "resid_post", "topk", 3)
    da, do, _ = _max_diff(s, load_file(str(FIX / "sparsify_sae" / "layers.1" / "expected.safetensors")))
    assert da <= 1e-5 and do <= 1e-5


def _hf_stream(prompts, llama):
    """The stream at each site from a separate HF copy of the tiny model: hidden states, and resid_mid = resid_pre +
    the attention block's output, resid_post of the last layer = the final norm's input (forward hooks on HF's
    modules)."""
    hf = tiny_hf_model("llama")
    batch = llama.tokenizer(prompts, return_tensors="pt", padding=True)
    got: dict[str, torch.Tensor] = {}
    hs = []
    h1 = hf.model.layers[0].self_attn.register_forward_hook(lambda m, i, o: got.__setitem__("attn0", o[0]))
    h2 = hf.model.norm.register_forward_pre_hook(lambda m, a: got.__setitem__("final_in", a[0]))
    try:
        with torch.no_grad():
            hs = hf(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
            ).hidden_states
    finally:
        h1.remove(), h2.remove()
    return batch, {
        "blocks.0.hook_resid_pre": hs[0],
        "blocks.0.hook_resid_mid": hs[0] + got["attn0"],
        "blocks.0.hook_resid_post": hs[1],
        "blocks.1.hook_resid_post": got["final_in"],
    }


def test_reconstruction_of_the_real_stream(llama):
    saes = load_saes(FIX / "saelens_saes", llama)
    r = sae_reconstruction(llama, PROMPTS, saes)
    batch, ref = _hf_stream(PROMPTS, llama)
    assert torch.equal(r.tokens, batch["input_ids"]) and torch.equal(r.attention_mask, batch["attention_mask"])
    m = batch["attention_mask"].bool()
    assert int((~m).sum()) > 0  # padding is present and left out of the metrics
    for i, s in enumerate(saes):
        x = ref[s.hook_name]
        assert float((r.resid[i] - x)[m].abs().max()) <= 1e-5, s.hook_name
        # the metrics, recomputed here from HF's stream: FVU over the valid tokens, L0 the mean active count
        xv, f = x[m].double(), s.encode(x[m])
        xh = s.decode(f).double()
        fvu = float((xv - xh).pow(2).sum() / (xv - xv.mean(0)).pow(2).sum())
        assert abs(r.fvu[i] - fvu) <= 1e-5 * max(1.0, fvu)
        assert abs(r.l0[i] - float((f != 0).sum(-1).double().mean())) <= 1e-9
        assert torch.allclose(r.error(i), r.resid[i] - r.reconstruction[i])
    df = r.to_dataframe()
    assert list(df["hook"]) == [s.hook_name for s in saes] and list(df["fvu"]) == r.fvu
    one = sae_reconstruction(llama, PROMPTS[0], saes[0])  # one SAE, one prompt
    assert one.hook_names == ["blocks.0.hook_resid_pre"] and one.tokens.shape[0] == 1
    assert one.features[0].shape == (*one.tokens.shape, 8) and one.fvu[0] > 0


def test_saes_are_refused_by_transcoder_analyses(llama):
    saes = load_saes(FIX / "saelens_saes", llama)
    two = [saes[2], saes[3]]  # one per layer, still not transcoders
    for call in (
        lambda: attribution_graph(llama, "w1 w2 w3 w4", two),
        lambda: intervene(llama, "w1 w2 w3 w4", two, ["L0.F1@2"]),
        lambda: qk_attribution(llama, "w1 w2 w3 w4", two, 1, 0),
    ):
        with pytest.raises(
            ArgumentError, match=r"transcoders\[0\] is an SAE of the residual stream.*needs transcoders"
        ):
            call()
    assert not isinstance(saes[0], Transcoder)
    with pytest.raises(UnsupportedOperationError, match="load_saes"):
        load_transcoders(FIX / "saelens_saes")
    with pytest.raises(UnsupportedOperationError, match="load_saes"):
        load_transcoders(FIX / "sparsify_sae")
    with pytest.raises(UnsupportedOperationError, match="load_transcoders"):
        load_saes(FIX / "saelens_relu")
    with pytest.raises(UnsupportedOperationError, match="load_transcoders"):
        load_saes(FIX / "sparsify")


def test_shapes_and_bad_input(llama, tmp_path):
    with pytest.raises(ShapeError, match="SAE\\[3\\] reads layer 1.*1 layers"):
        load_saes(FIX / "saelens_saes", tiny_model("llama", n_layers=1))
    (s,) = load_saes(FIX / "saelens_batchtopk_ckpt")
    small = SAE(s.W_enc[:, :16], s.b_enc, s.W_dec[:, :16], s.b_dec[:16], layer=0, site="resid_post")
    with pytest.raises(ShapeError, match="saes\\[0\\].*d_model=16.*d_model=32"):
        sae_reconstruction(llama, PROMPTS, [small])
    with pytest.raises(UnsupportedArchitectureError, match="resid_mid.*parallel"):
        sae_reconstruction(tiny_model("neox"), PROMPTS, load_saes(FIX / "saelens_saes" / "topk_resid_mid_0"))
    with pytest.raises(ArgumentError, match="non-empty list"):
        sae_reconstruction(llama, PROMPTS, [])
    with pytest.raises(ArgumentError, match="site='resid_out'"):
        SAE(s.W_enc, s.b_enc, s.W_dec, s.b_dec, layer=0, site="resid_out")
    with pytest.raises(ArgumentError, match="W_skip"):
        SAE(s.W_enc, s.b_enc, s.W_dec, s.b_dec, torch.eye(32), layer=0, site="resid_pre")
    with pytest.raises(ArgumentError, match="batchtopk.*0-d"):
        SAE(
            s.W_enc,
            s.b_enc,
            s.W_dec,
            s.b_dec,
            activation="batchtopk",
            threshold=torch.zeros(8),
            layer=0,
            site="resid_pre",
        )
    attn = tmp_path / "attn"
    shutil.copytree(FIX / "saelens_saes" / "standard_resid_pre_0", attn)
    (attn / "cfg.json").write_text((attn / "cfg.json").read_text().replace("hook_resid_pre", "hook_attn_out"))
    with pytest.raises(UnsupportedOperationError, match="hook_attn_out.*residual stream"):
        load_saes(attn)
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="no cfg.json"):
        load_saes(tmp_path / "empty")
    assert s.to(dtype=torch.float64).__class__ is SAE and s.to(dtype=torch.float64).layer == 1


def test_batchtopk_transcoders_build_a_closed_graph(llama):
    """A BatchTopK transcoder (relu(pre)·[pre > θ], one θ) in the replacement model: the graph closes."""
    g = torch.Generator().manual_seed(5)
    d, F = 32, 16
    tcs = [
        Transcoder(
            torch.randn(F, d, generator=g) / d**0.5,
            torch.randn(F, generator=g) * 0.1,
            torch.randn(F, d, generator=g) / F**0.5,
            torch.randn(d, generator=g) * 0.1,
            activation="batchtopk",
            threshold=torch.tensor(0.2),
        )
        for _ in range(2)
    ]
    pre = tcs[0].pre_activation(torch.randn(7, d, generator=g))
    assert torch.equal(tcs[0].activate(pre), torch.where(pre > 0.2, pre, torch.zeros_like(pre)))
    gr = attribution_graph(llama, "w1 w2 w3 w4", tcs)
    assert gr.relative_error <= 1e-4


def test_dictionary_learning_batchtopk_equals_its_code(llama):
    (s,) = load_saes(FIX / "dictionary_learning", llama)
    assert (s.layer, s.site, s.activation) == (1, "resid_post", "batchtopk") and s.threshold.ndim == 0
    da, do, f = _max_diff(s, load_file(str(FIX / "dictionary_learning" / "trainer_0" / "expected.safetensors")))
    assert da <= 1e-5 and do <= 1e-5 and int((f != 0).sum()) > 0
