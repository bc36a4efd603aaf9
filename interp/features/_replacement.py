"""The replacement model of one prompt: the model with every attention pattern and norm scale frozen at one real
forward and every MLP write replaced by its transcoder's features plus an error node.

Run the model once (:func:`real_forward`). At each layer l and position p the transcoder reads what the MLP really
read, x_{l,p} (:func:`~interp.dictionaries.internal.mlp_input`), and gives feature activations a_{l,p} and an
output â_{l,p}; the **error node** e_{l,p} = MLP_l(x)_p − â_{l,p} is the rest of the MLP's real write. Freeze every
attention pattern and every norm's scale σ at the real forward's and replace each MLP write by the constant
Σ_f a_{l,p,f} W_dec[f] + e_{l,p} (plus b_dec and, for a skip transcoder, the linear term x W_skipᵀ of the frozen
stream): the resulting model (:class:`FrozenReplacement`) is affine in its sources — the token embeddings, the
feature activations and the error nodes — and reproduces the real forward exactly. Each of its layers interprets
the model's block (:func:`interp.models.internal.run_block`): reads through their norms with σ frozen, the attention
with its frozen pattern, the MLP replaced. The attribution graph's edges are its Jacobian (:mod:`._jacobian`);
interventions and QK attribution rerun it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._norms import apply_frozen
from interp.engine.internal import Engine, MLPWrite, RunCache
from interp.errors import (
    ContextLengthWarning,
    UnsupportedArchitectureError,
    warn_user,
)
from interp.dictionaries import CrossLayerTranscoder, DictionarySet, Transcoder
from interp.dictionaries.internal import mlp_input, replacement_set
from interp.models import Model
from interp.models.internal import run_block

__all__ = ["FrozenReplacement", "RealRun", "check_replaceable", "real_forward"]


def check_replaceable(model: Model, transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder]) -> None:
    """``model`` is a decoder whose MLPs ``transcoders`` can replace: pre-norm, with MLPs and an unembedding (else
    :class:`~interp.errors.UnsupportedArchitectureError`); the transcoders a list of :class:`Transcoder` of the model's
    width, one per layer in layer order, or a :class:`CrossLayerTranscoder` with an encoder at each of the model's
    layers (else :class:`~interp.errors.ArgumentError`). Every analysis over the replacement model takes both."""
    a = model.arch
    if model.block.normed_stream:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is post-norm (its stream is normed after each join); "
            "attribution graphs need a pre-norm decoder"
        )
    if not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers to replace by transcoders")
    if not a.causal or model.weights.W_U is None:
        raise UnsupportedArchitectureError(f"model {model.name!r} is not a decoder with an unembedding")
    replacement_set(model, transcoders)


class FrozenReplacement:
    """The replacement model with attention patterns and norm scales frozen at one real forward (module docstring):
    each layer an interpreter of the model's block (:class:`_FrozenLayer`). Built by :func:`real_forward`."""

    def __init__(
        self,
        e: Engine,
        tcs: list[Transcoder],
        patterns: list[Tensor],
        s1: list[Tensor],
        s2: list[Tensor],
        s_post: list[Optional[Tensor]],
        s_final: Tensor,
        dtype: torch.dtype,
    ):
        self.e, self.a, self.block, self.tcs, self.dt = e, e.arch, e.block, tcs, dtype
        self.w = e.w.to(dtype=dtype)
        self.patterns, self.s1, self.s2, self.s_post, self.s_final = patterns, s1, s2, s_post, s_final
        # the frozen scales, by the block's norm ids
        self._sigma: dict[str, Sequence[Optional[Tensor]]] = {"ln1": s1, "ln2": s2, "ln1_post": s_post}

    def norm(self, x: Tensor, gain: Optional[Tensor], bias: Optional[Tensor], sigma: Tensor) -> Tensor:
        """A norm of the model's kind with its scale σ [n, 1] frozen: γ ⊙ (x − mean x)/σ + β (LayerNorm), γ ⊙ x/σ
        (RMSNorm) (:func:`interp._norms.apply_frozen`)."""
        return apply_frozen(x, gain, sigma, self.a.norm, bias)

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
        assert ops.h2 is not None  # check_replaceable: the block has an MLP
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

    def forward(
        self, emb: Tensor, leaves: list[Tensor], feats: list[tuple[Tensor, Tensor]], pos: int, u: Tensor, b_u: Tensor
    ) -> tuple[list[Tensor], Tensor]:
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

    def stream_reads(self, vecs: Tensor, p_idx: Tensor, l: int) -> Tensor:
        """Targets' reads carried to the stream they read, [m, d]: a layer-l feature's W_enc through the frozen map
        of the MLP's read norm at its position (W_enc itself where the MLP reads the stream raw), an output's u
        through the final norm's (``l`` = n_layers): γ ⊙ C(v)/σ_p (C the centring of LayerNorm)."""
        a, w, e = self.a, self.w, self.e
        if l == a.n_layers:
            return e.norm_vjp(vecs, None, w.lnf_w, frozen=True, sigma=self.s_final[p_idx])
        norm = self.block.read_norm("mlp")
        if norm is None:
            return vecs
        return e.norm_vjp(vecs, None, self.gain(norm, l), frozen=True, sigma=self.sigma(norm, l)[p_idx])


