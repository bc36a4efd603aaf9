"""Targets of attribute_logits beyond one logit difference, and sweeps that keep their targets.

Every total is checked against the plain Hugging Face model's own logits (no interp code), run on
each token sequence separately (no padding); per-term identities are checked against attributions
of single logits, whose terms are themselves checked against HF in test_logit_attribution.py.
"""

import pytest
import torch

import interp
from interp.attribution import LogitAttribution, attribute_logits
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.plots import attribution_heatmap, attribution_waterfall
from interp.plots._common import quoted
from tiny_models import tiny_hf_model, tiny_model

DECODERS = ("gpt2", "llama", "neox")
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10 w11"]


def _ids(m, text):
    return m.tokenizer(text, add_special_tokens=False)["input_ids"]


def _hf_logits(family, m, rows):
    """The HF model's logits for each token-id row, one row at a time: [len(row), d_vocab] each."""
    hf = tiny_hf_model(family)
    with torch.no_grad():
        return [hf(torch.tensor([r])).logits[0] for r in rows]


def _prompt_ids(m, prompt):
    return m.to_tokens(prompt)[0].tolist()


# ---- sweeps keep their targets (answers, wrongs, tokens per prompt) -----------------------------------


def test_per_prompt_sweep_keeps_every_target_and_round_trips(tmp_path):
    m = tiny_model("gpt2")
    answers, wrongs = ["w3", "w8", "w12"], ["w5", "w9", "w13"]
    a = attribute_logits(m, PROMPTS, answer=answers, wrong=wrongs)
    assert a.target.startswith("per-prompt")
    assert a.answer_ids.tolist() == [_ids(m, t)[0] for t in answers]
    assert a.wrong_ids.tolist() == [_ids(m, t)[0] for t in wrongs]
    assert a.prompt_targets == [f"logit['{x}'] − logit['{y}']" for x, y in zip(answers, wrongs)]
    assert a.prompt_str_tokens == [m.to_str_tokens(_prompt_ids(m, p)) for p in PROMPTS]
    assert a.str_tokens == a.prompt_str_tokens[0]
    back = LogitAttribution.load(a.save(tmp_path / "a.safetensors"))
    assert torch.equal(back.answer_ids, a.answer_ids) and torch.equal(back.wrong_ids, a.wrong_ids)
    assert back.prompt_targets == a.prompt_targets and back.prompt_str_tokens == a.prompt_str_tokens
    assert back.target == a.target and torch.equal(back.values, a.values)
    # one shared answer is not a per-prompt sweep
    same = attribute_logits(m, PROMPTS, answer="w3", wrong="w5")
    assert same.target == "logit['w3'] − logit['w5']" and same.answer_ids.tolist() == [_ids(m, "w3")[0]] * 3


@pytest.mark.slow
def test_plot_of_prompt_i_names_prompt_i(tmp_path):
    m = tiny_model("llama")
    a = attribute_logits(m, PROMPTS, answer=["w3", "w8", "w12"], wrong=["w5", "w9", "w13"])
    for i in range(len(PROMPTS)):
        toks = m.to_str_tokens(_prompt_ids(m, PROMPTS[i]))
        p = int(a.positions[i])
        for fig in (a.plot(prompt=i), attribution_heatmap(a, prompt=i), attribution_waterfall(a, prompt=i)):
            title = fig.layout.title.text
            assert a.prompt_targets[i] in title.replace("&#x27;", "'"), title
            assert f"at token {quoted(toks[p])} (pos {p})" in title, title
            others = [t for j, t in enumerate(a.prompt_targets) if j != i]
            assert not any(t in title for t in others)
    mean_title = a.plot().layout.title.text
    assert "per-prompt" in mean_title and "mean over prompts" in mean_title
    # a loaded result draws the same titles
    back = LogitAttribution.load(a.save(tmp_path / "a.safetensors"))
    assert back.plot(prompt=2).layout.title.text == a.plot(prompt=2).layout.title.text


# ---- multi-token answers (teacher-forced) -------------------------------------------------------------


@pytest.mark.parametrize("family", DECODERS)
def test_multi_token_answer_is_the_sum_of_teacher_forced_logits(family):
    m = tiny_model(family)
    ans, wrong = "w20 w21 w22", "w30 w31"
    a = attribute_logits(m, PROMPTS, answer=ans, wrong=wrong, multi_token=True)
    A, W = _ids(m, ans), _ids(m, wrong)
    want = []
    for prompt in PROMPTS:
        base = _prompt_ids(m, prompt)
        la, lw = _hf_logits(family, m, [base + A[:-1], base + W[:-1]])
        p = len(base) - 1
        want.append(sum(la[p + t, x] for t, x in enumerate(A)) - sum(lw[p + t, x] for t, x in enumerate(W)))
    want = torch.stack(want)
    torch.testing.assert_close(a.total, want, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), want, atol=2e-5, rtol=1e-5)
    assert a.relative_error <= 1e-5
    assert a.answer_ids.tolist() == [A] * 3
    assert a.wrong_ids.tolist() == [[W]] * 3  # [N, W=1, T]
    assert "teacher-forced" in a.target
    assert a.prompt_str_tokens[1] == m.to_str_tokens(_prompt_ids(m, PROMPTS[1]) + A[:-1])
    # term by term: the sum of single-token attributions of each answer token in its own context
    for i, prompt in enumerate(PROMPTS[:2]):
        base = _prompt_ids(m, prompt)
        parts = [attribute_logits(m, torch.tensor([base + A[:t]]), answer=x).values[:, 0] for t, x in enumerate(A)]
        parts += [-attribute_logits(m, torch.tensor([base + W[:t]]), answer=x).values[:, 0] for t, x in enumerate(W)]
        torch.testing.assert_close(a.values[:, i], torch.stack(parts).sum(0), atol=1e-5, rtol=1e-5)


