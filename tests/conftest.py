import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import tiny_models as tiny_models_module  # noqa: E402  (the fixture below is named tiny_models)
from tiny_models import FAMILIES, MORE_FAMILIES, tiny_model  # noqa: E402

torch.set_grad_enabled(True)


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default=os.environ.get("INTERP_TEST_DEVICE", "cpu"),
        help="device the tiny and real models are built on (cpu, cuda, cuda:1 …; env INTERP_TEST_DEVICE)",
    )


def pytest_configure(config):
    tiny_models_module.DEVICE = config.getoption("--device")
    if torch.device(tiny_models_module.DEVICE).type != "cpu":
        # the suite's references are computed on the CPU (a CPU copy of the model, HF modules, materialised
        # matrices): compared there, at the same tolerances (check_device=False moves both sides to the CPU)
        import functools

        torch.testing.assert_close = functools.partial(torch.testing.assert_close, check_device=False)
        # the tests' own bridge runs (transformer-lens references, user hooks) take the module-level host token
        # tensors as HookedTransformer does: moved to the model's device (the bridge itself leaves them where they are)
        from transformer_lens.model_bridge import TransformerBridge

        forward = TransformerBridge.forward

        @functools.wraps(forward)
        def forward_on_device(self, input, *args, **kwargs):
            dev = next(self.original_model.parameters()).device
            input = input.to(dev) if isinstance(input, torch.Tensor) else input
            kwargs = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            return forward(self, input, *args, **kwargs)

        TransformerBridge.forward = forward_on_device


#: Fixtures that load a real catalog model: a test using one, directly or through another fixture, is ``real``.
REAL_FIXTURES = frozenset({"smollm2", "minilm", "gemma3"})
#: Fixtures that compile tracr programs (jax, seconds each): a test using one is ``slow``.
SLOW_FIXTURES = frozenset({"tracr_programs", "tracr_program"})


def pytest_collection_modifyitems(config, items):
    """Mark by what a test uses, so the markers cannot be forgotten: ``make test-fast`` (``-m "not real and not
    slow"``) leaves out every test that loads a catalog model or compiles a tracr program, and runs the identities
    swept over families on the four base ones (:data:`tiny_models.FAMILIES`; the capability families of
    :data:`tiny_models.MORE_FAMILIES` run in ``make test``)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & REAL_FIXTURES:
            item.add_marker(pytest.mark.real)
        callspec = getattr(item, "callspec", None)
        if used & SLOW_FIXTURES or (callspec is not None and callspec.params.get("family") in MORE_FAMILIES):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def device():
    """The suite's device (``--device``); CPU references are computed on a CPU copy and compared on the CPU."""
    return torch.device(tiny_models_module.DEVICE)


@pytest.fixture(scope="session", params=FAMILIES)
def family_model(request):
    """One tiny random model per architecture family (session-cached)."""
    return tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_models():
    return {f: tiny_model(f) for f in FAMILIES}


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    import interp

    return interp.load_model("smollm2-135m", device=tiny_models_module.DEVICE)


@pytest.fixture(scope="session")
def minilm():
    import interp

    return interp.load_model("minilm-l6", device=tiny_models_module.DEVICE)


@pytest.fixture(scope="session")
def gemma3():
    import interp

    return interp.load_model("gemma3-270m", device=tiny_models_module.DEVICE)
