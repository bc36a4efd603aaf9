"""Independent references for the stream tests, read off a separate Hugging Face model.

Nothing here uses interp.stream: the tensors come from forward hooks on the HF modules of a
freshly built copy of the tiny model (same seed, same weights), and the frozen-norm maps are
written out from the norm modules' own parameters. The tests compare trace decompositions
against these.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tiny_models import hooked_forward, tiny_hf_model

#: Module paths, relative to one HF layer, of the tensors the tests need, per family.
SPEC = {
    "gpt2": dict(
        base="transformer",
        layers="h",
        q_in="attn.c_attn",
        attn_out="attn.c_proj",
        mlp_in="mlp.c_fc",
        mlp_out="mlp",
        down="mlp.c_proj",
        ln1="ln_1",
        ln2="ln_2",
        final="ln_f",
        kind="layernorm",
        post=False,
    ),
    "llama": dict(
        base="model",
        layers="layers",
        q_in="self_attn.q_proj",
        attn_out="self_attn.o_proj",
        mlp_in="mlp.up_proj",
        mlp_out="mlp",
        down="mlp.down_proj",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        final="norm",
        kind="rmsnorm",
        post=False,
    ),
    "neox": dict(
        base="gpt_neox",
        layers="layers",
        q_in="attention.query_key_value",
        attn_out="attention.dense",
        mlp_in="mlp.dense_h_to_4h",
        mlp_out="mlp",
        down="mlp.dense_4h_to_h",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        final="final_layer_norm",
        kind="layernorm",
        post=False,
    ),
    "bert": dict(
        base="bert",
        layers="encoder.layer",
        q_in="attention.self.query",
        attn_out="attention.output.dense",
        mlp_in="intermediate.dense",
        mlp_out="output.dense",
        down="output.dense",
        ln1="attention.output.LayerNorm",
        ln2="output.LayerNorm",
        final=None,
        emb_ln="embeddings.LayerNorm",
        kind="layernorm",
        post=True,
    ),
}


def _rmsnorm_in_input_dtype(self, hidden_states: Tensor) -> Tensor:
    """LlamaRMSNorm without its float32 round trip (HF computes it in fp32 even for fp64)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def full_precision_norms(hf: torch.nn.Module) -> torch.nn.Module:
    """Patch every LlamaRMSNorm of ``hf`` to compute in its input dtype (for fp64 tests)."""
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rmsnorm_in_input_dtype, mod)
    return hf


def variant_hf(family: str, *, seed: int = 0, dtype=torch.float32, **overrides) -> torch.nn.Module:
    """A tiny HF model of ``family`` with config ``overrides`` (e.g. Llama ``attention_bias``),
    randomised like tiny_models.tiny_hf_model but with larger biases (0.3) so they matter."""
    return tiny_hf_model(family, seed=seed, dtype=dtype, bias_scale=0.3, **overrides)


def _get(root: torch.nn.Module, path: str) -> torch.nn.Module:
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


