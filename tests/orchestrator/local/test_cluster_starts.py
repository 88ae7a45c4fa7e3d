"""``cluster up`` starts every time: each process binds port 0 itself and publishes the address it got, so no port
chosen in advance can be taken by someone else before it is bound.

The churn thread below plays the other programs of a busy machine: it keeps opening listening sockets on ports the
kernel picks (``bind`` to port 0, as every server and test here does), holding the last few thousand. A start that
picked a free port, let it go and handed the number to a process finds it taken now and then (EADDRINUSE): about
one port in ten with this churn.

Soak-sized (:mod:`tests.support.soak`): ``make soak`` starts 50 clusters, ``make test`` 15. Each cluster binds at
least two ports (its controller's and its broker's; every tenth also its embedded S3's), so 15 clusters bind at
least 32: with the old pick-then-bind start such a run passes with probability at most 0.9 ** 32, about 3 %. The
small run still catches that defect 97 times in 100, and still starts two clusters on the embedded S3."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from orchestrator.local import cluster as lc
from orchestrator.local.state import STATE_FILE
from tests.support.live_cluster import fast_up
from tests.support.soak import sized

pytestmark = [pytest.mark.integration, pytest.mark.soak, pytest.mark.timeout(900)]

CLUSTERS = sized(15, soak=50)
HELD = 3000  # listening sockets held at once, oldest closed first
PAUSE_S = 0.0005  # between two binds: a few thousand per second, without taking a whole core


class PortChurn:
    """Binds loopback listening sockets on kernel-chosen ports, holding the last ``held`` of them."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.bound = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="port-churn", daemon=True)

    def __enter__(self) -> PortChurn:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        held: list[socket.socket] = []
        try:
            while not self._stop.is_set():
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", 0))
                    s.listen()
                except OSError:
                    s.close()
                else:
                    held.append(s)
                    self.bound += 1
                if len(held) > self.held:
                    held.pop(0).close()
                time.sleep(PAUSE_S)
        finally:
            for s in held:
                s.close()


def test_many_clusters_in_a_row_start_while_other_programs_bind_ports(tmp_path, moto_endpoint, s3_client):
    s3_client.create_bucket(Bucket="starts")
    failures: list[str] = []
    with PortChurn(HELD) as churn:
        for i in range(CLUSTERS):
            d = tmp_path / f"c{i}"
            # every tenth on the embedded S3, whose server process binds its own port too
            endpoint = None if i % 10 == 0 else moto_endpoint
            try:
                state = fast_up(
                    d,
                    brokers=1,
                    controllers=1,
                    s3_endpoint=endpoint,
                    bucket=None if endpoint is None else "starts",
                    timeout_s=60,
                )
                ports = [p.port for p in state.processes]
                assert all(port > 0 for port in ports) and len(set(ports)) == len(ports)
            except Exception as exc:  # collect them all: the count is what this test is about
                failures.append(f"cluster {i}: {type(exc).__name__}: {exc}")
            finally:
                if (d / STATE_FILE).exists():
                    lc.down(d, purge=True, timeout_s=10)
        bound = churn.bound
    assert bound > CLUSTERS * 100, f"the churn bound only {bound} ports"
    assert failures == [], "\n".join(failures)
