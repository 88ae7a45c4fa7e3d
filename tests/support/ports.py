"""Ports a test must name before the server that will listen on them starts (PostgreSQL's ``-p``, Spark's
``--port``), and ports a test needs nobody to listen on.

Everything that can bind port 0 itself does (the local cluster's brokers and embedded S3, moto's server): no port is
chosen in advance there. Where a number must be chosen first, the gap between choosing it and binding it is a
race with every other program of the machine. Three things narrow it:

* **Below the ephemeral range.** A port the kernel hands out for ``bind(("127.0.0.1", 0))`` or as the source port
  of an outgoing connection comes from ``net.ipv4.ip_local_port_range`` (32768-60999 by default). A port chosen
  below that range is never handed out that way, so the busy programs of the machine (other test sessions, their
  clusters, their clients' connections) cannot take it between choice and bind.
* **Apart from the local cluster's controllers.** They choose their ports from 20000 up to the ephemeral range
  (:mod:`orchestrator.local.ports`, a controller's address must survive its restarts); the tests choose from
  ``[LOW, HIGH)``, 10000-19999, so a controller of one test's cluster never takes the port another test chose for
  its PostgreSQL or Spark server before that server bound it.
* **One slice per pytest-xdist worker.** The tests' range is cut into one slice per worker
  (``PYTEST_XDIST_WORKER`` / ``PYTEST_XDIST_WORKER_COUNT``), so two workers of one run never choose the same port.
  Within its slice a process starts at an offset drawn from its pid, so two runs side by side rarely meet either.

A chosen port is still checked by binding it (without ``SO_REUSEADDR``, so a port with connections lingering in
TIME_WAIT is passed over too); a server that loses a port anyway (another run's worker in the same slice) is
retried by its caller, as :mod:`tests.support.postgres_server` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.local.ports import LOW as CONTROLLERS_LOW
from orchestrator.local.ports import ephemeral_low, first_bindable

LOW = 10_000  # the tests' ports: [LOW, HIGH), below the local cluster controllers' range and the ephemeral one
HIGH = CONTROLLERS_LOW  # a controller's port is chosen from [CONTROLLERS_LOW, ephemeral range): never one of these


class NoFreePort(RuntimeError):
    """Every port of this worker's slice was taken."""


@dataclass(frozen=True, slots=True)
class PortSlice:
    """The ports ``[first, first + size)``, this worker's to choose from."""

    first: int
    size: int

    def candidates(self, start: int) -> list[int]:
        """Every port of the slice once, from ``start``'s place in it, wrapping around."""
        offset = start % self.size
        return [self.first + (offset + i) % self.size for i in range(self.size)]


def worker_slice(worker: str | None, workers: int, *, ephemeral_low: int) -> PortSlice:
    """The slice of ``[LOW, min(HIGH, ephemeral_low))`` that worker ``gwN`` of ``workers`` owns (the whole of it
    without xdist). Pure, so the split is tested without a network."""
    index = int(worker[2:]) if worker and worker.startswith("gw") and worker[2:].isdigit() else 0
    count = max(workers, index + 1, 1)
    size = (min(HIGH, ephemeral_low) - LOW) // count
    if size < 1:
        raise NoFreePort(f"no ports below the ephemeral range ({ephemeral_low}) for {count} workers")
    return PortSlice(LOW + index * size, size)


def this_workers_slice() -> PortSlice:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return worker_slice(os.environ.get("PYTEST_XDIST_WORKER"), workers, ephemeral_low=max(ephemeral_low(), LOW + 1))


_next_offset = os.getpid() * 7919  # a prime stride: neighbouring pids start far apart in the slice


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's slice that nothing is bound to on ``host`` right now (see the module docstring).
    Successive calls in one process move on through the slice, so two servers started one after the other are not
    handed the same number before the first has bound it."""
    global _next_offset
    ports = this_workers_slice()
    candidates = ports.candidates(_next_offset)
    port = first_bindable(candidates, host)
    if port is None:
        raise NoFreePort(f"every port from {candidates[0]} around to {candidates[-1]} is taken on {host}")
    _next_offset = port + 1 - ports.first
    return port
