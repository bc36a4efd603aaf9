"""A saved trace decomposes like the live one on every tiny family — the sandwich-norm families (Gemma 2/3, OLMo 2)
included, whose output-norm gains (``ln1_post_w`` / ``ln2_post_w``) the file must carry."""

from __future__ import annotations

import pytest
import torch

import interp
from tiny_models import FAMILIES, MORE_FAMILIES, tiny_model


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_saved_trace_decomposes_like_the_live_one(family, tmp_path):
    m = tiny_model(family)
    tr = interp.trace(m, ["w1 w2 w3 w4", "w5 w6 w7 w8"])
    read = "unembed" if m.arch.has_logits else "final"
    live = tr.decompose(read)
    tr.save(tmp_path / "t.safetensors")
    back = interp.ResidualTrace.load(tmp_path / "t.safetensors")
    got = back.decompose(read)
    assert list(got.labels) == list(live.labels)
    torch.testing.assert_close(got.contributions, live.contributions, rtol=1e-6, atol=1e-6)
