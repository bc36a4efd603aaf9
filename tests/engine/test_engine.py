"""The causal engine's forward (plain torch on the frozen weights) against the bridge's own forward.

Every patch value is computed by this forward, so it must be the model's: logits (or an encoder's
final hidden state), head outputs z and attention patterns are compared with the bridge's hooks on
the four tiny families (with right padding), the toys (every norm × positional combination) and
smollm2; and the prefix-sharing pieces (suffix rows over cached keys/values) against full rows.
"""

from __future__ import annotations

import pytest
import torch

import interp
from interp.engine.internal import Engine, Patch, Variant
from interp.causal._metrics import readout
from interp.models import tokenize
from bridge_capture import capture
from tiny_models import FAMILIES, MORE_FAMILIES, fp64_tol, tiny_model

TEXTS = ["w1 w2 w3 w4 w5 w6", "w5 w6 w7"]


def _compare(model, batch, tol):
    e = Engine(model)
    c = e.run(batch.tokens, batch.attention_mask, capture=["z", "pattern"])
    L = model.arch.n_layers
    names = [f"blocks.{L - 1}.attn.hook_z", f"blocks.{L - 1}.attn.hook_pattern", "blocks.0.attn.hook_z"]
    store, out = capture(model, batch, names)
    real = batch.attention_mask.bool()
    if model.arch.has_logits:
        ref = out if isinstance(out, torch.Tensor) else out.logits
        mine = readout(model, c.final, "logits")
    else:
        hf = model.bridge.original_model
        with torch.no_grad():
            ref = hf.bert(batch.tokens, attention_mask=batch.attention_mask).last_hidden_state
        mine = c.final
    scale = ref[real].abs().max()
    assert (mine - ref)[real].abs().max() <= tol * scale
    for l, name in ((L - 1, names[0]), (0, names[2])):
        z = store[name].reshape(c.acts["z"][l].shape)
        assert (c.acts["z"][l] - z)[real].abs().max() <= tol * max(z.abs().max(), 1)
    pat = store[names[1]]
    assert (c.acts["pattern"][L - 1] - pat).transpose(1, 2)[real].abs().max() <= tol


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float64, 1e-12)])
def test_engine_matches_bridge(family, dtype, tol):
    m = tiny_model(family, dtype=dtype)
    texts = TEXTS
    if m.arch.window(0) and dtype == torch.float64:
        # HF's float64 eager attention gives NaN at a padded query whose whole window is padding, and the
        # NaN spreads through the batch: compare the unpadded prompt (float32 compares the padded batch)
        texts = TEXTS[:1]
    _compare(m, tokenize(m, texts), fp64_tol(family, tol) if dtype == torch.float64 else tol)


@pytest.mark.parametrize("positional", ["learned", "rotary", "none"])
@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm"])
def test_engine_matches_bridge_toys(positional, norm):
    t = interp.models.build_toy(interp.models.ToyConfig(positional=positional, norm=norm))
    words = interp.models.toy_words(6)
    _compare(t, tokenize(t, [" ".join(words), " ".join(words[:3])]), 2e-6)


