"""One definition of each public name: a name exported by several interp packages is one object re-exported (before,
load_model / model_from_hf, Node and SITES each had two different definitions under one name)."""

from __future__ import annotations

import importlib
import pkgutil

import interp


#: Known, not yet renamed: none (the discovery scorer's ablations are interp.groundtruth.RANKING_ABLATIONS, the toys'
#: (logits, patterns) probe interp.toy.logits_and_patterns; their old names are deprecated aliases outside __all__).
KNOWN: set[str] = set()


def test_a_public_name_is_one_object_everywhere():
    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    modules = ["interp"] + [
        f"interp.{m.name}"
        for m in pkgutil.iter_modules(interp.__path__)
        if not m.name.startswith("_") and m.name not in ("cli",)
    ]
    for name in modules:
        mod = importlib.import_module(name)
        for n in getattr(mod, "__all__", []):
            obj = getattr(mod, n)
            if (
                n in seen
                and seen[n][1] is not obj
                and not isinstance(obj, (str, int, float, tuple, frozenset))
                or n in seen
                and isinstance(obj, tuple)
                and seen[n][1] != obj
            ):
                clashes.append(f"{n}: {seen[n][0]} and {name}")
            seen.setdefault(n, (name, obj))
    assert set(clashes) <= KNOWN, sorted(set(clashes) - KNOWN)
