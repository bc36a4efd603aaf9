import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import tiny_models as tiny_models_module  # noqa: E402  (the fixture below is named tiny_models)
from tiny_models import FAMILIES, tiny_model  # noqa: E402

torch.set_grad_enabled(True)


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default=os.environ.get("INTERP_TEST_DEVICE", "cpu"),
        help="device the tiny and real models are built on (cpu, cuda, cuda:1 …; env INTERP_TEST_DEVICE)",
    )


def pytest_configure(config):
    tiny_models_module.DEVICE = config.getoption("--device")


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
