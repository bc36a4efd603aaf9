"""Session-cached tracr programs (each compile takes seconds) and the shipped induction toy."""

import pytest

from interp.groundtruth import compile_program, program_names


@pytest.fixture(scope="session")
def tracr_programs():
    """name -> TracrProgram, compiled lazily once per session."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = compile_program(name)
        return cache[name]

    return get


@pytest.fixture(scope="session", params=program_names())
def tracr_program(request, tracr_programs):
    return tracr_programs(request.param)


@pytest.fixture(scope="session")
def toy2l():
    import interp

    return interp.load_model("toy-attn-only-2l")
