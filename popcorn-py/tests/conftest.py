"""The ``device`` fixture: every test that takes it runs on the CPU and on the first GPU
(skipped without one, failed under ``POPCORN_REQUIRE_GPU=1``)."""

import pytest

from helpers import gpu_or_skip


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """Each device: the CPU, and the first GPU where there is one."""
    if request.param == "cuda":
        gpu_or_skip()
    return request.param
