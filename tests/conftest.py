import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tiny_models import FAMILIES, tiny_model  # noqa: E402

torch.set_grad_enabled(True)


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

    return interp.load_model("smollm2-135m")


@pytest.fixture(scope="session")
def minilm():
    import interp

    return interp.load_model("minilm-l6")


@pytest.fixture(scope="session")
def gemma3():
    import interp

    return interp.load_model("gemma3-270m")
