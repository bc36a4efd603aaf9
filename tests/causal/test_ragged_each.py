"""patch(positions="each") on a ragged batch: a shorter prompt's padded positions are NaN (no token to patch there),
its real positions equal the same call on that prompt alone, and ``values`` averages each position over the prompts
that have it; the dataframe and the figure take the NaN."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import tiny_model

import interp

CLEAN = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"]
CORRUPT = ["w1 w12 w3 w4 w5 w6", "w7 w13 w9"]
METRIC = interp.LogitDiff("w20", "w21")


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def test_padded_positions_are_nan_and_real_ones_equal_each_prompt_alone(model):
    run = interp.patch
    kw = dict(metric=METRIC, nodes="heads", positions="each", progress=False)
    both = run(model, CLEAN, CORRUPT, **kw)
    n = both.per_prompt.shape[1]  # BOS + 6 tokens
    short = 4  # BOS + 3 tokens: positions 4.. are padding of prompt 1
    assert both.per_prompt.shape[-1] == 2 and n == 7
    assert bool(torch.isnan(both.per_prompt[:, short:, 1]).all())
    assert not bool(torch.isnan(both.per_prompt[:, :short, 1]).any())
    assert not bool(torch.isnan(both.per_prompt[..., 0]).any())
    for i, (c, k) in enumerate(zip(CLEAN, CORRUPT)):
        alone = run(model, c, k, **kw).per_prompt[..., 0]
        torch.testing.assert_close(both.per_prompt[:, : alone.shape[1], i], alone, rtol=1e-4, atol=1e-5)
    # values: the mean over the prompts that have the position
    torch.testing.assert_close(both.values[:, :short], both.per_prompt[:, :short].mean(-1))
    torch.testing.assert_close(both.values[:, short:], both.per_prompt[:, short:, 0])
    df = both.to_dataframe()
    assert len(df) == len(both.labels) and df["value"].notna().all()
    prompt_df_values = both.prompt_values(1)
    assert bool(torch.isnan(prompt_df_values[:, short:]).all())
    both.plot()  # the mean
    fig = both.plot(prompt=1)  # one prompt, NaN at its padding
    z = fig.data[0].z
    assert any(math.isnan(float(v)) for row in z for v in row)


def test_a_batch_without_padding_has_no_nan(model):
    r = interp.patch(model, CLEAN[:1], CORRUPT[:1], metric=METRIC, positions="each", progress=False)
    assert not bool(torch.isnan(r.per_prompt).any())
