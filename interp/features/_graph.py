"""Attribution graphs: the exact linear replacement model of one prompt, over per-layer transcoders.

Run the model once. At each layer l and position p the transcoder reads the MLP's real input x_{l,p}
(the second norm's output) and gives feature activations a_{l,p} and an output â_{l,p}; the **error
node** e_{l,p} = MLP_l(x)_p − â_{l,p} is the rest of the MLP's real write. Now freeze every attention
pattern and every norm's scale σ at the real forward's and replace each MLP write by the constant
Σ_f a_{l,p,f} W_dec[f] + e_{l,p} (plus b_dec and, for a skip transcoder, the linear term x W_skipᵀ
of the frozen stream). The resulting model is affine in its sources — the token embeddings, the
feature activations and the error nodes — and reproduces the real forward exactly. Hence every target
(an active feature's pre-activation, or the logit / logit difference) is

    target = Σ_sources J_{target←s} · s + c_target,

with J the Jacobian of the frozen model (direct effects through the residual stream and the frozen OV
circuits; no path goes through another transcoder, whose activations are sources) and c_target its
value with every source zero (all biases: b_enc, b_dec, attention biases, norm offsets, b_U). Edges are
J's entries between the active sources and targets, computed without autograd and without materialising J:
targets' reads carried down the frozen layers, sources' writes carried up, meeting at one layer
(:mod:`interp.features._jacobian`, docs/math.md §26).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from torch import Tensor

from interp.attribution import TokenSpec, resolve_tokens, warn_unspaced
from interp.engine import Engine, RunCache
from interp.errors import ArgumentError, ContextLengthWarning, UnsupportedArchitectureError, warn_user
from interp.features._jacobian import Ends, FrozenJacobian
from interp.features._logit_effects import top_and_bottom_logits
from interp.features._result import AttributionGraph, check_thresholds
from interp.features._sae import SAE
from interp.features._transcoder import Transcoder, check_layers, mlp_input
from interp.labels import Feature, FeatureError
from interp.models import Model, run_block
from interp.stream import as_batch, require_model

__all__ = ["attribution_graph", "output_tokens", "real_forward"]


def _check(model: Model, transcoders: Sequence[Transcoder]) -> None:
    a = model.arch
    if model.block.normed_stream:
        raise UnsupportedArchitectureError(f"model {model.name!r} is post-norm (its stream is normed after each join); "
                                           "attribution graphs need a pre-norm decoder")
    if not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers to replace by transcoders")
    if not a.causal or model.weights.W_U is None:
        raise UnsupportedArchitectureError(f"model {model.name!r} is not a decoder with an unembedding")
    if isinstance(transcoders, (list, tuple)):
        for i, t in enumerate(transcoders):
            if isinstance(t, SAE):
                raise ArgumentError(f"transcoders[{i}] is an SAE of the residual stream ({t.hook_name}); the replacement "
                                    "model replaces MLPs, so it needs transcoders (MLP input → MLP output): "
                                    "interp.features.load_transcoders or train_transcoders")
    if not isinstance(transcoders, (list, tuple)) or not all(isinstance(t, Transcoder) for t in transcoders):
        raise ArgumentError("transcoders must be a list of interp.features.Transcoder, one per layer")
    if len(transcoders) != a.n_layers:
        raise ArgumentError(f"transcoders has {len(transcoders)} entries; model {model.name!r} has {a.n_layers} layers")
    check_layers(transcoders)
    for l, t in enumerate(transcoders):
        if t.d_model != a.d_model:
            raise ArgumentError(f"transcoders[{l}] has d_model={t.d_model}; the model's is {a.d_model}")


class _Frozen:
    """The replacement model with attention patterns and norm scales frozen at one real forward: each layer an
    interpreter of the model's block (:class:`_FrozenLayer`)."""

    def __init__(self, e: Engine, tcs: list[Transcoder], patterns: list[Tensor], s1: list[Tensor], s2: list[Tensor],
                 s_post: list[Optional[Tensor]], s_final: Tensor, dtype: torch.dtype):
        self.e, self.a, self.block, self.tcs, self.dt = e, e.arch, e.block, tcs, dtype
        self.w = e.w.to(dtype=dtype)
        self.patterns, self.s1, self.s2, self.s_post, self.s_final = patterns, s1, s2, s_post, s_final
        self._sigma = {"ln1": s1, "ln2": s2, "ln1_post": s_post}  # the frozen scales, by the block's norm ids

    def norm(self, x: Tensor, gain: Optional[Tensor], bias: Optional[Tensor], sigma: Tensor) -> Tensor:
        """A norm with its scale σ [n, 1] frozen: γ ⊙ (x − mean x)/σ + β (LayerNorm), γ ⊙ x/σ (RMSNorm)."""
        kind = self.a.norm
        if kind == "none":
            return x
        if kind == "layernorm":
            x = x - x.mean(-1, keepdim=True)
        y = x / sigma
        if gain is not None:
            y = y * gain
        return y + bias if (bias is not None and kind == "layernorm") else y

    def gain(self, norm: str, l: int) -> Optional[Tensor]:
        """γ of layer l's norm ``norm`` (a block step's norm id: "ln1", "ln2", "ln1_post"), in the model's dtype."""
        g = getattr(self.w, f"{norm}_w", None)
        return None if g is None else g[l]

    def sigma(self, norm: str, l: int) -> Tensor:
        """The frozen scale σ [n, 1] of layer l's norm ``norm`` at the real forward."""
        if norm not in self._sigma:
            raise AssertionError(f"the replacement model keeps no frozen scale for norm {norm!r}")
        s = self._sigma[norm][l]
        assert s is not None, f"the real forward kept no scale for {norm!r}"
        return s

    def norm_at(self, norm: Optional[str], l: int, x: Tensor) -> Tensor:
        """x through layer l's norm ``norm`` with its frozen scale, or x itself for None (a raw read)."""
        if norm is None:
            return x
        b = getattr(self.w, f"{norm}_b", None)
        return self.norm(x, self.gain(norm, l), None if b is None else b[l], self.sigma(norm, l))

    def attention(self, l: int, h1: Tensor) -> Tensor:
        """Layer l's attention on what it read, h1 [B, n, d], with the frozen pattern: Σ_h P_h (h1 W_V^{kv(h)} + b_V)
        W_O^h + b_O (before its output norm)."""
        a, w = self.a, self.w
        G = a.n_heads // a.n_kv_heads  # query heads per KV head
        v = torch.einsum("bnd,kdh->bnkh", h1, w.W_V[l]) + w.b_V[l]  # [B, n, Hkv, dh]
        v = v.repeat_interleave(G, dim=2)  # query head h reads KV head h // G
        z = torch.einsum("hqk,bkhd->bqhd", self.patterns[l], v)
        return torch.einsum("bqhd,hdm->bqm", z, w.W_O[l]) + w.b_O[l]

    def attn_input(self, l: int, x: Tensor) -> Tensor:
        """What layer l's attention reads from the stream x (q, k and v): its read norm with the frozen scale, or
        x itself where the block reads the stream raw."""
        return self.norm_at(self.block.read_norm("attn"), l, x)

    def step(self, l: int, x: Tensor, mlp: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
        """Layer l on the stream x [B, n, d] with its MLP write replaced by ``mlp(h2)`` (h2 = what the MLP reads,
        through its frozen read norm): (the next stream, h2). The block's steps, interpreted (:class:`_FrozenLayer`)."""
        ops = _FrozenLayer(self, l, mlp)
        x = run_block(self.block, ops, x)
        assert ops.h2 is not None  # _check: the block has an MLP
        return x, ops.h2

    def leaf_mlp(self, l: int, leaf: Tensor) -> Callable[[Tensor], Tensor]:
        """The replacement MLP write with the layer's features and error node held as the source ``leaf``:
        leaf + b_dec + the skip term of the (frozen) stream."""
        tc = self.tcs[l]
        return lambda h2: leaf + tc.b_dec + tc.skip(h2)

    def resid(self, emb: Tensor, leaves: list[Tensor], upto: int) -> Tensor:
        """The stream entering layer ``upto`` from the sources (embeddings, the MLP leaves of layers < upto)."""
        x = emb
        for l in range(upto):
            x, _ = self.step(l, x, self.leaf_mlp(l, leaves[l]))
        return x

    def readout(self, x: Tensor, pos: int, u: Tensor, b_u: Tensor) -> Tensor:
        """The metric of the final stream x [B, n, d] at ``pos``: N_f(x_pos) (frozen σ) · u + b_u."""
        w = self.w
        return self.norm(x[:, pos], w.lnf_w, w.lnf_b, self.s_final[pos]) @ u + b_u

    def forward(self, emb: Tensor, leaves: list[Tensor], feats: list[tuple[Tensor, Tensor]], pos: int,
                u: Tensor, b_u: Tensor) -> tuple[list[Tensor], Tensor]:
        """Sources emb [B, n, d] and per-layer MLP leaves [B, n, d] → (per-layer pre-activations [B, m_l] of
        the selected features (positions, feature ids), the metric [B])."""
        x = emb
        pres: list[Tensor] = []
        for l in range(self.a.n_layers):
            x, h2 = self.step(l, x, self.leaf_mlp(l, leaves[l]))
            tc = self.tcs[l]
            p_idx, f_idx = feats[l]
            pres.append((h2[:, p_idx] * tc.W_enc[f_idx]).sum(-1) + tc.b_enc[f_idx])
        return pres, self.readout(x, pos, u, b_u)


class _FrozenLayer:
    """One layer of the replacement model, an interpreter of the block (:class:`interp.models.BlockOps`): reads
    through their norms with the scales frozen, the attention with its frozen pattern, its output norm frozen
    ("ln1_post"), the MLP replaced by ``mlp`` — whose write is already the MLP's output as it joins the stream (the
    real ``mlp_out``, after any output norm "ln2_post"), so the MLP's output norm is not applied again. Keeps
    ``h2``, what the MLP read."""

    def __init__(self, fr: _Frozen, l: int, mlp: Callable[[Tensor], Tensor]):
        self.fr, self.l, self.mlp = fr, l, mlp
        self.h2: Optional[Tensor] = None

    def point(self, site: str, v: Tensor) -> Tensor:
        return v

    def read(self, sub: str, norm: Optional[str], stream: Tensor) -> Tensor:
        h = self.fr.norm_at(norm, self.l, stream)
        if sub == "mlp":
            self.h2 = h
        return h

    def apply(self, sub: str, h: Tensor) -> Tensor:
        return self.fr.attention(self.l, h) if sub == "attn" else self.mlp(h)

    def out_norm(self, sub: str, norm: str, out: Tensor) -> Tensor:
        return self.fr.norm_at(norm, self.l, out) if sub == "attn" else out

    def add(self, sub: str, stream: Tensor, out: Tensor) -> Tensor:
        return stream + out

    def norm(self, norm: str, stream: Tensor) -> Tensor:
        raise UnsupportedArchitectureError("the replacement model has no frozen stream norms (post-norm blocks)")


@dataclass
class _Real:
    """The real forward of one prompt, read for the replacement model: the frozen model, each layer's active
    features (positions, ids), their activations and pre-activations, the error nodes [n, d], the embedding
    [n, d], the final stream [n, d] and the engine's cache."""

    frozen: _Frozen
    tcs: list[Transcoder]
    feats: list[tuple[Tensor, Tensor]]
    acts: list[Tensor]
    pre: list[Tensor]
    errs: list[Tensor]
    emb: Tensor
    final: Tensor
    cache: RunCache
    dtype: torch.dtype

    def leaves(self) -> list[Tensor]:
        """Each layer's MLP leaf at the real forward: Σ_f a_f W_dec[f] + e (per position) [n, d]."""
        return [self.errs[l].index_add(0, self.feats[l][0], self.acts[l][:, None] * self.tcs[l].W_dec[self.feats[l][1]])
                for l in range(len(self.tcs))]


def _read(fr: _Frozen, vecs: Tensor, p_idx: Tensor, l: int) -> Tensor:
    """Targets' reads carried to the stream they read, [m, d]: a layer-l feature's W_enc through N2's frozen map
    at its position (the stream entering the MLP; W_enc itself without pre-norms), an output's u through the
    final norm's (``l`` = n_layers): γ ⊙ C(v)/σ_p (C the centring of LayerNorm)."""
    a, w, e = fr.a, fr.w, fr.e
    if l == a.n_layers:
        return e.norm_vjp(vecs, None, w.lnf_w, frozen=True, sigma=fr.s_final[p_idx])
    norm = fr.block.read_norm("mlp")
    if norm is None:
        return vecs
    return e.norm_vjp(vecs, None, fr.gain(norm, l), frozen=True, sigma=fr.sigma(norm, l)[p_idx])


def _hold_prefix(real: _Real, k: int) -> list[Tensor]:
    """Hold the MLP writes at positions < k as constants (in place on ``real``): drop the features there and zero
    the error nodes' vectors there; returns the held writes per layer [n, d] (zero from position k on)."""
    held = [torch.zeros_like(leaf) for leaf in real.errs]
    if not k:
        return held
    for l, leaf in enumerate(real.leaves()):
        held[l][:k] = leaf[:k]
        keep = real.feats[l][0] >= k
        real.feats[l] = (real.feats[l][0][keep], real.feats[l][1][keep])
        real.acts[l], real.pre[l] = real.acts[l][keep], real.pre[l][keep]
        real.errs[l] = real.errs[l].clone()
        real.errs[l][:k] = 0
    return held


def one_prompt(model: Model, prompt: Any) -> tuple[Tensor, Tensor]:
    """``prompt`` (a string or token ids [1, pos]) as (tokens [1, n], attention mask [1, n]); more than one refused."""
    batch = as_batch(model, prompt)
    if batch.tokens.shape[0] != 1:
        raise ArgumentError(f"prompt must be one prompt (a string or token ids [1, pos]), got {batch.tokens.shape[0]}")
    return batch.tokens, batch.attention_mask


def output_tokens(model: Model, tokens: Tensor, pos: int, target: Optional[TokenSpec], wrong: Optional[TokenSpec],
                  owner: str) -> tuple[Optional[int], Optional[int]]:
    """The ids of ``target`` and ``wrong`` (None where not given) read at position ``pos`` of ``tokens`` [1, n]; a
    token string without its leading space after a word warns (:class:`interp.TokenSpacingWarning`). The one
    reader of output tokens of every function of this package that takes one."""
    if wrong is not None and target is None:
        raise ArgumentError("wrong= needs target= (the output is the logit difference target − wrong)")
    at = torch.tensor([pos], device="cpu")  # host: read position by position
    ids: list[Optional[int]] = []
    for name, spec in (("target", target), ("wrong", wrong)):
        if spec is None:
            ids.append(None)
            continue
        warn_unspaced(model, spec, name, tokens, at, owner=owner)
        ids.append(int(resolve_tokens(model, spec, 1, name)[0]))
    return ids[0], ids[1]


def position(name: str, value: Any, n: int) -> int:
    """An int in [−n, n − 1] (negative counts back from the end) as its index in [0, n)."""
    if not isinstance(value, int) or isinstance(value, bool) or not -n <= value < n:
        raise ArgumentError(f"{name}={value!r} must be an int in [{-n}, {n - 1}] for a prompt of {n} tokens")
    return value % n


def real_forward(model: Model, tokens: Tensor, mask: Tensor, transcoders: Sequence[Transcoder],
                 capture: Iterable[str] = ()) -> _Real:
    """Run ``tokens`` [1, n] once on the engine and read what the replacement model needs (:class:`_Real`).
    A prompt longer than the dictionaries' training sequences warns (:class:`ContextLengthWarning`)."""
    a = model.arch
    trained = [t.context_length for t in transcoders if t.context_length is not None]
    if trained and tokens.shape[1] > min(trained):
        warn_user(f"the prompt has {tokens.shape[1]} tokens but the transcoders were trained on sequences of "
                  f"{min(trained)}: their features past position {min(trained) - 1} are out of distribution (the "
                  "graph still closes, through larger error nodes); shorten the prompt or train on longer "
                  "sequences (train_transcoders(seq_len=...))", ContextLengthWarning)
    e = Engine.of(model)
    dt = torch.float64 if model.dtype == torch.float64 else torch.float32
    tcs = [t.to(device=tokens.device, dtype=dt) for t in transcoders]
    cache = e.run(tokens, mask, capture={"pattern", "resid_mid", "mlp_out", *capture}, keep_scales=True)

    def c(t: Optional[Tensor]) -> Tensor:  # prompt 0, out of inference mode (autograd may save it), in dtype dt
        if t is None:
            raise RuntimeError("the engine did not keep an activation the graph needs")
        return t[0].to(dt).clone()

    s1, s2, s_post, patterns = [], [], [], []
    acts, errs, feats, pre_real = [], [], [], []
    for l in range(a.n_layers):
        x = c(cache.resid_pre[l])
        mid = c(cache.acts["resid_mid"][l]) if e.block.sees("mlp", "attn") else x  # the stream the MLP reads
        h2 = mlp_input(e, x, mid, l).to(dt)
        s1.append(e.norm_scale(x))
        s2.append(e.norm_scale(mid))
        post = cache.scales.get("ln1_post")
        s_post.append(None if post is None else c(post[l]))
        patterns.append(c(cache.acts["pattern"][l]))
        pre = tcs[l].pre_activation(h2)
        f = tcs[l].activate(pre)
        errs.append(c(cache.acts["mlp_out"][l]) - tcs[l].decode(f, h2 if tcs[l].W_skip is not None else None))
        p_idx, f_idx = f.nonzero(as_tuple=True)
        feats.append((p_idx, f_idx))
        acts.append(f[p_idx, f_idx])
        pre_real.append(pre[p_idx, f_idx])
    final = c(cache.final)
    frozen = _Frozen(e, tcs, patterns, s1, s2, s_post, e.norm_scale(final), dt)
    return _Real(frozen, tcs, feats, acts, pre_real, errs, c(e.embed(cache.embed)), final, cache, dt)


def attribution_graph(
    model: Model,
    prompt: str | Tensor,
    transcoders: Sequence[Transcoder],
    *,
    target: Optional[TokenSpec] = None,
    wrong: Optional[TokenSpec] = None,
    pos: int = -1,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    constant_prefix: int = 0,
    logit_effects: int = 0,
    batch_size: int = 256,
) -> AttributionGraph:
    """The exact attribution graph of ``prompt`` over per-layer ``transcoders`` (module docstring).

    ``target`` is the token whose logit at position ``pos`` is the graph's output (node ``logit``); with
    ``wrong`` the output is the logit difference target − wrong. Without ``target`` the outputs are the top
    logits (nodes ``logit[<id>]``): the most probable tokens until their probabilities sum to
    ``desired_logit_prob``, at most ``max_n_logits``, each weighted by its probability in influence (as
    circuit-tracer selects them). Nodes: active features (layer, position, feature), error nodes (one per
    layer and position), token embeddings (one per position), the outputs. Edges: ``adjacency[target, source]``, the direct effect of the source on the
    target's pre-activation (features) or on the output, through the replacement model with attention
    patterns and norm scales frozen. Each target's constant term (all biases) is in ``bias``; the closure
    ``max |value − (Σ edges + bias)|`` is stored as ``closure_error`` (``relative_error`` divides each by
    Σ|edges| + |bias|). Pre-norm decoders with MLPs only (sequential or parallel blocks, sandwich norms); where
    the model soft-caps its logits (Gemma 2) the output is the logit before the cap (the linear read).
    ``node_threshold`` and ``edge_threshold`` (in (0, 1]) are the graph's pruning thresholds as circuit-tracer
    defines them: the defaults of ``.prune()`` and ``.export()``; the graph itself is whole.
    ``constant_prefix`` = k holds the MLP writes at the first k positions at their real values: their features
    are not nodes, their error nodes have no edges, and those writes join every target's constant term (the graph
    still closes; every other edge is unchanged). k = 1 is circuit-tracer's convention (the BOS position, an
    attention sink whose MLP writes large and uninformative features; 4 for Gemma 3 chat templates).
    ``logit_effects`` = k keeps each feature's k most promoted and k most suppressed tokens (its decoder row
    straight to the logits at its position), which the viewer shows on hover; 0 (the default) keeps none: they
    are display data, one product with W_U per distinct feature, the larger part of the build for a large
    vocabulary. ``batch_size`` targets (or sources) are carried through the frozen layers per pass (memory ∝
    batch_size · positions · d_model; the edges do not depend on it).
    """
    require_model(model)
    _check(model, transcoders)
    check_thresholds(node_threshold, edge_threshold)
    for name, v in (("batch_size", batch_size), ("max_n_logits", max_n_logits)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ArgumentError(f"{name}={v!r} must be a positive int")
    if not isinstance(logit_effects, int) or isinstance(logit_effects, bool) or logit_effects < 0:
        raise ArgumentError(f"logit_effects={logit_effects!r} must be an int ≥ 0 (0: none)")
    if isinstance(desired_logit_prob, bool) or not isinstance(desired_logit_prob, (int, float)) \
            or not 0.0 < desired_logit_prob <= 1.0:
        raise ArgumentError(f"desired_logit_prob={desired_logit_prob!r} must be a number in (0, 1]")
    tokens, mask = one_prompt(model, prompt)
    n = tokens.shape[1]
    pos = position("pos", pos, n)
    t_id, w_id = output_tokens(model, tokens, pos, target, wrong, "attribution_graph")
    a = model.arch
    if not isinstance(constant_prefix, int) or isinstance(constant_prefix, bool) or not 0 <= constant_prefix < n:
        raise ArgumentError(f"constant_prefix={constant_prefix!r} must be an int in [0, {n - 1}] for a prompt of {n} "
                            "tokens (1: the BOS position's MLP writes are constants, circuit-tracer's convention)")
    real = real_forward(model, tokens, mask, transcoders)
    held = _hold_prefix(real, constant_prefix)  # the MLP writes at the first positions, held as constants
    frozen, tcs, feats, acts, pre_real, errs = real.frozen, real.tcs, real.feats, real.acts, real.pre, real.errs
    e, dt, final, emb = frozen.e, real.dtype, real.final, real.emb

    # the output: a logit or a logit difference at pos
    w = model.weights
    W_U, b_U = w.W_U.to(dt), (torch.zeros(a.d_vocab, dtype=dt, device=tokens.device) if w.b_U is None else w.b_U.to(dt))  # type: ignore[union-attr]
    logits_real = e.norm(final[pos], w.lnf_w.to(dt) if w.lnf_w is not None else None,
                         None if w.lnf_b is None else w.lnf_b.to(dt)) @ W_U + b_U
    if t_id is None:  # the top logits, by the model's own (soft-capped) probabilities
        capped = torch.tanh(logits_real / a.final_softcap) * a.final_softcap if a.final_softcap else logits_real
        probs = torch.softmax(capped.double(), -1)
        top_p, top_i = probs.sort(descending=True)
        K = min(int((top_p.cumsum(0) < desired_logit_prob).sum()) + 1, max_n_logits, a.d_vocab)
        ids = top_i[:K].tolist()
        out_w = top_p[:K].to(dt)
        u, b_u = W_U[:, ids], b_U[ids]
        out_real = logits_real[ids]
        out_labels = [f"logit[{i}]" for i in ids]
        tok_str = " | ".join(_tok(model, i) for i in ids)
    else:
        ids = [t_id] if w_id is None else [t_id, w_id]
        u, b_u = W_U[:, t_id], b_U[t_id]
        if w_id is not None:
            u, b_u = u - W_U[:, w_id], b_u - b_U[w_id]
        u, b_u = u[:, None], b_u[None]
        out_real = (logits_real[t_id] - (0 if w_id is None else logits_real[w_id]))[None]
        out_w = torch.ones(1, dtype=dt, device="cpu")
        out_labels = ["logit"]
        tok_str = _tok(model, t_id) + ("" if w_id is None else f" − {_tok(model, w_id)}")
    K = len(out_labels)

    L = a.n_layers
    m_l = [len(x) for x in acts]
    offs = [sum(m_l[:l]) for l in range(L)]
    n_feat = sum(m_l)
    n_err, n_tok = L * n, n
    N = n_feat + n_err + n_tok + K
    A = torch.zeros(N, N, dtype=dt, device=tokens.device)

    # constant terms: the frozen model with every source zero (and the held writes at their real values)
    with torch.no_grad():
        zeros = torch.zeros(1, n, a.d_model, dtype=dt, device=tokens.device)
        c_pres, c_out = frozen.forward(zeros, [h[None] for h in held], feats, pos, u, b_u)
    bias = torch.zeros(N, dtype=dt, device="cpu")  # the graph's tables are host bookkeeping
    value = torch.zeros(N, dtype=dt, device="cpu")
    for l in range(L):
        bias[offs[l]: offs[l] + m_l[l]] = c_pres[l][0].cpu()
        value[offs[l]: offs[l] + m_l[l]] = pre_real[l].detach().cpu()
    bias[N - K:], value[N - K:] = c_out[0].cpu(), out_real.detach().cpu()

    # edges: the frozen model's Jacobian between every source and every target (interp.features._jacobian)
    reads = [_read(frozen, tcs[l].W_enc[feats[l][1]], feats[l][0], l) for l in range(L)]
    reads.append(_read(frozen, u.T, torch.full((K,), pos, dtype=torch.long, device=u.device), L))
    every = torch.arange(n, device="cpu")  # Ends' layer/pos/index are host indices
    tgt = Ends(torch.cat(reads),
               torch.cat([torch.full((m_l[l],), l, dtype=torch.long, device="cpu") for l in range(L)] + [torch.full((K,), L, dtype=torch.long, device="cpu")]),
               torch.cat([feats[l][0].cpu() for l in range(L)] + [torch.full((K,), pos, dtype=torch.long, device="cpu")]),
               torch.cat([torch.arange(n_feat, device="cpu"), torch.arange(N - K, N, device="cpu")]))
    src = Ends(torch.cat([v for k in range(L) for v in (tcs[k].W_dec[feats[k][1]] * acts[k][:, None], errs[k])] + [emb]),
               torch.cat([torch.full((m_l[k] + n,), k, dtype=torch.long, device="cpu") for k in range(L)] + [torch.full((n,), -1, dtype=torch.long, device="cpu")]),
               torch.cat([t for k in range(L) for t in (feats[k][0].cpu(), every)] + [every]),
               torch.cat([t for k in range(L) for t in (torch.arange(offs[k], offs[k] + m_l[k], device="cpu"), n_feat + k * n + every)]
                         + [n_feat + n_err + every]))
    FrozenJacobian(frozen, n).fill(A, tgt, src, batch_size)
    A = A.cpu()
    targets = list(range(n_feat)) + list(range(N - K, N))

    res = value - (A.sum(1) + bias)
    res[n_feat: N - K] = 0  # sources have no incoming edges
    scale = A.abs().sum(1) + bias.abs()
    rows = torch.tensor(targets, device="cpu")
    closure = float(res[rows].abs().max())
    relative = float((res[rows].abs() / scale[rows].clamp_min(torch.finfo(dt).tiny)).max())

    labels, kinds, layers, poss, fids, act_col = [], [], [], [], [], torch.zeros(N, dtype=dt, device="cpu")
    for l in range(L):
        for j, (p, f) in enumerate(zip(feats[l][0].tolist(), feats[l][1].tolist())):
            labels.append(str(Feature(l, f, p))); kinds.append("feature"); layers.append(l); poss.append(p); fids.append(f)
        act_col[offs[l]: offs[l] + m_l[l]] = acts[l].detach().cpu()
    for l in range(L):
        for p in range(n):
            labels.append(str(FeatureError(l, p))); kinds.append("error"); layers.append(l); poss.append(p); fids.append(-1)
    act_col[n_feat: n_feat + n_err] = torch.stack([er.detach().norm(dim=-1) for er in errs]).reshape(-1).cpu()
    for p in range(n):
        labels.append(f"embed@{p}"); kinds.append("token"); layers.append(-1); poss.append(p); fids.append(-1)
    act_col[n_feat + n_err: N - K] = emb.detach().norm(dim=-1).cpu()
    if a.final_softcap:  # the graph's output is the linear logit; the model reports c·tanh(logit / c)
        tok_str += f" (before the soft-cap {a.final_softcap:g})"
    for lab in out_labels:
        labels.append(lab); kinds.append("logit"); layers.append(L); poss.append(pos); fids.append(-1)
    weight = torch.zeros(N, dtype=dt, device="cpu")
    weight[N - K:] = out_w.cpu()
    eff_ids: Optional[Tensor] = None
    eff_val: Optional[Tensor] = None
    eff_strs: Optional[list[list[str]]] = None
    if logit_effects:
        k = min(logit_effects, a.d_vocab)
        eff_ids = torch.full((N, 2 * k), -1, dtype=torch.long, device="cpu")
        eff_val = torch.zeros(N, 2 * k, dtype=dt, device="cpu")
        if n_feat:
            eff_ids[:n_feat], eff_val[:n_feat] = _logit_effects(real, k)
        if model.tokenizer is not None:
            uniq = sorted(set(eff_ids[:n_feat].reshape(-1).tolist()))
            text = dict(zip(uniq, model.tokenizer.batch_decode([[i] for i in uniq]))) if uniq else {}
            eff_strs = [[text[i] for i in row] if row[0] >= 0 else [] for row in eff_ids.tolist()]
    return AttributionGraph(
        adjacency=A, bias=bias, value=value, activation=act_col, node_labels=labels, node_kind=kinds,
        node_layer=layers, node_pos=poss, node_feature=fids, tokens=tokens[0].tolist(),
        target_ids=ids, target=tok_str, closure_error=closure, relative_error=relative, n_layers=L,
        model_name=model.name, output_weight=weight,
        token_strs=None if model.tokenizer is None else [model.tokenizer.decode([t]) for t in tokens[0].tolist()],
        output_token_strs=None if model.tokenizer is None else [model.tokenizer.decode([t]) for t in ids],
        logit_effect_ids=eff_ids, logit_effect_values=eff_val, logit_effect_strs=eff_strs,
        node_threshold=float(node_threshold), edge_threshold=float(edge_threshold),
    )


def _logit_effects(real: _Real, k: int) -> tuple[Tensor, Tensor]:
    """Each active feature's (graph order) ``k`` most promoted and ``k`` most suppressed tokens per unit of its
    activation, directly at its own position p: W_dec[f] through the final norm with p's frozen scale, then
    W_U — (ids [n_feat, 2k], values [n_feat, 2k]). The scale 1/σ_p is positive, so a feature's tokens are the
    same at every position: each distinct feature's product is computed once, then divided by σ_p."""
    fr = real.frozen
    w = fr.w
    k = min(k, int(w.W_U.shape[1]))  # type: ignore[union-attr]
    W_U = w.W_U
    assert W_U is not None  # _check: a decoder with an unembedding
    uniq: list[Tensor] = []
    where: list[Tensor] = []
    for l, (_, f_idx) in enumerate(real.feats):
        u, inv = torch.unique(f_idx, return_inverse=True)
        where.append(inv + sum(int(x.shape[0]) for x in uniq))
        uniq.append(real.tcs[l].W_dec[u])
    if not uniq:
        return torch.zeros(0, 2 * k, dtype=torch.long, device="cpu"), torch.zeros(0, 2 * k, dtype=fr.dt, device="cpu")
    with torch.no_grad():
        U = torch.cat(uniq)
        if fr.a.norm == "layernorm":
            U = U - U.mean(-1, keepdim=True)
        if w.lnf_w is not None:
            U = U * w.lnf_w
        ids, vals = top_and_bottom_logits(U, W_U, k)
    at = torch.cat(where)
    sigma = torch.cat([fr.s_final[p_idx] for p_idx, _ in real.feats])  # [n_feat, 1]
    return ids[at].cpu(), (vals[at] / sigma).cpu()


def _tok(model: Model, i: int) -> str:
    tok = model.tokenizer
    return repr(tok.decode([i])) if tok is not None else str(i)
