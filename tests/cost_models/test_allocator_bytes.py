"""What PyTorch's allocator reports at the planner's peak: the inverse of its reserve."""

import pytest

from cost_models.memory import allocator_bytes_of_total, reserve_bytes


def test_allocator_bytes_invert_the_reserve():
    # 2 GiB framework, 10% fragmentation: a 70 GiB total holds 68 GiB in the allocator's
    # pool (reserved), of which 68 / 1.1 GiB are allocated; adding the reserve back to that
    # gives the total again.
    gib = 2**30
    allocated, reserved = allocator_bytes_of_total(total_bytes=70 * gib, framework_bytes=2 * gib,
                                                   fragmentation_fraction=0.1)
    assert reserved == 68 * gib and allocated == pytest.approx(68 / 1.1 * gib, rel=1e-12)
    total = allocated + reserve_bytes(allocated_bytes=allocated, framework_bytes=2 * gib,
                                      fragmentation_fraction=0.1)
    assert total == pytest.approx(70 * gib, rel=1e-12)