class _FrozenLayer:
    """One layer of the replacement model, an interpreter of the block (:class:`interp.models.internal.BlockOps`): reads
    through their norms with the scales frozen, the attention with its frozen pattern, its output norm frozen
    ("ln1_post"), the MLP replaced by ``mlp`` — whose write is already the MLP's output as it joins the stream (the
    real ``mlp_out``, after any output norm "ln2_post"), so the MLP's output norm is not applied again. Keeps
    ``h2``, what the MLP read."""

    def __init__(self, fr: FrozenReplacement, l: int, mlp: Callable[[Tensor], Tensor]):
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
class RealRun:
    """The real forward of one prompt, read for the replacement model: the frozen model, each layer's active
    features (positions, ids), their activations and pre-activations, the error nodes [n, d], the embedding
    [n, d], the final stream [n, d] and the engine's cache."""

    frozen: FrozenReplacement
    tcs: list[Transcoder]
    feats: list[tuple[Tensor, Tensor]]
    acts: list[Tensor]
    pre: list[Tensor]
    errs: list[Tensor]
    emb: Tensor
    final: Tensor
    cache: RunCache
    dtype: torch.dtype
    dictionaries: DictionarySet

    def leaves(self) -> list[Tensor]:
        """Each layer's MLP leaf at the real forward: Σ_k Σ_f a_{k,f} W_dec[k → l][f] + e_l (per position) [n, d],
        over the features of every layer k ≤ l that writes to l (a per-layer set: k = l only)."""
        out = [e.clone() for e in self.errs]
        for k, (p_idx, f_idx) in enumerate(self.feats):
            for j, rows in self.writes(k, f_idx):
                out[j].index_add_(0, p_idx, self.acts[k][:, None] * rows)
        return out

    def dense(self, l: int) -> Tensor:
        """Layer l's real feature activations as a dense [n, F] (zero where inactive)."""
        f = torch.zeros(self.emb.shape[0], self.tcs[l].n_features, dtype=self.dtype, device=self.emb.device)
        f[self.feats[l]] = self.acts[l]
        return f

    def writes(self, l: int, f_idx: Tensor) -> list[tuple[int, Tensor]]:
        """Where layer l's features ``f_idx`` write per unit activation: [(layer, W_dec rows [m, d])] — their own
        layer's MLP output, and with a CLT every later layer's too (:meth:`DictionarySet.writes`)."""
        return self.dictionaries.writes(l, f_idx)

    def rerun(
        self,
        tokens: Tensor,
        mask: Tensor,
        write: Callable[[int, Tensor], Optional[Tensor]],
        *,
        frozen_attention: bool,
        batch: int = 1,
        add: bool = False,
    ) -> Tensor:
        """The final stream [batch, n, d] of ``batch`` copies of the prompt rerun with each layer l's MLP write
        replaced by ``write(l, h)`` of what this run's MLP reads there, h [batch, n, d] in the replacement model's
        dtype (``add``: added to the real MLP's write; None: the layer as it is) — the one rerun of interventions and
        graph faithfulness. ``frozen_attention``: every attention pattern and norm scale held at the real forward's
        (:meth:`FrozenReplacement.step`; the embedding is the real one); else the engine's live forward, each layer
        run once with the write made from its own MLP input (:class:`~interp.engine.MLPWrite`)."""
        fr, L = self.frozen, len(self.tcs)
        if frozen_attention:  # every write given (the replacement model has no real MLP to fall back on)

            def given(l: int, h: Tensor) -> Tensor:
                w = write(l, h)
                assert w is not None, "a frozen rerun replaces every layer's write"
                return w

            x = self.emb[None].repeat(batch, 1, 1)
            for l in range(L):
                x, _ = fr.step(l, x, functools.partial(given, l))
            return x
        e = fr.e
        e_dt = e.w.W_E.dtype
        x = e.embed(e.embed_parts(tokens)).repeat(batch, 1, 1)
        prompt = torch.zeros(batch, dtype=torch.long, device=tokens.device)
        rows = torch.arange(batch, device=tokens.device)

        def made(l: int, h: Tensor) -> Optional[Tensor]:
            w = write(l, h.to(self.dtype))
            return None if w is None else w.to(e_dt)

        for l in range(L):
            x = e.layer(l, x, prompt=prompt, mask=mask, patches=[MLPWrite(l, rows, functools.partial(made, l), add)])
        return x

    def hold_prefix(self, k: int) -> list[Tensor]:
        """Hold the MLP writes at positions < k as constants (in place): drop the features there and zero the error
        nodes' vectors there; returns the held writes per layer [n, d] (zero from position k on)."""
        held = [torch.zeros_like(leaf) for leaf in self.errs]
        if not k:
            return held
        for l, leaf in enumerate(self.leaves()):
            held[l][:k] = leaf[:k]
            keep = self.feats[l][0] >= k
            self.feats[l] = (self.feats[l][0][keep], self.feats[l][1][keep])
            self.acts[l], self.pre[l] = self.acts[l][keep], self.pre[l][keep]
            self.errs[l] = self.errs[l].clone()
            self.errs[l][:k] = 0
        return held


