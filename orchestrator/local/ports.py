"""The port a local controller keeps for its life: chosen below the kernel's ephemeral range.

A controller's address is in every broker's and client's bootstrap list, so a controller restarted after a crash
must come back on the same port (:mod:`.restart`). A port the kernel hands out for a bind to port 0 lies in its
ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default), the range it also takes the source port
of every outgoing connection from: while the controller is down, any connection of the machine may be given its
port, and then it can never start again. A port below that range is never handed out that way. Brokers, the
embedded S3 and every metrics endpoint still bind port 0 (a broker whose port was taken comes back on a new one).

Invariants: a port returned lies in ``[LOW, first ephemeral port)`` and was free when chosen (bound without
``SO_REUSEADDR``, so one with connections lingering in TIME_WAIT is passed over too); successive calls of one
process move on through the range from a place drawn from its pid, so processes choosing at once rarely meet. The
gap between the choice and the controller's own bind remains: a controller that loses it exits with EADDRINUSE and
is given another port (:mod:`.startup`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

LOW = 20_000  # below the ports of well-known services people run on a developer's machine (e.g. 5432, 8080, 9092)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32_768


class NoStablePort(RuntimeError):
    """Every port below the ephemeral range was taken."""


def ephemeral_low(range_file: Path = EPHEMERAL_RANGE) -> int:
    """The first port of the kernel's ephemeral range (Linux), else the IANA default."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def candidates(start: int, first: int, end: int) -> list[int]:
    """Every port of ``[first, end)`` once, from ``start``'s place in it, wrapping around (pure)."""
    size = end - first
    if size < 1:
        raise NoStablePort(f"no ports between {first} and {end}")
    return [first + (start + i) % size for i in range(size)]


_next = os.getpid() * 7919  # a prime stride: neighbouring pids start far apart in the range


def first_bindable(ports: Iterable[int], host: str = "127.0.0.1") -> int | None:
    """The first of ``ports`` nothing is bound to on ``host`` right now (a bind without ``SO_REUSEADDR`` succeeds,
    so a port with connections lingering in TIME_WAIT is passed over too); None when every one is taken."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    return None


def stable_port(host: str = "127.0.0.1") -> int:
    """A free port of ``host`` below the ephemeral range (see the module docstring)."""
    global _next
    ports = candidates(_next, LOW, max(ephemeral_low(), LOW + 1))
    port = first_bindable(ports, host)
    if port is None:
        raise NoStablePort(f"every port from {ports[0]} around to {ports[-1]} is taken on {host}")
    _next = port + 1 - LOW
    return port