def test_multi_token_at_an_earlier_position_truncates_the_prompt():
    m = tiny_model("llama")
    A = _ids(m, "w40 w41")
    a = attribute_logits(m, ["w1 w2 w3 w4 w5"], answer=[tuple(A)], pos=2, multi_token=True)
    base = _prompt_ids(m, "w1 w2 w3 w4 w5")[:3]
    (lg,) = _hf_logits("llama", m, [base + A[:1]])
    torch.testing.assert_close(a.total, (lg[2, A[0]] + lg[3, A[1]])[None], atol=2e-5, rtol=1e-5)
    assert a.positions.tolist() == [2]


# ---- sets of wrong tokens --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", DECODERS)
def test_wrong_set_mean_is_exact_and_linear(family):
    m = tiny_model(family)
    ws = ["w5", "w6", "w17"]
    a = attribute_logits(m, PROMPTS, answer="w3", wrong=set(ws))
    assert a.target == "logit['w3'] − mean(logit['w5'], logit['w6'], logit['w17'])"
    assert a.wrong_agg == "mean" and sorted(a.wrong_ids[0].tolist()) == sorted(_ids(m, " ".join(ws)))
    rows = [_prompt_ids(m, p) for p in PROMPTS]
    lg = _hf_logits(family, m, rows)
    a3, wid = _ids(m, "w3")[0], _ids(m, " ".join(ws))
    want = torch.stack([l[-1, a3] - l[-1, wid].mean() for l in lg])
    torch.testing.assert_close(a.total, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), want, atol=1e-5, rtol=1e-5)
    singles = torch.stack([attribute_logits(m, PROMPTS, answer="w3", wrong=w).values for w in ws])
    torch.testing.assert_close(a.values, singles.mean(0), atol=1e-6, rtol=1e-5)
    # per prompt lists of different sizes
    b = attribute_logits(m, PROMPTS, answer="w3", wrong=[["w5", "w6"], "w7", {"w8", "w9", "w10"}])
    assert b.wrong_ids.shape == (3, 3) and b.wrong_ids[1].tolist()[1:] == [-1, -1]
    assert b.target.startswith("per-prompt") and b.relative_error <= 1e-5


@pytest.mark.parametrize("family", DECODERS)
def test_wrong_set_logsumexp_splits_with_softmax_weights_and_reports_the_remainder(family):
    m = tiny_model(family)
    ws = ["w5", "w6", "w17"]
    a = attribute_logits(m, PROMPTS, answer="w3", wrong=[ws] * 3, wrong_agg="logsumexp")
    assert a.labels[-1] == "wrong_lse_remainder" and "logsumexp(" in a.target
    lg = _hf_logits(family, m, [_prompt_ids(m, p) for p in PROMPTS])
    a3, wid = _ids(m, "w3")[0], _ids(m, " ".join(ws))
    lw = torch.stack([l[-1, wid] for l in lg])  # [N, 3]
    want = torch.stack([l[-1, a3] for l in lg]) - torch.logsumexp(lw, -1)
    torch.testing.assert_close(a.total, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), want, atol=1e-5, rtol=1e-5)
    pi = torch.softmax(lw, -1)
    entropy = -(pi * pi.log()).sum(-1)
    torch.testing.assert_close(a["wrong_lse_remainder"], -entropy, atol=1e-5, rtol=1e-5)
    # the linear part: Σ_w π_w · (terms of logit[answer] − logit[w])
    singles = torch.stack([attribute_logits(m, PROMPTS, answer="w3", wrong=w).values for w in ws])  # [3, n, N]
    torch.testing.assert_close(a.values[:-1], (singles * pi.T[:, None, :]).sum(0), atol=1e-5, rtol=1e-5)
    # one wrong token: logsumexp is that logit, the remainder 0
    one = attribute_logits(m, PROMPTS, answer="w3", wrong="w5", wrong_agg="logsumexp")
    assert float(one["wrong_lse_remainder"].abs().max()) == 0.0