@dataclass
class Norm:
    """A norm module's parameters, to apply its frozen-scale linear map independently."""

    weight: Tensor
    bias: Tensor | None
    eps: float
    kind: str

    @classmethod
    def of(cls, mod: torch.nn.Module, kind: str) -> "Norm":
        eps = getattr(mod, "eps", None)
        if eps is None:
            eps = getattr(mod, "variance_epsilon")
        b = getattr(mod, "bias", None)
        return cls(mod.weight.detach(), None if b is None else b.detach(), float(eps), kind)

    def sigma(self, x: Tensor) -> Tensor:
        x = x.double()
        if self.kind == "layernorm":
            return (x.var(-1, unbiased=False, keepdim=True) + self.eps).sqrt()
        return (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()

    def linear(self, v: Tensor, x: Tensor) -> Tensor:
        """γ ⊙ centre(v) / σ(x), in float64: the norm's map on a term v with σ from its input x."""
        v = v.double()
        if self.kind == "layernorm":
            v = v - v.mean(-1, keepdim=True)
        return v / self.sigma(x) * self.weight.double()


@dataclass
class Reference:
    """Tensors of one HF forward pass, keyed by name; per-layer lists indexed by layer."""

    family: str
    n_layers: int
    hidden_states: list[Tensor]
    logits: Tensor | None
    layer: dict[str, list[Tensor]] = field(default_factory=dict)
    glob: dict[str, Tensor] = field(default_factory=dict)
    norms: dict[str, Norm] = field(default_factory=dict)
    hf: torch.nn.Module | None = None
    spec: dict = field(default_factory=dict)

    def layer_module(self, l: int, key: str) -> torch.nn.Module:
        base = _get(self.hf, self.spec["base"])
        return _get(_get(base, self.spec["layers"])[l], self.spec[key])

    # -- the model's own tensor at each read / resid point ---------------------------------
    def at(self, label: str) -> Tensor:
        L = self.n_layers
        post = self.spec["post"]
        if label.startswith("blocks."):
            _, l, hook = label.split(".")
            l = int(l)
            if hook == "hook_resid_pre":
                return self.hidden_states[l]
            if hook == "hook_resid_mid":
                return self.layer["ln1_out" if post else "ln2_in"][l]
            if hook == "hook_resid_post":
                if l < L - 1 or post:
                    return self.hidden_states[l + 1]
                return self.glob["final_in"]  # HF's last hidden state is after the final norm
        if label in ("unembed", "final"):
            return self.hidden_states[L]
        l = int(label[1 : label.index(".")])
        if ".attn." in label:
            return self.layer["q_in"][l]
        if label.endswith(".mlp.in"):
            return self.layer["mlp_in"][l]
        raise KeyError(label)

    # -- norms that a write of layer l passes on its way to a point -------------------------
    def carry(self, v: Tensor, *, layer: int, sub: str, point: str) -> Tensor:
        """Map a raw write ``v`` (of ``sub`` in 'attn'|'mlp'|'embed' at ``layer``) to ``point``.

        Post-norm: every N1/N2 between the write and the point, each with its own frozen σ;
        pre-norm: only the read's own pre-norm (ln1/ln2/final), if the point is a read.
        """
        if self.spec["post"]:
            steps = []
            if sub == "embed":
                steps.append(("emb_ln", -1))
                start, first = 0, "ln1"
            else:
                start, first = layer, "ln1" if sub == "attn" else "ln2"
            # the point's position in the sequence of norms
            end = _post_norm_end(point, self.n_layers)
            seq = [(n, l) for l in range(self.n_layers) for n in ("ln1", "ln2")]
            i0 = seq.index((first, start))
            steps += [s for s in seq[i0:] if seq.index(s) < end]
            out = v.double()
            for name, l in steps:
                if name == "emb_ln":
                    out = self.norms["emb_ln"].linear(out, self.glob["emb_ln_in"])
                else:
                    out = self.norms[f"{name}.{l}"].linear(out, self.layer[f"{name}_in"][l])
            return out
        if point in ("unembed", "final"):
            return self.norms["final"].linear(v, self.glob["final_in"])
        if point.startswith("blocks."):
            return v.double()
        l = int(point[1 : point.index(".")])
        which = "ln1" if ".attn." in point else "ln2"
        return self.norms[f"{which}.{l}"].linear(v, self.layer[f"{which}_in"][l])


def _post_norm_end(point: str, n_layers: int) -> int:
    """How many of the post-norms (ln1.0, ln2.0, ln1.1, ...) have been applied at ``point``."""
    if point == "final":
        return 2 * n_layers
    if point.startswith("blocks."):
        _, l, hook = point.split(".")
        l = int(l)
        return 2 * l + {"hook_resid_pre": 0, "hook_resid_mid": 1, "hook_resid_post": 2}[hook]
    l = int(point[1 : point.index(".")])
    return 2 * l + (0 if ".attn." in point else 1)


def hf_reference(
    family: str,
    tokens: Tensor,
    attention_mask: Tensor,
    *,
    dtype=torch.float32,
    exact_norms: bool = False,
    hf: torch.nn.Module | None = None,
) -> Reference:
    """Run a separately built HF copy of the tiny ``family`` model (or ``hf``) and record its tensors."""
    if hf is None:
        hf = tiny_hf_model(family, dtype=dtype)
    if exact_norms:
        full_precision_norms(hf)
    spec = SPEC[family]
    base = _get(hf, spec["base"])
    layers = _get(base, spec["layers"])
    L = len(layers)
    rec: dict[str, list] = {
        k: [None] * L
        for k in (
            "q_in",
            "attn_out",
            "attn_z",
            "mlp_in",
            "mlp_out",
            "down_in",
            "ln1_in",
            "ln1_out",
            "ln2_in",
            "ln2_out",
        )
    }
    glob: dict[str, Tensor] = {}
    handles = []

    def keep(store, key, idx, what):
        def hook(mod, args, kwargs, out):
            x = args[0] if args else next(iter(kwargs.values()))
            val = x if what == "in" else (out[0] if isinstance(out, tuple) else out)
            if idx is None:
                store[key] = val.detach()
            else:
                store[key][idx] = val.detach()

        return hook

    for l, layer in enumerate(layers):
        for key, path, what in [
            ("q_in", "q_in", "in"),
            ("attn_out", "attn_out", "out"),
            ("attn_z", "attn_out", "in"),
            ("mlp_in", "mlp_in", "in"),
            ("mlp_out", "mlp_out", "out"),
            ("down_in", "down", "in"),
            ("ln1_in", "ln1", "in"),
            ("ln1_out", "ln1", "out"),
            ("ln2_in", "ln2", "in"),
            ("ln2_out", "ln2", "out"),
        ]:
            handles.append(_get(layer, spec[path]).register_forward_hook(keep(rec, key, l, what), with_kwargs=True))
    norms = {}
    for l, layer in enumerate(layers):
        norms[f"ln1.{l}"] = Norm.of(_get(layer, spec["ln1"]), spec["kind"])
        norms[f"ln2.{l}"] = Norm.of(_get(layer, spec["ln2"]), spec["kind"])
    if spec["final"]:
        fin = _get(base, spec["final"])
        norms["final"] = Norm.of(fin, spec["kind"])
        handles.append(fin.register_forward_hook(keep(glob, "final_in", None, "in"), with_kwargs=True))
        handles.append(fin.register_forward_hook(keep(glob, "final_out", None, "out"), with_kwargs=True))
    if spec["post"]:
        eln = _get(base, spec["emb_ln"])
        norms["emb_ln"] = Norm.of(eln, spec["kind"])
        handles.append(eln.register_forward_hook(keep(glob, "emb_ln_in", None, "in"), with_kwargs=True))
    out = hooked_forward(hf, handles, input_ids=tokens, attention_mask=attention_mask, output_hidden_states=True)
    logits = getattr(out, "logits", None)
    return Reference(
        family=family,
        n_layers=L,
        hidden_states=[h.detach() for h in out.hidden_states],
        logits=None if spec["post"] else logits.detach(),
        layer=rec,
        glob=glob,
        norms=norms,
        hf=hf,
        spec=spec,
    )


def head_writes(ref: Reference, l: int, n_heads: int) -> Tensor:
    """Each head's write z_h W_O^h at layer l, [n_heads, batch, pos, d_model], from HF's own
    output projection applied to z with the other heads zeroed (its bias subtracted)."""
    proj = ref.layer_module(l, "attn_out")
    z = ref.layer["attn_z"][l]  # [b, p, n_heads * d_head], heads concatenated
    dh = z.shape[-1] // n_heads
    with torch.no_grad():
        zero = proj(torch.zeros_like(z))
        out = []
        for h in range(n_heads):
            zh = torch.zeros_like(z)
            zh[..., h * dh : (h + 1) * dh] = z[..., h * dh : (h + 1) * dh]
            out.append(proj(zh) - zero)
    return torch.stack(out)


def output_bias(mod: torch.nn.Module, d_in: int, like: Tensor) -> Tensor:
    """A linear layer's bias as it adds to the stream (zero if it has none)."""
    with torch.no_grad():
        return mod(torch.zeros(1, d_in, dtype=like.dtype))[0]


def neuron_rows(ref: Reference, l: int) -> Tensor:
    """Rows of the MLP's output projection [d_mlp, d_model] (its bias removed), from HF's module."""
    down = ref.layer_module(l, "down")
    a = ref.layer["down_in"][l]
    d_mlp = a.shape[-1]
    with torch.no_grad():
        eye = torch.eye(d_mlp, dtype=a.dtype)
        return down(eye) - down(torch.zeros_like(eye))


def rel(a: Tensor, b: Tensor, mask: Tensor) -> float:
    """max |a − b| / max |b| over the real positions (mask [batch, pos])."""
    m = mask.bool()[..., None]  # [batch, pos, 1] broadcasts against [..., batch, pos, d]
    a, b = a.detach().double(), b.detach().double()
    gap = ((a - b).abs() * m).amax()
    scale = (b.abs() * m).amax()
    return float(gap / scale) if scale > 0 else float(gap)
