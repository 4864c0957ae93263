"""The federation the flower target's tests train on: the small CSBM graph, Louvain over 3
clients."""

import pytest

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
