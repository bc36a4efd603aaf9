"""An independent edge-level forward of the tiny HF models, for checking interp.edges.

Written from the Hugging Face modules' own parameters and functions (their rotary embeddings, MLP
modules, unembedding), not from interp's Weights or engine, and deliberately naive: every reader
(each head's q, each KV head's k and v, each MLP's input, the metric's read) rebuilds its own input
from the writes so far,

    pre-norm:   x_r = Σ_{w before r} m_wr + Σ biases before r, then r's own norm
    post-norm:  x_r = the Add & Norm chain replayed on m_wr (every norm recomputed)

    m_wr = a_w + coef_wr (ã_w − a_w) + beta_wr Δ_w

with a_w this run's write, ã_w an ablated value and Δ_w a fixed direction. With coef = beta = 0 it is
the model's forward (anchored to the HF logits / hidden state by a test); ∂M/∂beta at 0 is EAP's
per-edge first-order term, ∂M/∂coef the mask gradient, coef one-hot = 1 exact edge patching, and
coef = 1 outside a circuit circuit evaluation. ``frozen=True`` computes the σ of every norm on a reader's
way (its own, and post-norm every Add & Norm of its replay) from the input *without* that reader's beta
terms: the derivative along beta then passes those norms with σ held (the frozen-scale linearisation of
the edge), while everything downstream of the reader keeps its true derivative.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

A_TOK, W_TOK = "w12", "w13"


class Reference:
    def __init__(self, hf, family: str, tokenizer=None, direction: Optional[Tensor] = None):
        self.hf, self.family, self.tok = hf, family, tokenizer
        c = hf.config
        self.d = c.hidden_size
        self.H = c.num_attention_heads
        self.G = getattr(c, "num_key_value_heads", None) or self.H
        self.dh = self.d // self.H
        self.L = c.num_hidden_layers
        self.post = family == "bert"
        self.parallel = family == "neox" and c.use_parallel_residual
        self.direction = direction
        self.writers = (
            ["embed"]
            + (["pos_embed"] if family in ("gpt2", "bert") else [])
            + (["type_embed"] if family == "bert" else [])
        )
        self.readers: list[str] = []
        for l in range(self.L):
            self.writers += [f"L{l}.H{h}" for h in range(self.H)] + [f"L{l}.mlp"]
            self.readers += [f"L{l}.attn.q[H{h}]" for h in range(self.H)]
            self.readers += [f"L{l}.attn.k[H{g}]" for g in range(self.G)] + [
                f"L{l}.attn.v[H{g}]" for g in range(self.G)
            ]
            self.readers.append(f"L{l}.mlp.in")
        self.readers.append("final" if self.post else "unembed")
        self.wi = {w: i for i, w in enumerate(self.writers)}
        self.ri = {r: i for i, r in enumerate(self.readers)}

    # -------------------------------------------------------------- structure

    @staticmethod
    def _layer(label: str) -> int:
        return int(label[1 : label.index(".")]) if label.startswith("L") else -1

    def sees(self, w: str, r: str) -> bool:
        """Does reader r read writer w (independently of interp's block program)?"""
        if r in ("unembed", "final") or w in ("embed", "pos_embed", "type_embed"):
            return True
        lw, lr = self._layer(w), self._layer(r)
        if lr > lw:
            return True
        if lr < lw:
            return False
        # same layer: only a sequential block's MLP reads its own layer's heads
        return r.endswith("mlp.in") and not w.endswith("mlp") and not self.parallel

    def edges(self) -> list[str]:
        return [f"{w}→{r}" for r in self.readers for w in self.writers if self.sees(w, r)]

    # -------------------------------------------------------------- pieces from the HF modules

    def _blocks(self):
        f, m = self.family, self.hf
        return {
            "gpt2": m.transformer.h if f == "gpt2" else None,
            "llama": m.model.layers if f == "llama" else None,
            "neox": m.gpt_neox.layers if f == "neox" else None,
            "bert": m.bert.encoder.layer if f == "bert" else None,
        }[f]

    def norm(self, x: Tensor, mod, sigma_from: Optional[Tensor] = None) -> Tensor:
        """The norm ``mod`` of x, its σ computed from ``sigma_from`` (default x)."""
        w = mod.weight
        b = getattr(mod, "bias", None)
        eps = getattr(mod, "eps", None) or getattr(mod, "variance_epsilon")
        src = x if sigma_from is None else sigma_from
        if self.family == "llama":  # RMSNorm in float32, as HF computes it
            xf = x.float()
            s = torch.sqrt(src.float().pow(2).mean(-1, keepdim=True) + eps)
            return w * (xf / s).to(x.dtype)
        xc = x - x.mean(-1, keepdim=True)
        sc = src - src.mean(-1, keepdim=True)
        s = torch.sqrt(sc.pow(2).mean(-1, keepdim=True) + eps)
        return xc / s * w + b

    def ln1(self, l):
        blk = self._blocks()[l]
        return {
            "gpt2": lambda: blk.ln_1,
            "llama": lambda: blk.input_layernorm,
            "neox": lambda: blk.input_layernorm,
            "bert": lambda: blk.attention.output.LayerNorm,
        }[self.family]()

    def ln2(self, l):
        blk = self._blocks()[l]
        return {
            "gpt2": lambda: blk.ln_2,
            "llama": lambda: blk.post_attention_layernorm,
            "neox": lambda: blk.post_attention_layernorm,
            "bert": lambda: blk.output.LayerNorm,
        }[self.family]()

    def ln_final(self):
        m = self.hf
        return {
            "gpt2": lambda: m.transformer.ln_f,
            "llama": lambda: m.model.norm,
            "neox": lambda: m.gpt_neox.final_layer_norm,
            "bert": lambda: None,
        }[self.family]()

    def proj(self, l: int, x: Tensor, which: str, head: int) -> Tensor:
        """One head's q / one KV head's k or v from its own input x [B, T, d] (pre-rotary) [B, T, dh]."""
        blk, dh = self._blocks()[l], self.dh
        sl = slice(head * dh, (head + 1) * dh)
        if self.family == "gpt2":
            out = blk.attn.c_attn(x)  # [B, T, 3d]: q | k | v
            return out[..., {"q": 0, "k": 1, "v": 2}[which] * self.d :][..., sl]
        if self.family == "llama":
            return {"q": blk.self_attn.q_proj, "k": blk.self_attn.k_proj, "v": blk.self_attn.v_proj}[which](x)[..., sl]
        if self.family == "neox":
            out = blk.attention.query_key_value(x).view(*x.shape[:2], self.H, 3 * dh)
            return out[:, :, head, {"q": 0, "k": 1, "v": 2}[which] * dh :][..., :dh]
        a = blk.attention.self
        return {"q": a.query, "k": a.key, "v": a.value}[which](x)[..., sl]

    def out_proj(self, l: int):
        """(W_O [H, dh, d], b_O [d] or None): the output projection split per head."""
        blk = self._blocks()[l]
        if self.family == "gpt2":
            W, b = blk.attn.c_proj.weight, blk.attn.c_proj.bias  # Conv1D: [in, out]
        else:
            lin = {
                "llama": lambda: blk.self_attn.o_proj,
                "neox": lambda: blk.attention.dense,
                "bert": lambda: blk.attention.output.dense,
            }[self.family]()
            W, b = lin.weight.T, lin.bias
        return W.reshape(self.H, self.dh, self.d), b

    def mlp(self, l: int, h: Tensor) -> Tensor:
        blk = self._blocks()[l]
        if self.family == "bert":
            return blk.output.dense(blk.intermediate(h))
        return blk.mlp(h)

    def rotate(self, q: Tensor, k: Tensor, T: int) -> tuple[Tensor, Tensor]:
        """q [B, H, T, dh], k [B, G, T, dh] with the model's rotary embedding (identity without one)."""
        if self.family not in ("llama", "neox"):
            return q, k
        pos = torch.arange(T)[None]
        if self.family == "llama":
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

            cos, sin = self.hf.model.rotary_emb(q, pos)
        else:
            from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

            cos, sin = self.hf.gpt_neox.rotary_emb(q, pos)
        qr, _ = apply_rotary_pos_emb(q, q, cos, sin)
        kr, _ = apply_rotary_pos_emb(k, k, cos, sin)
        return qr, kr

    def embed_parts(self, tokens: Tensor) -> dict[str, Tensor]:
        m, T = self.hf, tokens.shape[1]
        pos = torch.arange(T)
        if self.family == "gpt2":
            return {
                "embed": m.transformer.wte(tokens),
                "pos_embed": m.transformer.wpe(pos)[None].expand(len(tokens), -1, -1),
            }
        if self.family == "llama":
            return {"embed": m.model.embed_tokens(tokens)}
        if self.family == "neox":
            return {"embed": m.gpt_neox.embed_in(tokens)}
        e = m.bert.embeddings
        return {
            "embed": e.word_embeddings(tokens),
            "pos_embed": e.position_embeddings(pos)[None].expand(len(tokens), -1, -1),
            "type_embed": e.token_type_embeddings(torch.zeros_like(tokens)),
        }

    # -------------------------------------------------------------- the forward

    def run(
        self,
        tokens: Tensor,
        mask: Tensor,
        *,
        abl: Optional[dict] = None,
        coef: Optional[Tensor] = None,
        beta: Optional[Tensor] = None,
        delta: Optional[dict] = None,
        embed_mix: Optional[tuple] = None,
        frozen: bool = False,
    ) -> tuple[Tensor, dict]:
        """(M [B], this run's writes) — see the module docstring. ``embed_mix`` = (α, e_tok of the corrupt
        input): the token embedding's own value becomes α e + (1 − α) e_corrupt."""
        B, T = tokens.shape
        W, R = len(self.writers), len(self.readers)
        dt = self.hf.dtype
        coef = torch.zeros(W, R, dtype=dt) if coef is None else coef
        beta = torch.zeros(W, R, dtype=dt) if beta is None else beta
        writes: dict[str, Tensor] = dict(self.embed_parts(tokens))
        if embed_mix is not None:
            a, e_k = embed_mix
            writes["embed"] = a * writes["embed"] + (1 - a) * e_k
        biases: list[tuple[str, Tensor]] = []  # (after which writer, bias) — attention output biases

        def m_(w: str, r: str, with_beta: bool = True) -> Tensor:
            i, j = self.wi[w], self.ri[r]
            out = writes[w]
            if abl is not None:
                out = out + coef[i, j] * (abl[w] - writes[w])
            elif bool(coef[i, j] != 0) or coef.requires_grad:
                out = out + coef[i, j] * (0 - writes[w])  # zero ablation
            if delta is not None and with_beta:
                out = out + beta[i, j] * delta[w]
            return out

        def stream(r: str, with_beta: bool = True, sig: bool = False):
            """r's input (post-norm: the replayed chain; pre-norm: the sum, before r's own norm). With
            ``frozen`` (post-norm) the chain's σ come from the replay without r's beta terms."""
            lr = self._layer(r) if r not in ("unembed", "final") else self.L
            if not self.post:
                x = sum(m_(w, r, with_beta) for w in writes if self.sees(w, r))
                for after, b in biases:
                    if self.sees(after, r):
                        x = x + b
                return x
            fz = frozen and with_beta
            emb = self.hf.bert.embeddings.LayerNorm
            V0 = sum(m_(w, r, False) for w in ("embed", "pos_embed", "type_embed"))
            V = sum(m_(w, r, with_beta) for w in ("embed", "pos_embed", "type_embed"))
            V, V0 = self.norm(V, emb, V0 if fz else None), self.norm(V0, emb)
            for l in range(lr + (1 if r.endswith("mlp.in") else 0)):
                _, bO = self.out_proj(l)
                V0 = V0 + sum(m_(f"L{l}.H{h}", r, False) for h in range(self.H)) + bO
                V = V + sum(m_(f"L{l}.H{h}", r, with_beta) for h in range(self.H)) + bO
                V, V0 = self.norm(V, self.ln1(l), V0 if fz else None), self.norm(V0, self.ln1(l))
                if l == lr:  # the MLP of this layer reads here
                    return V
                V0 = V0 + m_(f"L{l}.mlp", r, False)
                V = V + m_(f"L{l}.mlp", r, with_beta)
                V, V0 = self.norm(V, self.ln2(l), V0 if fz else None), self.norm(V0, self.ln2(l))
            return V

        def own_norm(r: str, mod) -> Tensor:
            """r's own norm (pre-norm) on its input, σ held against r's beta terms when ``frozen``."""
            return self.norm(stream(r), mod, stream(r, False) if frozen else None)

        allowed = mask[:, None, None, :].bool()
        if not self.post:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(self.L):
            ins = {}
            for which, n in (("q", self.H), ("k", self.G), ("v", self.G)):
                vs = []
                for h in range(n):
                    r = f"L{l}.attn.{which}[H{h}]"
                    x = stream(r) if self.post else own_norm(r, self.ln1(l))
                    vs.append(self.proj(l, x, which, h))
                ins[which] = torch.stack(vs, 1)  # [B, n, T, dh]
            q, k = self.rotate(ins["q"], ins["k"], T)
            rep = self.H // self.G
            k, v = k.repeat_interleave(rep, 1), ins["v"].repeat_interleave(rep, 1)
            s = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
            sdt = torch.float32 if self.family == "llama" else s.dtype
            s = s.to(sdt).masked_fill(~allowed, torch.finfo(sdt).min)
            A = torch.softmax(s, -1).to(q.dtype)
            z = A @ v  # [B, H, T, dh]
            WO, bO = self.out_proj(l)
            for h in range(self.H):
                writes[f"L{l}.H{h}"] = z[:, h] @ WO[h]
            if bO is not None:
                biases.append((f"L{l}.H{self.H - 1}", bO))
            r = f"L{l}.mlp.in"
            writes[f"L{l}.mlp"] = self.mlp(l, stream(r) if self.post else own_norm(r, self.ln2(l)))
        r = self.readers[-1]
        return self.metric(stream(r) if self.post else own_norm(r, self.ln_final()), mask), writes

    def metric(self, y: Tensor, mask: Tensor) -> Tensor:
        """The metric from the final hidden state (post-norm) or the final norm's output (decoders)."""
        if self.post:
            m = mask.to(y.dtype)
            pooled = (y * m[..., None]).sum(1) / m.sum(1, keepdim=True)
            return pooled @ self.direction.to(y.dtype)
        last = mask.sum(1) - 1
        y = y[torch.arange(len(y)), last]
        logits = self.hf.lm_head(y)
        a, w = (self.tok(t, add_special_tokens=False)["input_ids"][0] for t in (A_TOK, W_TOK))
        return logits[:, a] - logits[:, w]

    # -------------------------------------------------------------- the quantities interp computes

    def edge_matrix(self) -> Tensor:
        return torch.tensor([[self.sees(w, r) for r in self.readers] for w in self.writers])

    def per_edge(self, S: Tensor) -> dict[str, float]:
        """{edge label: value} from a [W, R] matrix."""
        return {
            f"{w}→{r}": float(S[i, j])
            for j, r in enumerate(self.readers)
            for i, w in enumerate(self.writers)
            if self.sees(w, r)
        }