def real_forward(
    model: Model,
    tokens: Tensor,
    mask: Tensor,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    capture: Iterable[str] = (),
) -> RealRun:
    """Run ``tokens`` [1, n] once on the engine and read what the replacement model needs (:class:`RealRun`).
    A prompt longer than the dictionaries' training sequences warns (:class:`ContextLengthWarning`). A
    :class:`CrossLayerTranscoder` is read through its per-layer encoders (:meth:`CrossLayerTranscoder.encoder`);
    each layer's error node is the MLP's write minus the CLT's joint reconstruction of it."""
    a = model.arch
    dt = torch.float64 if model.dtype == torch.float64 else torch.float32
    ds = DictionarySet.of(transcoders).to(device=tokens.device, dtype=dt)
    trained = [ds.context_length] if ds.context_length is not None else []
    if trained and tokens.shape[1] > min(trained):
        warn_user(
            f"the prompt has {tokens.shape[1]} tokens but the transcoders were trained on sequences of "
            f"{min(trained)}: their features past position {min(trained) - 1} are out of distribution (the "
            "graph still closes, through larger error nodes); shorten the prompt or train on longer "
            "sequences (train_transcoders(seq_len=...))",
            ContextLengthWarning,
        )
    e = Engine.of(model)
    tcs = [ds.encoder(l) for l in range(a.n_layers)]
    cache = e.run(tokens, mask, capture={"pattern", "resid_mid", "mlp_out", *capture}, keep_scales=True)

    def c(t: Optional[Tensor]) -> Tensor:  # prompt 0, out of inference mode (autograd may save it), in dtype dt
        if t is None:
            raise RuntimeError("the engine did not keep an activation the graph needs")
        return t[0].to(dt).clone()

    s1, s2, s_post, patterns = [], [], [], []
    acts, errs, feats, pre_real, fs, h2s = [], [], [], [], [], []
    for l in range(a.n_layers):
        x = c(cache.resid_pre[l])
        mid = c(cache.acts["resid_mid"][l]) if e.block.sees("mlp", "attn") else x  # the stream the MLP reads
        h2 = mlp_input(e, x, mid, l).to(dt)
        s1.append(e.norm_scale(x))
        s2.append(e.norm_scale(mid))
        post = cache.scales.get("ln1_post")
        s_post.append(None if post is None else c(post[l]))
        patterns.append(c(cache.acts["pattern"][l]))
        pre = ds.pre_activation(l, h2)
        f = ds.activate(l, pre)
        fs.append(f)
        h2s.append(h2)
        p_idx, f_idx = f.nonzero(as_tuple=True)
        feats.append((p_idx, f_idx))
        acts.append(f[p_idx, f_idx])
        pre_real.append(pre[p_idx, f_idx])
    recon = ds.decode(fs, h2s)  # every layer's reconstruction of its MLP write (a CLT's: the joint one)
    errs = [c(cache.acts["mlp_out"][l]) - recon[l] for l in range(a.n_layers)]
    final = c(cache.final)
    frozen = FrozenReplacement(e, tcs, patterns, s1, s2, s_post, e.norm_scale(final), dt)
    return RealRun(frozen, tcs, feats, acts, pre_real, errs, c(e.embed(cache.embed)), final, cache, dt, ds)