# ---- log-probabilities -----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", DECODERS)
def test_logprob_target_reports_the_log_partition(family):
    m = tiny_model(family)
    a = attribute_logits(m, PROMPTS, answer="w3", target="logprob")
    lg = _hf_logits(family, m, [_prompt_ids(m, p) for p in PROMPTS])
    a3 = _ids(m, "w3")[0]
    want = torch.stack([torch.log_softmax(l[-1], -1)[a3] for l in lg])
    torch.testing.assert_close(a.total, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        a["log_partition"], -torch.stack([torch.logsumexp(l[-1], -1) for l in lg]), atol=1e-5, rtol=1e-5
    )
    logit = attribute_logits(m, PROMPTS, answer="w3")
    assert a.labels[:-1] == logit.labels and a.target == "log p('w3')" and a.target_kind == "logprob"
    torch.testing.assert_close(a.values[:-1], logit.values, atol=0, rtol=0)
    # a multi-token answer: the sequence's log-probability, teacher-forced
    A = _ids(m, "w20 w21")
    s = attribute_logits(m, PROMPTS[1], answer="w20 w21", target="logprob", multi_token=True)
    (l,) = _hf_logits(family, m, [_prompt_ids(m, PROMPTS[1]) + A[:1]])
    p = len(_prompt_ids(m, PROMPTS[1])) - 1
    want = torch.log_softmax(l[p], -1)[A[0]] + torch.log_softmax(l[p + 1], -1)[A[1]]
    torch.testing.assert_close(s.total, want[None], atol=1e-5, rtol=1e-5)
    assert s.relative_error <= 1e-5


def test_logprob_target_closes_under_a_logit_soft_cap():
    """Gemma 2 caps its logits, c·tanh(z/c): a log-probability's terms (the cap's first-order split of z, its
    remainder and the log-partition) sum to HF's log-softmax of the capped logits — the log-partition weighted by
    the read's coefficient, not by the cap's slope (which scales z's terms only)."""
    m = tiny_model("gemma2")
    assert m.arch.final_softcap > 0
    a = attribute_logits(m, PROMPTS, answer="w3", target="logprob")
    lg = _hf_logits("gemma2", m, [_prompt_ids(m, p) for p in PROMPTS])
    a3 = _ids(m, "w3")[0]
    want = torch.stack([torch.log_softmax(l[-1], -1)[a3] for l in lg])
    torch.testing.assert_close(a.total, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        a["log_partition"], -torch.stack([torch.logsumexp(l[-1], -1) for l in lg]), atol=1e-5, rtol=1e-5
    )
    assert a.relative_error <= 1e-5
    wrong = attribute_logits(m, PROMPTS, answer="w3", wrong={"w5", "w6"}, target="logprob", wrong_agg="mean")
    assert wrong.relative_error <= 1e-5


def test_toy_without_final_norm_logprob_and_sets():
    m = interp.load_model("toy-attn-only-2l")
    toks = torch.tensor([[3, 9, 4, 11, 3, 9], [5, 6, 7, 5, 6, 2]])
    a = attribute_logits(m, toks, answer=[4, 7], wrong=[{1, 2}, {8}], wrong_agg="logsumexp", target="logprob")
    with torch.no_grad():
        lp = torch.log_softmax(m.bridge(toks)[:, -1], -1)
    want = torch.stack([lp[0, 4] - torch.logsumexp(lp[0, [1, 2]], 0), lp[1, 7] - lp[1, 8]])
    torch.testing.assert_close(a.total, want, atol=1e-5, rtol=1e-5)
    assert a.relative_error <= 1e-5


# ---- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, err, words",
    [
        (dict(answer="w1", target="prob"), ArgumentError, ["target='prob'", "logprob"]),
        (dict(answer="w1", wrong="w2", wrong_agg="max"), ArgumentError, ["wrong_agg='max'", "logsumexp"]),
        (dict(answer="w1", wrong=set()), ArgumentError, ["wrong", "empty"]),
        (dict(answer="w1", wrong=[["w2"], [], "w3"]), ArgumentError, ["wrong[1]", "empty"]),
        (dict(answer="w1", wrong=["w2", "w3"]), ArgumentError, ["wrong has 2 entries", "set"]),
        (dict(answer="w1 w2"), ArgumentError, ["answer='w1 w2'", "multi_token=True"]),
        (dict(answer="w1", multi_token="yes"), ArgumentError, ["multi_token='yes'"]),
        (dict(answer=[(5, 6), (7,), ()], multi_token=True), ArgumentError, ["answer[2]", "empty"]),
        (dict(answer=[(5, 600), 7, 8], multi_token=True), ArgumentError, ["answer[0][1]=600"]),
    ],
)
def test_bad_target_input(kwargs, err, words):
    m = tiny_model("gpt2")
    with pytest.raises(err) as e:
        attribute_logits(m, PROMPTS, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_head_source_refuses_post_norm():
    from interp.attribution._sources import require_head_sources

    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        require_head_sources(tiny_model("bert"), "unit='head_source'")
