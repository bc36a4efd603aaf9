"""Node and edge attribution patching are one first-order estimate: a writer's AtP is the sum of its edges' EAP.

With the gradient at the same (clean) run and Δa_w = a_w(corrupt) − a_w(clean), the chain rule through the residual
stream gives ∂M/∂a_w = Σ_{r after w} J_{w→r}ᵀ ∂M/∂x_r, so

    AtP(w) = Δa_w · ∂M/∂a_w = Σ_r (Δa_w J_{w→r}) · ∂M/∂x_r = −Σ_r EAP(w → r)

(EAP's scores are negated: positive supports the metric). The two are computed by different machinery —
:func:`interp.attribution_patch` differentiates the metric with respect to each node's activation in one backward,
:func:`interp.edge_attribution` carries each reader's gradient to the stream through its norm's Jacobian and takes
one product per pair of layers — so their agreement checks both, on every block layout the edge graph covers.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import interp
from interp.errors import CompletenessWarning
from interp.stream.internal import as_batch

from .conftest import CLEAN, CORRUPT
from .test_attribution import FAMILIES, _metric


@pytest.mark.parametrize("fam", FAMILIES)
def test_each_writers_atp_is_minus_the_sum_of_its_eap_edges(fam):
    from tiny_models import tiny_model

    model = tiny_model(fam, dtype=torch.float64)
    clean, corrupt = as_batch(model, CLEAN).tokens, as_batch(model, CORRUPT).tokens
    metric = _metric(model, fam)
    atp = interp.attribution_patch(model, clean, corrupt, metric=metric, nodes="components", direction="noise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompletenessWarning)  # one gradient: far from complete, but first order
        eap = interp.edge_attribution(model, clean, corrupt, metric=metric, method="eap", progress=False)
    per_writer = eap.to_dataframe().groupby("writer")["score"].sum()
    node = atp.to_dataframe().set_index("node")["effect"]
    assert set(node.index) == set(per_writer.index)  # every component is a writer of the edge graph
    a = torch.tensor([node[n] for n in node.index], dtype=torch.float64)
    e = torch.tensor([per_writer[n] for n in node.index], dtype=torch.float64)
    assert float(a.abs().max()) > 1e-4  # the estimates are not all zero
    torch.testing.assert_close(a, -e, rtol=1e-9, atol=1e-9 * float(a.abs().max()))
