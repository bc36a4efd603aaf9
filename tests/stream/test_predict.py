"""interp.predict: the top-k next tokens, checked against the plain Hugging Face model's own logits and softmax
(prompt by prompt, unpadded, so padding of a batch cannot hide an error), and typed errors for bad input."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.errors import ArgumentError, UnsupportedOperationError
from tiny_models import tiny_hf_model, tiny_model, tiny_tokenizer

PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8", "w9 w10 w11 w1"]


def _hf_next(hf, tok, text: str, pos: int = -1) -> torch.Tensor:
    """The HF model's logits [d_vocab] after ``text`` (BOS prepended, as the bridge tokenises), float64."""
    ids = torch.tensor([[tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        return hf(ids).logits[0, pos].double()


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_batch_equals_hf_softmax_prompt_by_prompt(family):
    m, hf, tok = tiny_model(family), tiny_hf_model(family), tiny_tokenizer()
    p = interp.predict(m, PROMPTS, k=7, batch_size=2)
    assert p.top_ids.shape == (3, 7) and p.n_prompts == 3 and p.k == 7
    for b, text in enumerate(PROMPTS):
        z = _hf_next(hf, tok, text)
        probs = torch.softmax(z, -1)
        want_p, want_ids = probs.topk(7)
        assert p.top_ids[b].tolist() == want_ids.tolist()
        torch.testing.assert_close(p.top_probs[b].double(), want_p, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(p.top_logits[b].double(), z[want_ids], atol=1e-4, rtol=1e-4)
        # result[token]: that token's probability in every prompt, also outside a prompt's top k
        for lab, i in zip(p.labels, p.label_ids):
            assert float(p[lab][b]) == pytest.approx(float(probs[i]), abs=1e-6)
    df = p.to_dataframe(prompt=1)
    assert df["rank"].tolist() == list(range(1, 8)) and df["token"].tolist()[0] == tok.decode([int(p.top_ids[1, 0])])
    assert (df["logprob"] - df["prob"].map(lambda x: float(torch.tensor(x).log()))).abs().max() < 1e-6


def test_one_prompt_positions_and_token_ids():
    m, hf, tok = tiny_model("llama"), tiny_hf_model("llama"), tiny_tokenizer()
    p = interp.predict(m, "w1 w2 w3 w4", k=3, pos=2)  # after "<bos> w1 w2"
    z = _hf_next(hf, tok, "w1 w2 w3 w4", pos=2)
    assert p.top_ids[0].tolist() == z.topk(3).indices.tolist() and p.positions.tolist() == [2]
    ids = m.to_tokens(["w5 w6 w7", "w8 w9 w10"])
    q = interp.predict(m, ids, k=2, pos=[-1, -2])
    for b, (text, pos) in enumerate([("w5 w6 w7", -1), ("w8 w9 w10", -2)]):
        assert q.top_ids[b].tolist() == _hf_next(hf, tok, text, pos).topk(2).indices.tolist()
    fig = q.plot(prompt=1)
    assert list(fig.data[0].x) == pytest.approx(q.top_probs[1].tolist())


def test_bad_input():
    m = tiny_model("llama")
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ArgumentError, match="k="):
            interp.predict(m, "w1 w2", k=bad)
    with pytest.raises(ArgumentError, match="k=101 must be at most the number of output tokens, 100"):
        interp.predict(m, "w1 w2", k=101)
    with pytest.raises(ArgumentError, match="pos=5 is out of range for prompt 0, which has 3 tokens"):
        interp.predict(m, "w1 w2", pos=5)
    with pytest.raises(ArgumentError, match="pos has 1 entries but there are 2 prompts"):
        interp.predict(m, ["w1 w2", "w3"], pos=[0])
    with pytest.raises(ArgumentError, match="batch_size="):
        interp.predict(m, "w1 w2", batch_size=0)
    with pytest.raises(UnsupportedOperationError, match="encoder"):
        interp.predict(tiny_model("bert"), "w1 w2")
    with pytest.raises(ArgumentError, match="prompt="):
        interp.predict(m, "w1 w2").to_dataframe(prompt=3)


@pytest.mark.real
def test_smollm2_ioi_prediction(smollm2):
    """The IOI prompt: " Mary" is smollm2's top prediction, with the probability softmax gives on the HF logits."""
    prompt = "When John and Mary went to the shops, John gave the bag to"
    p = interp.predict(smollm2, prompt, k=5)
    ids = smollm2.tokenizer(prompt, return_tensors="pt")["input_ids"]  # the tokenizer adds BOS itself
    with torch.no_grad():
        z = smollm2.bridge.original_model(ids).logits[0, -1].double()
    want_p, want_ids = torch.softmax(z, -1).topk(5)
    assert p.top_ids[0].tolist() == want_ids.tolist() and p.labels[0] == " Mary"
    torch.testing.assert_close(p.top_probs[0].double(), want_p, atol=1e-4, rtol=1e-3)


def test_positions_read_as_every_analysis_reads_them():
    """predict resolved ``pos`` with a copy of its own (interp.stream.internal.resolve_positions is now the one): a
    position at padding is said to be padding, a tensor of positions works as in attribute_logits, a float tensor is
    refused."""
    m, hf, tok = tiny_model("llama"), tiny_hf_model("llama"), tiny_tokenizer()
    with pytest.raises(ArgumentError, match=r"pos=3 points at padding in prompt 1 \(it has 3 real tokens\)"):
        interp.predict(m, ["w1 w2 w3 w4", "w5 w6"], pos=3)
    q = interp.predict(m, ["w1 w2 w3 w4", "w5 w6"], k=2, pos=torch.tensor([1, -1]))
    assert q.positions.tolist() == [1, 2]
    for b, (text, pos) in enumerate([("w1 w2 w3 w4", 1), ("w5 w6", -1)]):
        assert q.top_ids[b].tolist() == _hf_next(hf, tok, text, pos).topk(2).indices.tolist()
    with pytest.raises(ArgumentError, match="pos must hold integer positions"):
        interp.predict(m, "w1 w2", pos=torch.tensor([1.0]))
