"""Refusing, by type, an analysis on a model capability it does not implement yet.

Every forward in interp runs on the engine, which implements every capability of
:class:`interp.models.ArchInfo`; a few analyses carry their own linearisation of a block (EAP's
gradients and carried writes, AtP's rebuilt scores, a kept q/k) and implement only some of them. They
call :func:`require_capabilities` first, so a model with a capability they would get wrong is refused
with a message that names the analysis, the capability and what does work — never analysed silently wrong.
"""

from __future__ import annotations

from typing import Any

from interp.errors import UnsupportedArchitectureError
from interp.models import describe_block

__all__ = ["CAPABILITIES", "require_capabilities"]

#: capability -> (its test on an ArchInfo, what it is)
CAPABILITIES: dict[str, tuple[Any, str]] = {
    "qk_norm": (lambda a: a.qk_norm, "an RMSNorm on each head's query and key (QK-norm)"),
    "qk_norm_projection": (
        lambda a: a.qk_norm and a.qk_norm_scope == "projection",
        "a QK-norm over the whole projected q and k (one σ shared by every head, OLMo 2)",
    ),
    "raw_reads": (
        lambda a: a.norm != "none" and not describe_block(a).reads_normed and not describe_block(a).normed_stream,
        "sublayers that read the raw stream (no norm in front of them: output norms only, OLMo 2)",
    ),
    "output_norms": (
        lambda a: describe_block(a).sublayer_norms,
        "a norm on each sublayer's output before it is added (sandwich or output norms)",
    ),
    "experts": (lambda a: a.n_experts > 0, "mixture-of-experts MLPs (a router's top-k experts per token)"),
    "attn_softcap": (lambda a: bool(a.attn_softcap), "soft-capped attention scores"),
    "final_softcap": (lambda a: bool(a.final_softcap), "soft-capped logits"),
}


def require_capabilities(model: Any, what: str, *unsupported: str) -> None:
    """UnsupportedArchitectureError if ``model`` has any of the ``unsupported`` capabilities (names of
    :data:`CAPABILITIES`) that the analysis ``what`` does not implement."""
    a = model.arch
    for name in unsupported:
        test, text = CAPABILITIES[name]
        if test(a):
            raise UnsupportedArchitectureError(
                f"{what}: model {model.name!r} ({a.family}) has {text}, which {what} does not implement yet; "
                "patch, effects, path_patch, trace, the logit lens and the edge analyses run exactly on it"
            )
