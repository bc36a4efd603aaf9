"""report()'s causal-effects section against plain transformer-lens bridge hooks (never interp.effects).

* total(head) = M(clean run, that head's ``attn.hook_z`` slice replaced by the corrupt run's — or by
  zero) − M(clean run), everything downstream recomputed;
* direct(head) = the same replacement with every other head's z, every MLP output and every norm
  scale (``hook_scale``) held at the clean run's; indirect = total − direct;
* with zero ablation the direct effect is minus the head's term in the report's own attribution;
* baselines against the plain Hugging Face model; typed errors before anything is written.
"""

import json

import pytest
import torch

from interp.errors import ArgumentError, ShapeError
from interp.reports import report
from plots_helpers import external_resources
from tiny_models import tiny_hf_model, tiny_model

PROMPT = "w1 w2 w3 w4 w1 w2"
CORRUPT = "w5 w6 w3 w4 w5 w6"
TITLE = "Causal effects: total vs direct effect per head"


def _bridge_effects(m, ids_clean, ids_src, layer, head, read):
    """(total, direct) of one head by plain bridge hooks; ``ids_src`` None = zero ablation."""
    names = [
        k
        for k in m.bridge.hook_dict
        if k.endswith(("attn.hook_z", "hook_mlp_out", "hook_scale"))
        and not k.startswith(("ln_final", "embed_ln"))
        or (k == "ln_final.hook_scale" and m.arch.has_logits)
    ]
    _, cc = m.bridge.run_with_cache(ids_clean, names_filter=lambda k: k in names)
    zk = f"blocks.{layer}.attn.hook_z"
    if ids_src is None:
        src = torch.zeros_like(cc[zk][:, :, head])
    else:
        _, kc = m.bridge.run_with_cache(ids_src, names_filter=lambda k: k == zk)
        src = kc[zk][:, :, head]
    last = f"blocks.{m.arch.n_layers - 1}.hook_resid_post"
    store = {}

    def grab(x, hook=None):
        store["x"] = x
        return x

    def swap(z, hook=None):
        z = z.clone()
        z[:, :, head] = src
        return z

    def run(hooks):
        with torch.no_grad():
            out = m.bridge.run_with_hooks(ids_clean, fwd_hooks=hooks + [(last, grab)])
        return read(out, store["x"])

    clean = run([])
    total = run([(zk, swap)]) - clean

    def frozen(k):
        def f(x, hook=None):
            if k != zk:
                return cc[k]
            z = cc[k].clone()
            z[:, :, head] = src
            return z

        return f

    direct = run([(k, frozen(k)) for k in names]) - clean
    return float(clean), float(total), float(direct)


@pytest.fixture(scope="module")
def gpt2_noising(tmp_path_factory):
    m = tiny_model("gpt2", dtype=torch.float64)
    out = tmp_path_factory.mktemp("rep-effects") / "rep"
    index = report(m, PROMPT, answer="w3", wrong="w4", corrupt=CORRUPT, out_dir=out, n_heads=3, static=False)
    return m, json.loads((out / "results.json").read_text()), index.read_text()


@pytest.mark.slow
def test_noising_total_and_direct_match_hooked_bridge_runs(gpt2_noising):
    m, r, _ = gpt2_noising
    e = r["effects"]
    assert e["ablation"] == "corrupt" and e["corrupt_prompt"] == CORRUPT
    a, w = m.tokenizer.convert_tokens_to_ids(["w3", "w4"])
    ids_c, ids_k = m.to_tokens(PROMPT), m.to_tokens(CORRUPT)
    assert r["token_ids"] == ids_c[0].tolist() and ids_k.shape == ids_c.shape

    def read(out, x):
        return out[0, -1, a] - out[0, -1, w]

    heads = {h["head"]: h for h in e["heads"]}
    assert len(heads) == m.arch.n_layers * m.arch.n_heads == 8
    measured = []
    for lab, h in heads.items():
        layer, head = int(lab[1 : lab.index(".")]), int(lab[lab.index("H") + 1 :])
        clean, total, direct = _bridge_effects(m, ids_c, ids_k, layer, head, read)
        assert e["clean"] == pytest.approx(clean, abs=1e-10)
        assert h["total"] == pytest.approx(total, abs=1e-10), lab
        assert h["direct"] == pytest.approx(direct, abs=1e-10), lab
        assert h["indirect"] == pytest.approx(h["total"] - h["direct"], abs=1e-12), lab
        measured.append((lab, total, direct))
    # not vacuous: the effects are far above the tolerance and direct differs from total somewhere
    assert max(abs(t) for _, t, _ in measured) > 1e-3
    assert max(abs(t - d) for _, t, d in measured) > 1e-5


