import pytest
import torch

from tiny_models import tiny_hf_model, tiny_tokenizer

from interp.models import model_from_hf_unchecked as model_from_hf

from ._reference import Reference

CLEAN = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10"]
CORRUPT = ["w1 w9 w3 w4 w5", "w6 w11 w8 w9 w10"]


def direction(d: int, dtype=torch.float32) -> torch.Tensor:
    return torch.linspace(-1, 1, d, dtype=dtype)


@pytest.fixture(scope="session")
def pairs64():
    """family -> (interp model, Reference) on two copies of the same seeded float64 HF model (the bridge
    rewires the module it wraps; the reference reads an untouched one)."""
    out = {}
    for fam in ("gpt2", "llama", "neox", "bert"):
        tok = tiny_tokenizer()
        model = model_from_hf(tiny_hf_model(fam, dtype=torch.float64), tok, name=f"tiny-{fam}", dtype=torch.float64)
        hf = tiny_hf_model(fam, dtype=torch.float64)
        out[fam] = (model, Reference(hf, fam, tok, direction(hf.config.hidden_size, torch.float64)))
    return out