@pytest.mark.real
def test_engine_matches_bridge_smollm2(smollm2):
    b = tokenize(smollm2, ["When John and Mary went to the shops, John gave the bag to", "The cat sat on"])
    _compare(smollm2, b, 1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox", *MORE_FAMILIES])
def test_suffix_rows_over_cached_keys_equal_full_rows(family):
    """A variant carrying positions t0… over the base run's cached keys/values equals the same variant
    carried in full (causal models: positions before the patch are unchanged)."""
    m = tiny_model(family, n_layers=3, dtype=torch.float64)
    e = Engine(m)
    toks = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 11]], device=m.device)
    mask = torch.ones_like(toks)
    base = e.run(toks, mask, keep_kv=True)
    src = e.run(torch.tensor([[1, 5, 16, 17, 18, 19, 20, 21]], device=m.device), mask, capture=["z"])
    # with a sliding window (Mistral's 3) a patch at 4 cannot reach position 7 two layers up: patch at 6
    t = 6 if m.arch.window(2) else 4

    def make(t0):
        def f(row, t0_):
            return [
                Patch(
                    "z",
                    1,
                    torch.tensor([row], device=m.device),
                    src.acts["z"][1][0, t, 2][None],
                    head=torch.tensor([2], device=m.device),
                    pos=torch.tensor([t], device=m.device),
                )
            ]

        return Variant(layer=1, prompt=0, t0=t0, make=f)

    u = torch.randn(m.arch.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def read(x, prompt, t0):
        return x[:, -1] @ u

    full = e.sweep(base, toks, mask, [make(0)], read, batch_size=4)
    suffix = e.sweep(base, toks, mask, [make(t)], read, batch_size=4)
    assert torch.allclose(full, suffix, rtol=0, atol=1e-13)
    assert (full - read(base.final, None, 0)).abs().max() > 1e-8  # the patch did something


def test_joint_patch_of_every_write_below_layer_one_is_the_corrupt_run():
    """Patching every write of the embedding and of layer 0 (all heads, the MLP) with the corrupt run's values gives the
    corrupt run's layer-1 input, hence its output (docs/math.md §18: the joint patch of every write below a layer)."""
    m = tiny_model("gpt2", n_layers=3)
    e = Engine(m)
    clean = torch.tensor([[1, 5, 6, 7, 8, 9]], device=m.device)
    corrupt = torch.tensor([[1, 15, 6, 17, 8, 19]], device=m.device)
    mask = torch.ones_like(clean)
    k = e.run(corrupt, mask, capture=["z", "mlp_out"])
    H = m.arch.n_heads
    rows = torch.zeros(H, dtype=torch.long)
    layer0 = [
        Patch("z", 0, rows, k.acts["z"][0][0].permute(1, 0, 2), head=torch.arange(H)),
        Patch("mlp_out", 0, torch.tensor([0], device=m.device), k.acts["mlp_out"][0]),
    ]
    with torch.inference_mode():
        x = e.embed({s: t for s, t in e.embed_parts(clean).items()})
        for s, t in k.embed.items():  # every embedding write replaced
            x = x - e.embed_parts(clean)[s] + t
        x = e.layer(0, x, prompt=torch.tensor([0], device=m.device), mask=mask, patches=layer0)
        for l in range(1, m.arch.n_layers):
            x = e.layer(l, x, prompt=torch.tensor([0], device=m.device), mask=mask)
    assert torch.allclose(x, k.final, rtol=0, atol=1e-6)


def test_embedding_variant_in_the_sweep_is_the_corrupt_embedding():
    m = tiny_model("gpt2", n_layers=2)
    e = Engine(m)
    clean = torch.tensor([[1, 5, 6, 7, 8, 9]], device=m.device)
    corrupt = torch.tensor([[1, 15, 6, 17, 8, 19]], device=m.device)
    mask = torch.ones_like(clean)
    base, k = e.run(clean, mask), e.run(corrupt, mask)
    v = Variant(
        layer=-1,
        prompt=0,
        t0=0,
        make=lambda row, t0: [
            Patch("embed.token", -1, torch.tensor([row], device=m.device), k.embed["embed.token"][:1])
        ],
    )
    out = e.sweep(base, clean, mask, [v], lambda x, p, t0: readout(m, x[:, -1], "logits")[:, 7], batch_size=2)
    assert torch.allclose(out, readout(m, k.final[:, -1], "logits")[:, 7], rtol=0, atol=1e-6)


def test_engine_of_is_kept_until_a_weight_changes():
    """Engine.of builds a model's engine once; a weight changed in place (an ablation edited into W_V) makes it
    build a new one, whose forward is a fresh Engine's (the kept one's fused q|k|v would be stale)."""
    m = tiny_model("llama")
    b = tokenize(m, TEXTS)
    e1 = Engine.of(m)
    assert Engine.of(m) is e1
    before = e1.run(b.tokens, b.attention_mask).final
    with torch.no_grad():
        m.weights.W_V[0].mul_(2.0)
    try:
        e2 = Engine.of(m)
        assert e2 is not e1
        after = e2.run(b.tokens, b.attention_mask).final
        assert torch.equal(after, Engine(m).run(b.tokens, b.attention_mask).final)
        assert not torch.allclose(after, before)
        Engine.drop(m)
        assert Engine.of(m) is not e2
    finally:
        with torch.no_grad():
            m.weights.W_V[0].mul_(0.5)
