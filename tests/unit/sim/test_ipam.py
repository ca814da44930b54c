import pytest

from computedomain.sim.ipam import AddressPoolExhaustedError, PodIPAllocator


def test_allocate_is_stable_per_owner_and_unique_across_owners() -> None:
    pool = PodIPAllocator("10.200.0.0/16")
    first = pool.allocate("pod-a")
    assert first == "10.200.0.1"
    assert pool.allocate("pod-a") == first
    assert pool.allocate("pod-b") == "10.200.0.2"
    assert len(pool) == 2


def test_reallocate_gives_a_different_address_and_frees_the_old_one() -> None:
    pool = PodIPAllocator("10.200.0.0/29")  # 6 usable addresses
    old = pool.allocate("daemon")
    new = pool.reallocate("daemon")
    assert new != old
    assert old not in pool
    assert pool.get("daemon") == new


def test_released_addresses_are_reused_only_after_the_cursor_wraps() -> None:
    pool = PodIPAllocator("10.200.0.0/29")
    addresses = [pool.allocate(f"p{i}") for i in range(3)]
    pool.release("p0")
    assert pool.allocate("p3") == "10.200.0.4"
    for i in range(4, 6):
        pool.allocate(f"p{i}")
    # every address but p0's old one is taken: the wrap finds it
    assert pool.allocate("p6") == addresses[0]
    with pytest.raises(AddressPoolExhaustedError):
        pool.allocate("p7")


def test_adopt_records_an_existing_address_but_refuses_foreign_or_taken_ones() -> None:
    pool = PodIPAllocator("10.200.0.0/16")
    assert pool.adopt("a", "10.200.3.4")
    assert pool.get("a") == "10.200.3.4"
    assert not pool.adopt("b", "10.200.3.4")
    assert not pool.adopt("b", "10.128.0.9")
    assert pool.get("b") is None


def test_ipv6_and_tiny_ranges_are_rejected() -> None:
    with pytest.raises(ValueError, match="IPv4"):
        PodIPAllocator("fd00::/64")
    with pytest.raises(ValueError, match="too small"):
        PodIPAllocator("10.0.0.0/31")
