"""Write the notebooks in this folder from the cell sources below (no outputs).

The notebooks are the source of truth once written; this script is how they were generated and is
the easiest place to change several at once. Run ``.venv/bin/python notebooks/make_notebooks.py``
(optionally with notebook numbers, e.g. ``01 03``) and commit the regenerated ``.ipynb`` files;
they carry no outputs. The test suite executes every notebook with nbmake (``make test``).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

SETUP = """\
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below runs offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import logging
import time

import torch

import interp

logging.getLogger("transformers").setLevel(logging.ERROR)
torch.manual_seed(0)
T0 = time.perf_counter()"""


def md(src: str):
    return new_markdown_cell(textwrap.dedent(src).strip("\n"))


def code(src: str):
    return new_code_cell(textwrap.dedent(src).strip("\n"))


def runtime_cell():
    return code('print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")')


# --------------------------------------------------------------------------------------------------
NB01 = [
    md(r"""
    # 01 · The residual stream, decomposed exactly

    **What this shows.** The residual-stream view of a transformer (seed 000; Elhage et al. 2021, §2):
    each token carries one `d_model`-dimensional vector from the embedding to the unembedding, and every
    sublayer *reads* from it and *writes* back into it. We

    1. trace **smollm2-135m** (pre-norm RMSNorm, Llama family) on one prompt and list its read and write
       points;
    2. decompose a residual point and a read point (the query input of one head) into per-head / per-MLP
       terms and print the **closure error** |Σ terms − the model's own tensor|;
    3. do the same for the post-norm **MiniLM** encoder (seeds 001, 003, 004: "Add & Norm"), where the raw
       writes do *not* add up to the hidden state, and show how interp carries every write through each
       later norm with the norm's scale frozen from the forward pass.

    Offline, about a minute on 2 CPU cores (the two models load from installed packages).
    """),
    code(SETUP),
    md(r"""
    ## Pre-norm: the stream is a plain sum

    A pre-norm block (GPT-2, Llama, SmolLM2) normalises only the *copy* a sublayer reads:

    $$x_\text{mid} = x + \text{Attn}(N_1(x)), \qquad x_\text{out} = x_\text{mid} + \text{MLP}(N_2(x_\text{mid})),$$

    with one final norm before the unembedding. (Seed 003 writes the pre-norm residual as
    $t^3 = t^2 + t^1$ with $t^1 = \text{LN}(x)$, i.e. it adds the *normalised* input back; that is wrong —
    the un-normalised $x$ is carried forward, which is why the stream stays additive.)
    So the residual stream at any point is the sum of everything written before it: the embedding, each
    head's $z_h W_O^h$, each MLP's output (and output biases where a model has them).
    """),
    code("""
    model = interp.load_model("smollm2-135m")
    print(model)
    prompt = "When John and Mary went to the shops, John gave the bag to"
    tr = interp.trace(model, prompt)  # one hooked forward pass
    print(tr.str_tokens[0])
    print(f"{len(tr.writes)} writes: {tr.writes[:3]} … {tr.writes[-2:]}")
    print(f"{len(tr.reads)} reads:  {tr.reads[:2]} … {tr.reads[-2:]}")
    print(f"{len(tr.resid_points)} resid points: {tr.resid_points[:3]} …")
    """),
    md(r"""
    Reads are named by what reads: `L20.attn.q[H3]` is query head 3's input, `L20.attn.k[H1]` /
    `L20.attn.v[H1]` a *KV head's* input (smollm2 has 9 query heads sharing 3 KV heads, GQA),
    `L20.mlp.in` the MLP's input and `unembed` what the unembedding reads (after the final norm).

    Decompose the residual stream after block 10. Every term is a raw write, untouched; the check below
    uses only the model's own hooks: `resid_mid − resid_pre` of block 3 must equal the sum of that layer's
    head terms (smollm2 has no attention bias).
    """),
    code("""
    d = tr.decompose("blocks.10.hook_resid_post")
    print(d)
    print(f"closure error {d.closure_error:.2e} (relative {d.relative_error:.2e})")

    acts = tr.activations
    heads3 = sum(d[f"L3.H{h}"] for h in range(model.arch.n_heads))
    attn3 = acts["blocks.3.hook_resid_mid"] - acts["blocks.3.hook_resid_pre"]
    print("max |Σ_h L3.H* − (resid_mid − resid_pre)| =", f"{(heads3 - attn3).abs().max().item():.2e}")
    print("max |L3.mlp term − hook_mlp_out|          =",
          f"{(d['L3.mlp'] - acts['blocks.3.hook_mlp_out']).abs().max().item():.2e}")
    d.top(8)
    """),
    md(r"""
    ## Reading through a norm

    A read point sees the stream through its sublayer's norm. RMSNorm is
    $N(x) = \gamma \odot x / \sigma(x)$ with $\sigma(x) = \sqrt{\text{mean}(x^2) + \epsilon}$: not linear in
    $x$, but with the per-token scale $\sigma$ **frozen** at its value in this forward pass it is, so the
    normalised input splits exactly into $\gamma \odot w / \sigma$ for every earlier write $w$
    (for LayerNorm the writes are also centred and the norm's $\beta$ becomes a term of its own).
    Here is what query head 3 of layer 20 reads at the last token, term by term:
    """),
    code("""
    q = tr.decompose("L20.attn.q[H3]")
    print(q)
    print(f"closure error {q.closure_error:.2e} (relative {q.relative_error:.2e}) against blocks.20.ln1.hook_out")
    q.plot(k=15)
    """),
    md(r"""
    The same token's whole stream, layer by layer: the norm of the stream at every resid point, and how
    large each sublayer's write is (seed 000's picture). In a pre-norm model a write, once added, stays in
    the stream unchanged.
    """),
    code("""
    from interp.plots import residual_stream_figure

    residual_stream_figure(tr, pos=-1)
    """),
    md(r"""
    ## Post-norm: Add & Norm rescales everything already in the stream

    The original Transformer and BERT (MiniLM is a 6-layer BERT) put the norm *after* the residual
    addition (seeds 001, 004):

    $$x_\text{mid} = N_1(x + \text{Attn}(x)), \qquad x_\text{out} = N_2(x_\text{mid} + \text{MLP}(x_\text{mid})).$$

    Each norm centres and rescales the whole stream, including everything written before it, and adds
    its own $\beta$. So summing the raw writes (embeddings + heads + MLPs) does **not** give the hidden
    state — the check below does exactly that, from the captured activations, and misses by a lot:
    """),
    code("""
    enc = interp.load_model("minilm-l6")
    print(enc)
    sentence = "A man is playing a guitar on stage."
    etr = interp.trace(enc, sentence)
    print(etr.str_tokens[0])

    a, w = etr.activations, enc.weights
    naive = a["embed.hook_out"] + a["pos_embed.hook_out"] + a["token_type_embed.hook_out"]
    for l in range(enc.arch.n_layers):
        z = a[f"blocks.{l}.attn.hook_z"]  # [batch, pos, n_heads, d_head]
        naive = naive + torch.einsum("bphe,hed->bpd", z, w.W_O[l]) + w.b_O[l] + a[f"blocks.{l}.hook_mlp_out"]
    hidden = a[f"blocks.{enc.arch.n_layers - 1}.hook_resid_post"]  # the encoder's last hidden state
    print(f"raw writes summed vs hidden state: relative error {((naive - hidden).abs().max() / hidden.abs().max()).item():.2f}")
    """),
    md(r"""
    With each norm's per-token $\sigma$ frozen, every norm is affine, so interp walks the block program
    backwards from the read point: each earlier write is carried through every later norm (centred,
    scaled by $\gamma/\sigma$), and each norm's $\beta$ joins as a write of its own (`L3.ln1_bias`,
    `L3.ln2_bias`, `embed_ln_bias`). The decomposition of the final hidden state is exact again:
    """),
    code("""
    fin = etr.decompose("final")
    print(fin)
    print(f"closure error {fin.closure_error:.2e} (relative {fin.relative_error:.2e})")
    print([lab for lab in fin.labels if "ln" in lab][:6], "…")
    fin.top(8)
    """),
    md(r"""
    The embedding's contribution is the clearest witness: in the pre-norm model it is the same vector at
    every resid point; in the post-norm encoder every Add & Norm shrinks it (and centres it).
    """),
    code("""
    def embed_norms(trace, pos=-1):
        out = {}
        for point in trace.resid_points:
            if point.endswith("resid_post"):
                dec = trace.decompose(point)
                out[point.split(".")[1]] = round(dec["embed"][0, pos].norm().item(), 3)
        return out

    print("smollm2 ‖embed term‖ after each block:", list(embed_norms(tr).values())[::5], "(every 5th block)")
    print("minilm  ‖embed term‖ after each block:", list(embed_norms(etr).values()))
    """),
    code("""
    residual_stream_figure(etr, pos=-2)  # the last real word (the final token is [SEP])
    """),
    md(r"""
    ## Closure errors, both models

    Every resid point and a few reads, decomposed in full; closure = max over positions and coordinates
    of |Σ terms − the model's own tensor|, relative = closure / max |tensor|.
    """),
    code("""
    import pandas as pd

    rows = []
    for name, t in (("smollm2-135m (pre-norm)", tr), ("minilm-l6 (post-norm)", etr)):
        n_layers = t.arch.n_layers
        points = [p for p in t.resid_points if int(p.split(".")[1]) in (0, n_layers // 2, n_layers - 1)]
        points += [t.reads[0], f"L{n_layers - 1}.mlp.in", t.reads[-1]]
        for p in points:
            dec = t.decompose(p)
            rows.append({"model": name, "point": p, "terms": len(dec.labels),
                         "closure_error": dec.closure_error, "relative_error": dec.relative_error})
    closure = pd.DataFrame(rows)
    print("worst relative closure error:", f"{closure.relative_error.max():.1e}")
    closure
    """),
    code("""
    assert closure.relative_error.max() < 1e-4, closure  # DESIGN "Math" 1-3: exact up to fp32 rounding
    """),
    runtime_cell(),
    md(r"""
    ## What we saw

    * A pre-norm model's residual stream is literally the sum of its writes: each term of a resid point is
      the raw write (head outputs match `resid_mid − resid_pre`, the MLP term matches `hook_mlp_out`), and
      read points split exactly once the norm's scale is frozen — closure ≤1e-6 relative in fp32 at every
      point we checked.
    * In the post-norm encoder the raw writes summed miss the hidden state by about a hundred times its
      own size; carrying each write through every later Add & Norm (frozen σ, centring, γ) and counting
      each β as a write closes the decomposition to the same ≤1e-6 level.
    * The embedding term is constant along a pre-norm stream and shrinks at every post-norm layer: in a
      post-norm model "what a head wrote" depends on where you look.
    """),
]

# --------------------------------------------------------------------------------------------------
NB02 = [
    md(r"""
    # 02 · Logit attribution by head on smollm2-135m

    **What this shows.** Direct logit attribution (DLA) made exact: with the final norm's scale frozen
    from the forward pass, the logit difference logit(answer) − logit(wrong) is *exactly* the sum of one
    term per head, MLP and embedding (DESIGN "Math" 5). On an indirect-object (IOI) prompt set we

    1. attribute the logit difference by head and print the closure error against the model's own logits;
    2. plot the layer × head heatmap and a waterfall of the largest terms;
    3. look at the attention patterns of the top heads;
    4. run a small dataset sweep in batches (with a progress bar);
    5. compare against transformer-lens's own `direct_logit_attribution` on one prompt.

    Offline, 1–3 minutes on 2 CPU cores.
    """),
    code(SETUP),
    code("""
    import re

    model = interp.load_model("smollm2-135m")
    templates = [
        "When {S} and {IO} went to the shops, {S} gave the bag to",
        "After {S} and {IO} finished their lunch, {S} handed the book to",
        "Then {S} and {IO} had a long talk, and afterwards {S} wrote a letter to",
    ]
    pairs = [(" John", " Mary"), (" Tom", " Anna"), (" James", " Sarah")]  # (subject, indirect object)
    prompts, answers, wrongs = [], [], []
    for t in templates:
        for s, io in pairs:
            prompts.append(t.format(S=s.strip(), IO=io.strip()))
            answers.append(io)
            wrongs.append(s)
    prompts[:3]
    """),
    md(r"""
    Each prompt gets its own answer and wrong token; prompts of different lengths are padded and each is
    attributed at its own last real token.
    """),
    code("""
    attr = interp.attribute_logits(model, prompts, answer=answers, wrong=wrongs)
    print(attr)
    print(f"closure error {attr.closure_error:.2e} (relative {attr.relative_error:.2e})")
    print("logit differences:", [round(v, 2) for v in attr.total.tolist()])
    attr.top(10)
    """),
    md(r"""
    An independent check of the totals: the plain Hugging Face module (no hooks, no interp code) on the
    same token ids gives the same logit differences.
    """),
    code("""
    hf = model.bridge.original_model
    diffs = []
    for p, io, s in zip(prompts, answers, wrongs):
        ids = model.to_tokens(p)
        with torch.no_grad():
            logits = hf(ids).logits[0, -1]
        a_id, w_id = (model.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in (io, s))
        diffs.append((logits[a_id] - logits[w_id]).item())
    print("max |interp total − HF logit diff| =", f"{(attr.total - torch.tensor(diffs)).abs().max().item():.2e}")
    """),
    md(r"""
    ## Which heads push the indirect object over the subject

    Mean over the 9 prompts (hover for values; the non-head terms — MLPs, embedding — are the strip on the
    right), and the waterfall of prompt 0: the terms stacked from 0 to the model's logit difference.
    """),
    code("""
    attr.plot()
    """),
    code("""
    from interp.plots import attribution_waterfall

    attribution_waterfall(attr, prompt=0, k=15)
    """),
    md(r"""
    ## Attention patterns of the top heads

    Where do the heads with the largest mean |attribution| look from the final token? A head that attends
    to a name and copies it raises that name's logit; one that attends to it and writes against it (a
    "negative name mover" in the IOI circuit of Wang et al. 2022) lowers it. The printout gives each head's
    most-attended key after position 0, where most heads park unused attention (the attention sink).
    """),
    code("""
    from interp.plots import attention_patterns

    top_heads = [t for t in attr.top(40)["term"] if re.fullmatch(r"L\\d+\\.H\\d+", t)][:6]
    pats = attention_patterns(model, prompts[0], top_heads)
    for i, head in enumerate(pats.labels):
        row = pats.patterns[i, -1]  # attention from the final token
        k = int(row[1:].argmax()) + 1  # skip position 0, the attention sink
        print(f"{head}: attribution {attr.mean()[attr.labels.index(head)].item():+.2f}, "
              f"attends most (after BOS) to {pats.str_tokens[k]!r} with weight {row[k].item():.2f}")
    pats.plot()
    """),
    md(r"""
    ## A small dataset sweep

    `attribute_logits` streams any number of prompts in batches (`batch_size`) with a progress bar and
    keeps only `[n_terms, n_prompts]` numbers. Here: 24 prompts from the three templates with other
    names. The per-head means over the sweep line up with the 9-prompt set above.
    """),
    code("""
    import itertools
    import random

    names = [" John", " Mary", " Tom", " Anna", " James", " Sarah", " Paul", " Emma"]
    combos = random.Random(0).sample(list(itertools.product(templates, itertools.permutations(names, 2))), 24)
    sweep_prompts = [t.format(S=s.strip(), IO=io.strip()) for t, (s, io) in combos]
    sweep = interp.attribute_logits(model, sweep_prompts, answer=[io for _, (s, io) in combos],
                                    wrong=[s for _, (s, io) in combos], batch_size=8, progress=True)
    print(sweep)
    print(f"closure error {sweep.closure_error:.2e} (relative {sweep.relative_error:.2e})")
    print(f"the model prefers the indirect object in {(sweep.total > 0).float().mean().item():.0%} of prompts; "
          f"mean logit difference {sweep.total.mean().item():.2f}")
    heads = [i for i, lab in enumerate(sweep.labels) if re.fullmatch(r"L\\d+\\.H\\d+", lab)]
    corr = torch.corrcoef(torch.stack([attr.mean()[heads], sweep.mean()[heads]]))[0, 1]
    print(f"correlation of per-head means, 9-prompt set vs sweep: {corr.item():.2f}")
    sweep.top(8)
    """),
    md(r"""
    ## Against transformer-lens's DLA

    transformer-lens computes DLA on a bridge in *compatibility mode* (norms folded into the weights, the
    final norm's scale taken from the cache). We load a second copy of the model, switch it to
    compatibility mode and call `transformer_lens.tools.analysis.direct_logit_attribution` on one prompt.
    The per-head values should agree with interp's up to float rounding (smollm2 has no biases, so the
    value-bias convention does not matter here).
    """),
    code("""
    from transformer_lens.tools.analysis.direct_logit_attribution import direct_logit_attribution

    prompt = prompts[0]
    ours = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
    tl_model = interp.load_model("smollm2-135m")
    tl_model.bridge.enable_compatibility_mode(disable_warnings=True)
    r = direct_logit_attribution(tl_model.bridge, prompt, answer_tokens=" Mary", incorrect_tokens=" John", unit="head")
    tl = {re.sub(r"L(\\d+)H(\\d+)", r"L\\1.H\\2", lab): v for lab, v in zip(r.labels, r.attribution.flatten().tolist())}
    head_labels = [lab for lab in tl if re.fullmatch(r"L\\d+\\.H\\d+", lab)]
    gap = max(abs(tl[h] - ours[h].item()) for h in head_labels)
    print(f"{len(head_labels)} heads compared; max |interp − transformer-lens| = {gap:.1e}")
    print(f"interp closure error {ours.closure_error:.1e}; largest head term {ours.values.abs().max().item():.2f}")
    assert gap < 1e-3
    del tl_model
    """),
    runtime_cell(),
    md(r"""
    ## What we saw

    * The logit difference splits exactly into 301 terms (270 heads, 30 MLPs, the embedding); the closure
      error against the model's own logits is ~1e-6, and the totals match the plain HF module.
    * A handful of late heads (layers 23–29) and MLPs carry most of the IOI logit difference. Their attention
      from the final token tells them apart: L23.H1 and L23.H2 attend to " Mary" and push it up, L24.H4
      attends to " Mary" and pushes it down, and the largest head, L23.H3, attends mostly to " John" yet
      raises the difference — attention alone does not say what a head writes; its OV circuit does
      (notebook 03).
    * The batched sweep gives per-head means that agree with the small set, with a progress bar and only
      `[n_terms, n_prompts]` kept in memory.
    * transformer-lens's compatibility-mode DLA gives the same per-head numbers to float rounding.
    """),
]


# --------------------------------------------------------------------------------------------------
NB04 = [
    md(r"""
    # 04 · Seed 002's claims, tested: basis, privileged basis, subspaces, erasure

    **What this shows.** Seed 002 (notes on Elhage et al. 2021, "A Mathematical Framework for Transformer
    Circuits") makes four claims about the residual stream. We test each on **smollm2-135m**:

    1. **No privileged basis, so rotations are free.** Rotating the stream's basis (x ↦ x R, R orthogonal)
       and every weight that touches it gives a model with the same logits, the same per-head logit
       attribution and the same composition and copying scores.
    2. **MLP neurons do have a privileged basis** (an elementwise nonlinearity singles out the coordinate
       axes) and the residual stream does not: measured by the kurtosis of each coordinate, against a
       random-basis control (the trained model turns out to be more interesting than the claim).
    3. **Heads write to low-dimensional subspaces**: each head writes into the `d_head = 64`-dimensional
       row space of its W_O, 11% of the 576-dimensional stream; how much do these subspaces overlap?
    4. **Memory management**: heads whose OV map sends an earlier write's subspace onto its negative
       ("erasure" candidates).

    Offline, about 1–2 minutes on 2 CPU cores (building the rotated model is the slowest step).
    """),
    code(SETUP),
    code("""
    from interp import circuits

    model = interp.load_model("smollm2-135m")
    prompt = "When John and Mary went to the shops, John gave the bag to"
    tr = interp.trace(model, prompt)
    print(model)
    """),
    md(r"""
    ## 1. Rotating the residual basis changes nothing

    With x ↦ x R: writes W_E, W_O, W_out become W R; reads W_Q, W_K, W_V, W_in, W_U become Rᵀ diag(γ) W (the
    norm gain γ is folded in first: a per-coordinate gain does not commute with R, the RMS does,
    rms(x R) = rms(x)). `interp.rotate_residual` builds that model — a fresh Hugging Face module holding
    the rotated weights, wrapped in its own bridge. The stream of the new model is the old stream times R,
    coordinate by coordinate different, yet every output agrees:
    """),
    code("""
    R = circuits.random_rotation(model.arch.d_model, seed=0, dtype=torch.float32)
    rotated = interp.rotate_residual(model, R)
    print(rotated)
    print("‖RᵀR − I‖_max =", f"{(R.T @ R - torch.eye(model.arch.d_model)).abs().max().item():.1e}")

    rtr = interp.trace(rotated, prompt)
    x = tr.activations["blocks.10.hook_resid_post"]
    xr = rtr.activations["blocks.10.hook_resid_post"]
    print(f"stream after block 10: max |x − x_rot| = {(x - xr).abs().max().item():.1f}, "
          f"but max |x R − x_rot| / max |x| = {((x @ R - xr).abs().max() / x.abs().max()).item():.1e}")
    print(f"logits: max |Δ| = {(tr.logits - rtr.logits).abs().max().item():.1e} "
          f"(logits up to {tr.logits.abs().max().item():.0f})")
    """),
    code("""
    a0 = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
    a1 = interp.attribute_logits(rotated, prompt, answer=" Mary", wrong=" John")
    print(f"per-term DLA: max |Δ| = {(a0.values - a1.values).abs().max().item():.1e} "
          f"(closure errors {a0.closure_error:.1e}, {a1.closure_error:.1e})")
    c0, c1 = interp.copying_scores(model), interp.copying_scores(rotated)
    print(f"copying scores: max |Δ| = {(c0.scores - c1.scores).abs().max().item():.1e}")
    k0, k1 = interp.composition_scores(model, "K"), interp.composition_scores(rotated, "K")
    print(f"K-composition scores: max |Δ| = {(k0.scores - k1.scores).nan_to_num().abs().max().item():.1e}")
    """),
    md(r"""
    The claim needs two caveats, both enforced by `rotate_residual`: LayerNorm models also *centre* the
    stream (project out the all-ones direction), which commutes with R only if R·1 = 1
    (`random_rotation(d, fix_ones=True)` gives such an R); and post-norm models cannot be rotated at all,
    because their norm's gain multiplies the stream itself. The encoder refuses, with the reason:
    """),
    code("""
    enc = interp.load_model("minilm-l6")
    try:
        interp.rotate_residual(enc, circuits.random_rotation(enc.arch.d_model, fix_ones=True))
    except interp.InterpError as e:
        print(type(e).__name__, ":", e)
    del enc, rotated, rtr
    """),
    md(r"""
    ## 2. Neurons have a privileged basis; the residual stream mostly does not

    If features align with the coordinate axes, single coordinates are heavy-tailed: a large excess kurtosis
    κ = E[(x−μ)⁴]/E[(x−μ)²]² − 3 (0 for a Gaussian). `privileged_basis_report` streams κ of every
    coordinate over the tokens of some text for (a) the residual stream after each block, (b) the same
    stream in a random orthogonal basis — the control, what "no preferred basis" looks like — and (c)
    every MLP neuron (the input of W_out).
    """),
    code("""
    texts = [
        "The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
        "In 1969, astronauts landed on the Moon and walked on its dusty surface for several hours.",
        "def add(a, b):\\n    return a + b\\n\\nprint(add(2, 3))",
        "She opened the window, and the cold morning air filled the quiet little room at once.",
        "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
        "When John and Mary went to the shops, John gave the bag to Mary and then went home.",
    ]
    pb = circuits.privileged_basis_report(model, texts)
    print(pb)
    df = pb.to_dataframe()
    cols = ["layer", "resid_median", "resid_rotated_median", "neurons_median",
            "resid_frac_gt10", "resid_rotated_frac_gt10", "neurons_frac_gt10"]
    df[cols].iloc[::5].round(3)
    """),
    code("""
    summary = {group: (df[f"{group}_median"].median(), df[f"{group}_frac_gt10"].mean())
               for group in ("resid", "resid_rotated", "neurons")}
    for group, (med, frac) in summary.items():
        print(f"{group:14s} median κ over layers {med:6.2f}; share of coordinates with κ > 10: {frac:.1%}")
    pb.top(8)
    """),
    md(r"""
    Neurons are heavy-tailed in every layer. The residual stream in its own basis has a median κ below 1
    everywhere — but a handful of its coordinates are extreme, and in the early layers the *random-basis*
    control is the more kurtotic one. The most kurtotic residual coordinate of each layer says why: the
    same one or two dimensions carry the outliers for many layers in a row (the "massive activations" of
    trained LLMs). Concentrated on one axis in the model's own basis, they touch few coordinates; a
    rotation spreads them over all of them.
    """),
    code("""
    kmax, dim = pb.resid.max(dim=1)
    print("most kurtotic residual coordinate per layer (dim: κ):")
    print(", ".join(f"L{l} {d}: {k:.0f}" for l, (d, k) in enumerate(zip(dim.tolist(), kmax.tolist()))))
    """),
    code("""
    pb.plot()
    """),
    md(r"""
    ## 3. Heads write into small subspaces

    Head h writes z_h W_O^h with W_O^h of shape [d_head, d_model] = [64, 576]: every write lies in the
    64-dimensional row space of W_O^h. The MLPs' W_out [1536, 576] has full rank 576.
    """),
    code("""
    w = model.weights
    W_O = w.W_O.flatten(0, 1).double()  # [n_layers * n_heads, d_head, d_model]
    head_ranks = torch.linalg.matrix_rank(W_O @ W_O.transpose(-1, -2), hermitian=True)  # rank(W Wᵀ) = rank(W)
    W_out = w.W_out[[0, 15, 29]].double()  # three layers: [3, d_mlp, d_model]
    mlp_ranks = torch.linalg.matrix_rank(W_out.transpose(-1, -2) @ W_out, hermitian=True)
    print(f"rank of W_O^h, all {len(head_ranks)} heads: {sorted(set(head_ranks.tolist()))} of "
          f"d_model={model.arch.d_model} ({model.arch.d_head / model.arch.d_model:.1%} of the stream per head)")
    print(f"rank of W_out in layers 0, 15, 29: {mlp_ranks.tolist()}")
    """),
    md(r"""
    Do different heads share their subspaces? Overlap = mean cos² of the principal angles between two heads'
    write subspaces (1: the same subspace; two random 64-dimensional subspaces of R⁵⁷⁶ give 64/576 ≈ 0.11).
    """),
    code("""
    so = circuits.write_subspace_overlap(model)
    print(so)
    pairs = so.to_dataframe()
    L = pairs.head_a.str.extract(r"L(\\d+)")[0].astype(int)
    same_layer = L == pairs.head_b.str.extract(r"L(\\d+)")[0].astype(int)
    print(f"mean overlap, heads of the same layer: {pairs.overlap[same_layer].mean():.3f}; "
          f"of different layers: {pairs.overlap[~same_layer].mean():.3f}; random baseline {so.baseline:.3f}")
    so.top(8)
    """),
    code("""
    import plotly.express as px

    px.histogram(pairs, x="overlap", color=same_layer.map({True: "same layer", False: "different layers"}),
                 nbins=80, barmode="overlay", log_y=True,
                 title=f"write-subspace overlap of all head pairs (random baseline {so.baseline:.3f})")
    """),
    md(r"""
    ## 4. Erasure ("memory management") candidates

    A later head d erases what an earlier write s put in the stream if its OV map sends s's subspace back
    onto its negative. With U_s an orthonormal basis of s's write subspace, E = U_sᵀ W_V^d W_O^d U_s
    [64, 64]: `mean_gain` = tr(E)/64 < 0 means s's writes come back negated on average; `max_eig` < 0
    (of the symmetric part) would mean *every* direction is erased.
    """),
    code("""
    er = circuits.erasure_candidates(model)
    print(er)
    er.top(10)
    """),
    md(r"""
    An independent recomputation of the top pair's gain from the (norm-folded) OV circuit and an SVD of
    the source head's W_O:
    """),
    code("""
    top = er.top(1).iloc[0]
    (ls, hs), (ld, hd) = [map(int, lab[1:].split(".H")) for lab in (top.src, top.dst)]
    ov = interp.ov_circuit(model, ld, hd)  # W_V^g W_O^h with ln1's gain folded into W_V
    U = torch.linalg.svd(w.W_O[ls, hs].double(), full_matrices=False).Vh.T  # [d_model, d_head]
    E = U.T @ ov.A.double() @ ov.B.double() @ U
    print(f"{top.src} → {top.dst}: mean gain {torch.trace(E).item() / U.shape[1]:.4f} (table: {top.mean_gain:.4f})")
    """),
    md(r"""
    Does that head actually write against the source's direction on the prompt? Compare the two heads'
    terms in the residual stream at the final token (`decompose` of the last resid point), and the same
    heads' logit attribution from notebook 02:
    """),
    code("""
    last = tr.decompose(f"blocks.{model.arch.n_layers - 1}.hook_resid_post")
    print(f"closure error {last.closure_error:.1e} (relative {last.relative_error:.1e})")
    src_w, dst_w = last[top.src][0, -1], last[top.dst][0, -1]
    cos = torch.nn.functional.cosine_similarity(src_w, dst_w, dim=0)
    print(f"cos({top.src} write, {top.dst} write) at the last token: {cos.item():+.2f}")
    print(f"DLA (Mary − John): {top.src} {a0[top.src].item():+.2f}, {top.dst} {a0[top.dst].item():+.2f}")
    er.plot()
    """),
    runtime_cell(),
    md(r"""
    ## What we saw

    * A random rotation of the residual basis (norm gains folded first) changes every weight and every
      coordinate of the stream, yet logits agree to ~1e-5 and per-head DLA, copying and composition scores
      to float rounding: the stream has no privileged basis. Post-norm models and LayerNorm with R·1 ≠ 1
      are the exceptions, and interp refuses them with the reason.
    * MLP neuron activations are heavy-tailed in every layer (a privileged basis). Residual coordinates
      mostly are not, but training has aligned a few outlier features with single coordinates (the same
      dimension over many layers); the arithmetic is rotation-invariant, the trained weights are not
      entirely basis-agnostic.
    * Every head writes into a 64-of-576-dimensional subspace; most pairs overlap at the random level, but
      heads of the same layer often share a subspace.
    * The strongest erasure candidates are late heads whose OV maps are strongly negative on earlier heads'
      subspaces (none fully negative-definite); on the IOI prompt the top pair's writes point against each
      other and their logit attributions have opposite signs.
    """),
]

# --------------------------------------------------------------------------------------------------
NB05 = [
    md(r"""
    # 05 · Exporting every figure, and a report

    **What this shows.** Every figure interp draws, built from real results on **smollm2-135m**, exported
    to HTML (self-contained: plotly.js inlined, opens with no network), PNG and SVG (rendered by kaleido in
    one headless Chromium that is started once and reused) and JSON (the plotly figure, or the nodes and
    edges of a circuit graph) — all into a temporary directory; then the one-call HTML report
    (`interp.report`, the same as `interp report` on the command line). Offline, 1–3 minutes on 2 CPU
    cores; PNG/SVG need Chromium (`make test` installs it where apt is available).
    """),
    code(SETUP),
    code("""
    import json
    import re
    import shutil
    import tempfile
    from pathlib import Path

    import pandas as pd

    from interp import circuits, plots

    model = interp.load_model("smollm2-135m")
    prompt = "When John and Mary went to the shops, John gave the bag to"
    out = Path(tempfile.mkdtemp(prefix="interp-export-"))
    print("exporting into", out)
    """),
    md(r"""
    ## The results behind the figures

    One trace, one decomposition, one logit attribution, attention patterns of the top heads, and the
    weight-only circuit results (copying and composition scores, an OV circuit). Closure errors printed.
    """),
    code("""
    tr = interp.trace(model, prompt)
    dec = tr.decompose("L23.attn.q[H3]")
    attr = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
    print(dec, attr, sep="\\n")
    heads = [t for t in attr.top(30)["term"] if re.fullmatch(r"L\\d+\\.H\\d+", t)][:6]
    pats = plots.attention_patterns(model, prompt, heads)
    copying = interp.copying_scores(model)
    comp = {kind: interp.composition_scores(model, kind) for kind in ("Q", "K", "V")}
    ov = interp.ov_circuit(model, 23, 3)
    full_ov = interp.ov_circuit(model, 23, 3, full=True)
    ids = [i for i in dict.fromkeys(tr.tokens[0].tolist()) if i not in model.tokenizer.all_special_ids]
    graph = plots.composition_edges(comp, heads=heads, max_edges=None,
                                    node_values={h: attr[h].item() for h in heads}, node_value_name="DLA")
    erasure = circuits.erasure_candidates(model, screen=30)
    graph.top(5)
    """),
    code("""
    figures = {
        # interp.plots builders
        "decomposition": plots.decomposition_figure(dec, k=15),
        "residual_stream": plots.residual_stream_figure(tr),
        "attribution_heatmap": plots.attribution_heatmap(attr),
        "attribution_waterfall": plots.attribution_waterfall(attr, k=12),
        "attention_patterns": plots.attention_pattern_figure(pats),
        "copying_scores": plots.copying_score_map(copying),
        "ov_eigenvalues": plots.ov_eigenvalue_figure(ov),
        "ov_top_tokens": plots.top_token_table(full_ov, ids, k=4, decode=lambda i: model.tokenizer.decode([i])),
        "composition_graph": plots.composition_graph(graph),
        # results' own .plot()
        "composition_K": comp["K"].plot(),
        "erasure": erasure.plot(),
    }
    print(len(figures), "figures:", ", ".join(figures))
    figures["composition_graph"]
    """),
    md(r"""
    ## Export: HTML, PNG, SVG, JSON

    `interp.export(figure_or_result, path)` picks the format from the suffix and writes atomically (a
    temporary file renamed into place). One `Exporter` keeps the browser open for all static images.
    Results with a `.plot()` can be exported directly, and a circuit graph's `.json` is its nodes and edges.
    """),
    code("""
    t = time.perf_counter()
    with interp.Exporter() as ex:
        for name, fig in figures.items():
            for suffix in ("html", "png", "svg", "json"):
                interp.export(fig, out / f"{name}.{suffix}", exporter=ex)
        interp.export(attr, out / "attribution_from_result.png", exporter=ex)  # a result, not a figure
        interp.export(graph, out / "composition_graph_nodes_edges.json")
    print(f"exported in {time.perf_counter() - t:.1f} s")
    sizes = pd.DataFrame([{"figure": f.stem, "format": f.suffix[1:], "kB": round(f.stat().st_size / 1e3)}
                          for f in out.iterdir()])
    print(f"{len(sizes)} files, {sizes.kB.sum() / 1e3:.0f} MB (each HTML inlines plotly.js, ~4.8 MB)")
    sizes.pivot_table(index="figure", columns="format", values="kB")
    """),
    md(r"""
    Check what was written, without trusting the exporter: PNG magic bytes, SVG markup, JSON that plotly
    reads back into the same figure, HTML with plotly.js inside and no external script.
    """),
    code("""
    import plotly.io as pio

    for name, fig in figures.items():
        png = (out / f"{name}.png").read_bytes()
        svg = (out / f"{name}.svg").read_text()
        html = (out / f"{name}.html").read_text()
        back = pio.from_json((out / f"{name}.json").read_text())
        assert png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", name
        assert "<svg" in svg[:500], name
        assert "plotly" in html and "<script src=\\"http" not in html, name
        assert len(back.data) == len(fig.data), name
    nodes_edges = json.loads((out / "composition_graph_nodes_edges.json").read_text())
    print(f"all {len(figures)} figures verified in 4 formats; graph JSON: "
          f"{len(nodes_edges['nodes'])} nodes, {len(nodes_edges['edges'])} edges")
    """),
    md(r"""
    ## The report

    `interp.report` traces the prompt, attributes the answer's logit, draws the top heads' patterns, their
    composition graph, copying scores, the top head's OV circuit and the residual stream, and writes a
    self-contained `index.html`, every figure as PNG and SVG, and `results.json`. From a shell:
    `interp report --model smollm2-135m --prompt "..." --answer " Mary" --wrong " John" --out report/`.
    """),
    code("""
    t = time.perf_counter()
    with interp.Exporter() as ex:
        index = interp.report(model, prompt, answer=" Mary", wrong=" John", out_dir=out / "report", exporter=ex)
    print(f"report written in {time.perf_counter() - t:.1f} s: {index}")
    results = json.loads((out / "report" / "results.json").read_text())
    a = results["attribution"]
    print(f"target {a['target']}: model {a['total']:.4f}, Σ terms {a['sum_of_terms']:.4f}, "
          f"closure error {a['closure_error']:.1e}")
    print("top heads:", [(h["head"], round(h["value"], 2)) for h in results["top_heads"]])
    print("files:", sorted(str(p.relative_to(out / "report")) for p in (out / "report").rglob("*") if p.is_file()))
    """),
    code("""
    shutil.rmtree(out)  # the temporary directory and everything exported into it
    """),
    runtime_cell(),
    md(r"""
    ## What we saw

    * Every figure kind — decomposition bars, the residual-stream view, the attribution heatmap and
      waterfall, attention patterns, the copying-score map, OV eigenvalues, the top-token table, the
      composition graph and result plots — exports to HTML, PNG, SVG and JSON through one reused browser.
    * The files check out independently: real PNG/SVG, JSON that plotly reads back, HTML with no external
      script; a circuit graph also exports as plain nodes and edges.
    * One call writes the whole report, and its `results.json` carries the closure error of the
      attribution it shows.
    """),
]

# --------------------------------------------------------------------------------------------------
NB03 = [
    md(r"""
    # 03 · OV and QK circuits: A ⊗ W_O W_V, from a toy to smollm2

    **What this shows.** With its attention pattern A frozen, a head is the linear map
    h(X) = A X W_V W_O — in the paper's notation (A ⊗ W_O W_V)·x (Elhage et al. 2021; seed 002 §6). *Where*
    a head looks is its QK circuit W_Q W_Kᵀ, *what* it moves is its OV circuit W_V W_O. On the 2-layer
    attention-only toy (**toy-attn-only-2l**, trained by interp on sequences with repeated spans) we

    1. check the tensor-product form against the model's own head output;
    2. read each head's OV and QK circuits, copying scores and OV eigenvalues;
    3. find the induction circuit **from the weights alone** — a previous-token head (positional QK), heads
       whose keys read it (K-composition, virtual weights), which copy (OV) and whose keys match "the
       token before me equals my token" (the composed QK circuit);
    4. confirm it with the exact path expansion of the logits (direct, one-head and virtual-head paths).

    Then the same tools on **smollm2-135m**: copying scores and eigenvalues, K-composition between all
    270 heads — which points at smollm2's own induction circuit — and a behavioural check. Offline,
    about a minute on 2 CPU cores.
    """),
    code(SETUP),
    code("""
    import pandas as pd

    from interp import circuits, plots
    from interp.toy import attention_patterns as all_patterns, repeated_tokens

    toy = interp.load_model("toy-attn-only-2l")
    print(toy, "| norm:", toy.arch.norm, "| positions:", toy.arch.positional)
    g = torch.Generator().manual_seed(0)
    n = 10
    seqs = repeated_tokens(8, n, toy.arch.d_vocab, generator=g)  # <bos> + 10 random words, then the same 10 again
    print(" ".join(toy.to_str_tokens(seqs[0])))
    """),
    md(r"""
    ## 1. A head is A ⊗ W_O W_V

    Freeze layer 1's patterns from a forward pass; `head_operator` gives the head as the tensor product.
    `.apply(x)` computes A (x W_V + b_V) W_O; `.matrix()` is the Kronecker matrix A ⊗ (W_V W_O)ᵀ itself,
    [pos·d_model, pos·d_model], acting on the flattened input. Both must reproduce the head's own write,
    which the trace reads off the model (`z_h W_O^h`).
    """),
    code("""
    tr = interp.trace(toy, seqs[:1])
    _, patterns = all_patterns(toy, seqs[:1])  # [n_layers, batch, n_heads, pos, pos]
    x = tr.activations["blocks.1.hook_resid_pre"][0]  # the head's input (this toy has no norms)
    writes = tr.decompose("blocks.1.hook_resid_post")
    print(writes, f"closure error {writes.closure_error:.1e}")
    for h in range(toy.arch.n_heads):
        op = circuits.head_operator(toy, 1, h, patterns[1, 0, h])
        kron = op.matrix() @ x.flatten()  # (A ⊗ W) vec(X)
        print(f"L1.H{h}: max |apply − model| = {(op.apply(x) - writes[f'L1.H{h}'][0]).abs().max().item():.1e}, "
              f"max |Kronecker − linear part| = {(kron - op.apply(x, value_bias=False).flatten()).abs().max().item():.1e}"
              f"  (matrix {tuple(op.matrix().shape)})")
    """),
    md(r"""
    ## 2. OV circuits: who copies?

    The full OV circuit W_E W_V W_O W_U [d_vocab, d_vocab] says how attending to token s changes the logit
    of every token t. A copying head raises the attended token itself: positive eigenvalues. The copying
    score Σλ/Σ|λ| is computed from the 16 × 16 cyclic product, never the vocab² matrix.
    """),
    code("""
    copying = interp.copying_scores(toy)
    print(copying.to_dataframe().round(3).to_string(index=False))
    plots.copying_score_map(copying, title="Copying scores — toy-attn-only-2l")
    """),
    code("""
    best = copying.top(1).iloc[0]
    full_ov = interp.ov_circuit(toy, int(best.layer), int(best.head_index), full=True)
    print(full_ov, "| convention:", full_ov.convention)
    plots.ov_eigenvalue_figure(full_ov, label=f"{best['head']} full OV circuit")
    """),
    md(r"""
    ## 3. The induction circuit, from the weights alone

    **(a) A previous-token head.** This toy has learned positions, so a layer-0 head's positional QK
    circuit W_pos W_Q W_Kᵀ W_posᵀ says where it looks by position, whatever the tokens.
    """),
    code("""
    W_pos = toy.weights.W_pos  # [n_ctx, d_model]
    q_pos = torch.arange(1, toy.arch.n_ctx)
    causal = torch.ones(toy.arch.n_ctx, toy.arch.n_ctx, dtype=torch.bool).tril()
    prev_share = []
    for h in range(toy.arch.n_heads):
        qk = interp.qk_circuit(toy, 0, h)
        scores = (W_pos @ qk.A @ qk.B @ W_pos.T).masked_fill(~causal, float("-inf"))  # [query pos, key pos]
        prev_share.append((scores[1:].argmax(-1) == q_pos - 1).float().mean().item())
        print(f"L0.H{h}: the top key is the previous position for {prev_share[-1]:.0%} of query positions")
    prev_head = int(torch.tensor(prev_share).argmax())
    print("previous-token head: L0.H%d" % prev_head)
    """),
    md(r"""
    **(b) Heads whose keys read it: K-composition.** Score ‖W_OV^src W_QK^dstᵀ‖_F / (‖W_OV^src‖_F ‖W_QK^dst‖_F)
    for every pair of heads in different layers; the virtual weight W_O^src W_K^dst is the map itself.
    """),
    code("""
    comp = {kind: interp.composition_scores(toy, kind) for kind in ("Q", "K", "V")}
    print(comp["K"].top(6)[["src", "dst", "score"]].to_string(index=False))
    vw = circuits.virtual_weight_norms(toy)
    k_reads = [f"L1.attn.k[H{h}]" for h in range(toy.arch.n_heads)]
    print("\\n‖W_O^src W_K^dst‖_F (virtual weights into layer-1 keys):")
    print(pd.DataFrame({src: [vw[src, r] for r in k_reads] for src in [f"L0.H{h}" for h in range(4)]},
                       index=k_reads).round(1).to_string())
    plots.composition_graph(comp, max_edges=6, title="Q/K/V composition — toy-attn-only-2l")
    """),
    md(r"""
    **(c) The composed QK circuit matches tokens.** A layer-1 head's key at position j contains the
    previous-token head's copy of token j−1, so its token-to-token QK circuit through that head is
    W_E W_Q^{1,h} (W_E W_OV^{0,prev} W_K^{1,h})ᵀ: row = the current token, column = the *previous* token of
    a key. An induction head puts its maximum on the diagonal — attend where the previous token equals
    mine — and then copies (its OV circuit, step 2).
    """),
    code("""
    w = toy.weights
    words = slice(2, None)  # skip <bos>, <unk>
    ov_prev = interp.ov_circuit(toy, 0, prev_head)  # W_V W_O of the previous-token head, factored
    rows = []
    for h in range(toy.arch.n_heads):
        query_side = w.W_E[words] @ w.W_Q[1, h]  # [n_words, d_head]
        key_side = w.W_E[words] @ ov_prev.A @ ov_prev.B @ w.W_K[1, h]  # [n_words, d_head]
        M = query_side @ key_side.T  # [current token, previous token of the key]
        diag_top = (M.argmax(-1) == torch.arange(M.shape[0])).float().mean().item()
        rows.append({"head": f"L1.H{h}", "diagonal is the row max": f"{diag_top:.0%}",
                     "K-composition with prev head": round(comp["K"].scores[0, prev_head, 1, h].item(), 3),
                     "copying score": round(copying[f"L1.H{h}"], 3)})
    pd.DataFrame(rows)
    """),
    md(r"""
    The weights predict an induction circuit. Check it on the repeated sequences: the attention of the
    previous-token head and of the layer-1 heads (the second half attends to "the token after the earlier
    copy" — the off-diagonal stripe), and the loss, which drops from ln(n_words) on the unpredictable first
    half to near zero on the second.
    """),
    code("""
    logits, pats = all_patterns(toy, seqs)
    q = torch.arange(n + 1, 2 * n + 1)
    induction = pats[:, :, :, q, q - n + 1].mean(dim=(1, 3))  # [n_layers, n_heads]
    previous = pats[:, :, :, torch.arange(1, 2 * n + 1), torch.arange(0, 2 * n)].mean(dim=(1, 3))
    print("induction score (attention to the token after the earlier copy):\\n", induction.round(decimals=2))
    print("previous-token score:\\n", previous.round(decimals=2))
    nll = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, seqs[:, 1:, None])[..., 0]
    print(f"loss, first half {nll[:, 1:n].mean().item():.2f} (ln n_words = "
          f"{torch.log(torch.tensor(toy.arch.d_vocab - 2.0)).item():.2f}); second half {nll[:, n + 1:].mean().item():.3f}")
    plots.attention_patterns(toy, seqs[:1], [f"L0.H{prev_head}", "L1.H1", "L1.H3"]).plot()
    """),
    md(r"""
    ## 4. Path expansion: which paths write the prediction

    With every pattern frozen, this norm-free attention-only model's logits are *exactly* a sum of paths
    (DESIGN "Math" 10): the direct path W_E W_U, one-head paths A^h ⊗ W_E W_OV^h W_U, and virtual-head paths
    through two heads A^{h2}A^{h1} ⊗ W_E W_OV^{h1} W_OV^{h2} W_U (plus positional and bias sources). Expand
    the logit of the correct next token at the second-to-last position (an induction prediction):
    """),
    code("""
    pe = interp.path_expansion(toy, seqs, order=2, answer=seqs[:, -1], pos=-2)
    print(pe)
    print(f"closure error {pe.closure_error:.1e}: |model logits − Σ paths| over every position and token")
    by_order = pe.to_dataframe().groupby("order")["value"].sum() / len(seqs)
    print("mean contribution to the answer's logit by path order:", by_order.round(3).to_dict())
    print(f"answer logit (mean) {pe.logit.mean().item():.3f} = Σ paths {pe.values.sum(0).mean().item():.3f} + b_U")
    pe.plot(k=12)
    """),
    md(r"""
    The prediction is written by the one-head paths `embed→L1.H*`: the layer-1 heads' OV circuits copying
    the token they attend to. The previous-token head never appears on a *logit* path of its own — its
    role is in the K side of layer 1's attention (K-composition), which path expansion freezes into the
    patterns. The virtual-head (order-2, V-composition) paths are small, as the V-composition scores said.

    ## 5. The same tools on smollm2-135m

    Real models mix many functions per head; the weight tools still point somewhere. First, copying:
    """),
    code("""
    model = interp.load_model("smollm2-135m")
    copying = interp.copying_scores(model)
    print(copying.top(6)[["head", "copying_score"]].to_string(index=False))
    plots.copying_score_map(copying, title="Copying scores — smollm2-135m")
    """),
    code("""
    top = copying.top(1).iloc[0]
    l, h = int(top.layer), int(top.head_index)
    full_ov = interp.ov_circuit(model, l, h, full=True)  # [49152, 49152], kept factored (rank 64)
    print(full_ov)
    names = [" Mary", " John", " Paris", " France", " dog", " cat", " red", " seven"]
    ids = [model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in names]
    plots.top_token_table(full_ov, ids, targets="all", k=4, decode=lambda i: model.tokenizer.decode([i]))
    """),
    code("""
    plots.ov_eigenvalue_figure(interp.ov_circuit(model, l, h), label=f"{top['head']} OV circuit")
    """),
    md(r"""
    smollm2 uses rotary position embeddings: its QK circuit depends on the distance between query and key.
    `qk_circuit` says so, and `rel_pos=Δ` folds in the rotation for a query Δ positions after its key.
    """),
    code("""
    qk0 = interp.qk_circuit(model, 5, 0)
    print(qk0, "\\nnote:", qk0.note)
    print(interp.qk_circuit(model, 5, 0, rel_pos=1))
    """),
    md(r"""
    **K-composition over all 270 heads, from the weights.** Computed with d_head-sized Gram factors, all
    pairs in one product (no d_model² product per pair):
    """),
    code("""
    k_comp = interp.composition_scores(model, "K")
    print(k_comp)
    k_top = k_comp.top(10)[["src", "dst", "score"]]
    print(k_top.to_string(index=False))
    plots.composition_graph(k_comp, max_edges=15, title="Strongest K-composition edges — smollm2-135m")
    """),
    md(r"""
    One source head feeds the keys of a cluster of heads in the next layers — the shape of an induction
    circuit. A virtual weight makes one of those edges concrete, and a behavioural check on repeated
    random tokens measures each head's previous-token and induction scores:
    """),
    code("""
    src = k_top.src.value_counts().idxmax()  # the head feeding the most of the strongest edges
    dst = k_top[k_top.src == src].iloc[0].dst
    print(f"{src} is the source of {int((k_top.src == src).sum())} of the 10 strongest K-composition edges")
    sl = int(src[1:].split(".H")[0])
    dl, dh = map(int, dst[1:].split(".H"))
    read = f"L{dl}.attn.k[H{model.arch.kv_head(dh)}]"  # under GQA a key is a KV head's
    vwt = interp.virtual_weights(model, src, read)
    others = [interp.virtual_weights(model, f"L{sl}.H{i}", read).norm().item() for i in range(model.arch.n_heads)]
    print(vwt, f"‖·‖_F = {vwt.norm().item():.1f}; median over layer {sl}'s heads {torch.tensor(others).median().item():.1f}")

    gen = torch.Generator().manual_seed(0)
    m = 20
    first = torch.randint(1000, 20000, (4, m), generator=gen)
    ids = torch.cat([torch.full((4, 1), model.tokenizer.bos_token_id), first, first], dim=1)
    logits, pats = all_patterns(model, ids)
    q = torch.arange(m + 1, 2 * m + 1)
    induction = pats[:, :, :, q, q - m + 1].mean(dim=(1, 3))  # [n_layers, n_heads]
    qp = torch.arange(2, m + 1)
    previous = pats[:, :, :, qp, qp - 1].mean(dim=(1, 3))
    score = lambda t, lab: t[tuple(map(int, lab[1:].split(".H")))].item()  # noqa: E731
    k_top["src previous-token score"] = [round(score(previous, s), 2) for s in k_top.src]
    k_top["dst induction score"] = [round(score(induction, d), 2) for d in k_top.dst]
    nll = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    print(f"loss on the repeated half {nll[:, m + 1:].mean().item():.2f} vs the first half {nll[:, 1:m].mean().item():.2f}")
    best_ind = induction.flatten().topk(5)
    print("top induction heads:", [f"L{i // 9}.H{i % 9} {v:.2f}" for v, i in zip(best_ind.values.tolist(), best_ind.indices.tolist())])
    k_top
    """),
    code("""
    plots.attention_patterns(model, ids[:1], [src, dst]).plot()
    """),
    runtime_cell(),
    md(r"""
    ## What we saw

    * A head with its pattern frozen is exactly A ⊗ W_O W_V: `head_operator`'s `.apply` and its explicit
      Kronecker matrix reproduce the model's own head writes to float rounding.
    * On the toy, the weights alone name the induction circuit: one layer-0 head whose positional QK
      looks one position back, layer-1 heads K-composing with it (the largest scores and virtual weights),
      whose composed QK circuit matches "previous token = my token" on the diagonal for every word, and
      whose OV circuits copy (copying score ≈ 1). Behaviour agrees: previous-token and induction attention,
      and near-zero loss on the repeated half. Path expansion closes to float rounding and puts the
      prediction on the one-head paths of the layer-1 heads.
    * On smollm2 the same weight-only K-composition scores single out one source head (L16.H0) feeding the
      keys of a cluster of heads in the next two layers; behaviourally that source is the strongest
      previous-token head, and its K-composition partners include the strongest induction heads on
      repeated random tokens (L18.H6, L17.H3/H4/H5) — not all of them (L18.H8 composes but does not
      induct). Copying scores alone do not find them (dozens of heads copy), and the QK circuits of a
      rotary model need `rel_pos` to say anything about position.
    """),
]

NOTEBOOKS = {
    "01": ("01_residual_stream.ipynb", NB01),
    "02": ("02_logit_attribution.ipynb", NB02),
    "03": ("03_ov_qk_circuits.ipynb", NB03),
    "04": ("04_basis_and_subspaces.ipynb", NB04),
    "05": ("05_exporting_plots.ipynb", NB05),
}


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": KERNEL,
        "language_info": {"name": "python", "pygments_lexer": "ipython3"},
    })
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids: regenerating gives no spurious diffs
    nbformat.validate(nb)
    path = HERE / name
    nbformat.write(nb, path)
    return path


def main(argv: list[str]) -> None:
    keys = argv or list(NOTEBOOKS)
    for k in keys:
        name, cells = NOTEBOOKS[k]
        print(write(name, cells))


if __name__ == "__main__":
    main(sys.argv[1:])
