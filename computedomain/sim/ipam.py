"""Pod IP allocation for the pods the simulator runs itself.

kwok assigns pod IPs only to the pods it turns Running; pods with DRA claims are left to the
simulator (the project's pod-ready stage skips them), so it needs its own address pool. It uses
a range disjoint from kwok's pod CIDR so the two can never hand out the same address.
"""

from __future__ import annotations

import ipaddress

DEFAULT_POD_CIDR = "10.200.0.0/16"


class AddressPoolExhaustedError(RuntimeError):
    """Every usable address of the pool is in use."""


class PodIPAllocator:
    """Hands out addresses round-robin, one per owner (a pod UID).

    Freed addresses go to the back of the line: the cursor moves on rather than reusing the
    address just released, so a restarted daemon always shows a *different* IP, and a stale
    entry in another domain never points at a fresh pod (upstream #1447).
    """

    def __init__(self, cidr: str = DEFAULT_POD_CIDR) -> None:
        network = ipaddress.ip_network(cidr)
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"only IPv4 pod ranges are supported, got {cidr!r}")
        if network.num_addresses < 4:
            raise ValueError(f"pod range {cidr!r} is too small")
        self._first = int(network.network_address) + 1
        self._size = network.num_addresses - 2  # no network or broadcast address
        self._cursor = 0
        self._by_owner: dict[str, int] = {}
        self._in_use: set[int] = set()

    def __len__(self) -> int:
        return len(self._in_use)

    def __contains__(self, address: str) -> bool:
        return int(ipaddress.IPv4Address(address)) in self._in_use

    def get(self, owner: str) -> str | None:
        value = self._by_owner.get(owner)
        return None if value is None else str(ipaddress.IPv4Address(value))

    def allocate(self, owner: str) -> str:
        """The owner's address; a new one if it has none yet."""
        current = self.get(owner)
        if current is not None:
            return current
        return self._take(owner)

    def reallocate(self, owner: str) -> str:
        """A fresh address for the owner (a restarted pod), different from its old one."""
        old = self._by_owner.pop(owner, None)
        address = self._take(owner)
        if old is not None:
            self._in_use.discard(old)
        return address

    def adopt(self, owner: str, address: str) -> bool:
        """Record an address the pod already carries (the simulator restarted).

        Returns False, leaving the pool unchanged, when the address lies outside the pool or
        already belongs to another owner.
        """
        value = int(ipaddress.IPv4Address(address))
        if not self._first <= value < self._first + self._size:
            return False
        if value in self._in_use and self._by_owner.get(owner) != value:
            return False
        previous = self._by_owner.get(owner)
        if previous is not None and previous != value:
            self._in_use.discard(previous)
        self._by_owner[owner] = value
        self._in_use.add(value)
        return True

    def release(self, owner: str) -> None:
        value = self._by_owner.pop(owner, None)
        if value is not None:
            self._in_use.discard(value)

    def _take(self, owner: str) -> str:
        for _ in range(self._size):
            value = self._first + self._cursor
            self._cursor = (self._cursor + 1) % self._size
            if value not in self._in_use:
                self._in_use.add(value)
                self._by_owner[owner] = value
                return str(ipaddress.IPv4Address(value))
        raise AddressPoolExhaustedError(f"all {self._size} pod addresses are in use")