def test_noising_baselines_match_the_hf_model(gpt2_noising):
    m, r, _ = gpt2_noising
    hf = tiny_hf_model("gpt2", dtype=torch.float64)
    a, w = m.tokenizer.convert_tokens_to_ids(["w3", "w4"])
    with torch.no_grad():
        lc = hf(m.to_tokens(PROMPT)).logits[0, -1]
        lk = hf(m.to_tokens(CORRUPT)).logits[0, -1]
    e = r["effects"]
    assert e["metric"] == "logit['w3'] − logit['w4']"
    assert e["clean"] == pytest.approx(float(lc[a] - lc[w]), abs=1e-10)
    assert e["corrupt"] == pytest.approx(float(lk[a] - lk[w]), abs=1e-10)
    assert abs(e["corrupt"] - e["clean"]) > 1e-3  # the corrupt prompt changes the metric


def test_page_has_the_effects_section_with_the_top_heads(gpt2_noising):
    _, r, text = gpt2_noising
    assert f">{TITLE}</h2>" in text and 'href="#effects"' in text
    assert "value on the corrupt prompt <span class='tok'>w5 w6 w3 w4 w5 w6</span>" in text
    assert "indirect = total − direct" in text.lower() and "final norm&#x27;s scale frozen" not in text
    assert "the final norm's scale frozen" in text
    sec = text[text.index('<section id="effects">') :]
    sec = sec[: sec.index("</section>")]
    top = sorted(r["effects"]["heads"], key=lambda h: -abs(h["total"]))[:3]
    assert [s.split("</code>")[0] for s in sec.split("<td><code>")[1:]] == [h["head"] for h in top]
    assert "Plotly.newPlot(" in sec and external_resources(text) == []


@pytest.mark.slow
def test_zero_ablation_is_the_default_and_labelled(tmp_path):
    m = tiny_model("llama", dtype=torch.float64)
    index = report(m, PROMPT, answer="w3", out_dir=tmp_path / "rep", n_heads=2, static=False)
    r = json.loads((tmp_path / "rep" / "results.json").read_text())
    e = r["effects"]
    assert e["ablation"] == "zero (no corrupt prompt given)" and e["corrupt"] is None
    assert e["metric"] == "logit['w3']"
    text = index.read_text()
    assert "<b>zero (no corrupt prompt given)</b>" in text and f">{TITLE}</h2>" in text
    a = m.tokenizer.convert_tokens_to_ids("w3")
    ids = m.to_tokens(PROMPT)
    attr = dict(zip(r["attribution"]["labels"], r["attribution"]["values"]))
    heads = {h["head"]: h for h in e["heads"]}
    for lab in ("L0.H1", "L1.H2"):
        layer, head = int(lab[1]), int(lab[-1])
        clean, total, direct = _bridge_effects(m, ids, None, layer, head, lambda out, x: out[0, -1, a])
        assert e["clean"] == pytest.approx(clean, abs=1e-10)
        assert heads[lab]["total"] == pytest.approx(total, abs=1e-10) and abs(total) > 1e-4
        assert heads[lab]["direct"] == pytest.approx(direct, abs=1e-10)
        # zero ablation removes the whole write: direct = −(the head's term in the attribution section)
        assert heads[lab]["direct"] == pytest.approx(-attr[lab], abs=1e-10)


@pytest.mark.slow
def test_encoder_effects_read_the_attributed_direction(tmp_path):
    m = tiny_model("bert", dtype=torch.float64)
    report(m, PROMPT, corrupt=CORRUPT, out_dir=tmp_path / "rep", static=False)
    r = json.loads((tmp_path / "rep" / "results.json").read_text())
    hf = tiny_hf_model("bert", dtype=torch.float64)
    with torch.no_grad():
        hc = hf.bert(m.to_tokens(PROMPT)).last_hidden_state[0].mean(0)
        hk = hf.bert(m.to_tokens(CORRUPT)).last_hidden_state[0].mean(0)
    u = hc / hc.norm()
    e = r["effects"]
    assert e["clean"] == pytest.approx(float(hc.norm()), abs=1e-9)  # the attributed ‖h̄‖
    assert e["corrupt"] == pytest.approx(float(hk @ u), abs=1e-9)
    heads = {h["head"]: h for h in e["heads"]}
    ids_c, ids_k = m.to_tokens(PROMPT), m.to_tokens(CORRUPT)
    top2 = sorted(heads, key=lambda lab: -abs(heads[lab]["total"]))[:2]
    for lab in top2:
        _, total, direct = _bridge_effects(m, ids_c, ids_k, int(lab[1]), int(lab[-1]), lambda out, x: x[0].mean(0) @ u)
        assert heads[lab]["total"] == pytest.approx(total, abs=1e-9)
        assert heads[lab]["direct"] == pytest.approx(direct, abs=1e-9)
    assert abs(heads[top2[0]]["total"]) > 1e-3


def test_corrupt_of_another_length_raises_before_writing(tmp_path):
    m = tiny_model("gpt2")
    out = tmp_path / "never"
    with pytest.raises(ShapeError, match=r"corrupt='w5 w6 w3' has 4 tokens but prompt has 7"):
        report(m, PROMPT, answer="w3", corrupt="w5 w6 w3", out_dir=out, static=False)
    with pytest.raises(ArgumentError, match="corrupt=3 must be a non-empty string"):
        report(m, PROMPT, answer="w3", corrupt=3, out_dir=out, static=False)
    assert not out.exists()
