import numpy  # noqa: F401  (loads OpenBLAS, the pool torch's count does not reach)
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from fgl_workbench.thread_limits import intra_op


def blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_intra_op_gives_the_caller_its_counts_back():
    before, blas = torch.get_num_threads(), blas_threads()
    if not blas:
        pytest.skip("no BLAS thread pool loaded")
    with intra_op(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert blas_threads() == blas


def test_intra_op_binds_numpys_blas_too():
    """Torch's count alone left OpenBLAS one thread per core in every worker (the process
    executor lost a fifth of its speed-up to it)."""
    if not blas_threads():
        pytest.skip("no BLAS thread pool loaded")
    with threadpool_limits(limits=2, user_api="blas"):  # as on an unset two-core machine
        assert set(blas_threads()) == {2}
        with intra_op(1):
            assert set(blas_threads()) == {1}
