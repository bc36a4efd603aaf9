"""Pooled encoder reads: Decomposition.top/plot at pos="mean" decompose the mean-pooled sentence embedding
exactly, and an encoder's default position is the mean (not its trailing [SEP])."""

from __future__ import annotations

import pytest
import torch

import interp
from tiny_models import tiny_hf_model, tiny_model

PROMPTS = ["w1 w2 w3 w4 w5", "w7 w8"]  # different lengths: the second is padded


@pytest.mark.slow
def test_mean_pos_decomposes_the_mean_pooled_embedding_exactly():
    model = tiny_model("bert")
    hf = tiny_hf_model("bert")
    tr = interp.trace(model, PROMPTS)
    d = tr.decompose("final")
    assert d.default_pos == "mean"
    batch = interp.models.tokenize(model, PROMPTS)
    with torch.no_grad():  # independent: Hugging Face's own last hidden state, mean over real tokens
        h = hf.bert(batch.tokens, attention_mask=batch.attention_mask).last_hidden_state.double()
    for i in range(len(PROMPTS)):
        m = batch.attention_mask[i].bool()
        pooled = h[i, m].mean(0)
        df = d.to_dataframe(prompt=i, pos="mean")
        assert df["projection"].sum() == pytest.approx(float(pooled.norm()), rel=1e-5)
        assert d.to_dataframe(prompt=i).equals(df)  # the encoder default is the mean
        last = d.to_dataframe(prompt=i, pos=int(m.nonzero().max()))  # [SEP], on request only
        assert not last["projection"].equals(df["projection"])
    top = d.top(3, prompt=1, pos="mean")
    assert list(top["term"]) == list(df.reindex(df["projection"].abs().sort_values(ascending=False).index)["term"][:3])
    fig = d.plot(prompt=1)
    assert "mean over the prompt's tokens" in fig.layout.title.text


def test_decoder_default_stays_the_last_token_and_bad_pos_is_named():
    d = interp.trace(tiny_model("gpt2"), "w1 w2 w3").decompose("unembed")
    assert d.default_pos == -1 and d.to_dataframe().equals(d.to_dataframe(pos=-1))
    with pytest.raises(interp.InterpError, match="pos='first'"):
        d.top(pos="first")
