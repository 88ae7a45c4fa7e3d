"""Link proxies between the controllers and the brokers of a running local cluster.

:func:`insert_link_proxies` puts a :class:`~chaos.link_proxy.LinkProxy` on every link a broker has:

* ``to_controller[(b, c)]``: broker ``b``'s requests to controller ``c`` (registration, heartbeats, forwarded admin
  writes): broker ``b``'s ``controllers`` list names its own proxies, one per controller, each pinned to its
  controller's id (``c@127.0.0.1:<proxy port>``), so the broker keeps going through the proxy after DescribeCluster
  told it the controller's own address;
* ``to_broker[b]``: everything sent to broker ``b`` (the controllers' DisableRemoteTopic and
  DeleteRemotePartitions, the clients' Produce and Fetch): broker ``b`` registers the proxy's port as its
  ``advertised_port``, so Metadata sends every client and controller through it.

Each broker's settings file is rewritten (only those two keys change) and the broker is restarted, one after the
other (one whose port was taken while it was down comes back on another, and its proxy is pointed there); the
function returns once every broker is registered again, at its proxy's port. The settings files keep naming the
proxies, so a broker restarted later (a crash, a kill) comes back behind them too (a ``cluster up`` that resumes the
cluster writes ``controllers`` anew but keeps ``advertised_port``: insert the proxies again).

Invariants: a failure on the way closes every proxy made so far; the controllers and the S3 link are untouched
(clients reach the controllers directly, the brokers reach S3 through whatever ``[s3] endpoint_url`` says). While
the cluster runs, :meth:`Links.close` cuts the brokers off from the controllers (nothing relays any more): stop the
cluster first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chaos.link_proxy import LinkProxy
from orchestrator.client import TieredClient
from orchestrator.errors import TieredError
from orchestrator.local import cluster as lc
from orchestrator.local.settings_files import read_toml, with_overrides, write_toml
from orchestrator.local.state import LocalClusterState, ProcessInfo

_LOOPBACK = "127.0.0.1"
_STOP_TIMEOUT_S = 10.0
_POLL_S = 0.2


@dataclass
class Links:
    to_controller: dict[tuple[int, int], LinkProxy] = field(default_factory=dict)  # (broker id, controller id)
    to_broker: dict[int, LinkProxy] = field(default_factory=dict)  # broker id

    def all(self) -> list[LinkProxy]:
        return [*self.to_controller.values(), *self.to_broker.values()]

    def close(self) -> None:
        for link in self.all():
            link.close()


def insert_link_proxies(directory: Path, *, timeout_s: float = 30.0) -> Links:
    """Put link proxies on every link of the local cluster running in ``directory`` (see the module docstring);
    returns once every broker is registered at its ``to_broker`` proxy's port, or raises after ``timeout_s``."""
    state = LocalClusterState.load(directory.resolve())
    controllers = [p for p in state.processes if p.role == "controller"]
    brokers = [p for p in state.processes if p.role == "broker"]
    links = Links()
    try:
        for b in brokers:
            links.to_broker[b.id] = LinkProxy(_LOOPBACK, b.port, name=f"to-broker-{b.id}")
            for c in controllers:
                name = f"broker-{b.id}-to-controller-{c.id}"
                links.to_controller[(b.id, c.id)] = LinkProxy(_LOOPBACK, c.port, name=name)
            # id@host:port: the broker reaches controller c at its proxy even after DescribeCluster gave c's own address
            bootstrap = ",".join(f"{c.id}@{_LOOPBACK}:{links.to_controller[(b.id, c.id)].port}" for c in controllers)
            _route_through(b, controllers=bootstrap, advertised_port=links.to_broker[b.id].port)
            lc.stop_process(b, timeout_s=_STOP_TIMEOUT_S)
            restarted = lc.restart(Path(state.dir), "broker", b.id, timeout_s=timeout_s)
            if restarted.port != b.port:  # its port was taken while it was down: it came back on another
                links.to_broker[b.id].target = (_LOOPBACK, restarted.port)
        expected = {b: link.port for b, link in links.to_broker.items()}
        _wait_registered(state, expected, timeout_s=timeout_s)
    except BaseException:
        links.close()
        raise
    return links


def _route_through(broker: ProcessInfo, *, controllers: str, advertised_port: int) -> None:
    assert broker.config is not None, f"broker {broker.id} has no settings file"
    path = Path(broker.config)
    route = {"broker": {"controllers": controllers, "advertised_port": advertised_port}}
    write_toml(path, with_overrides(read_toml(path), route))


def registered_ports(state: LocalClusterState) -> dict[int, int]:
    """Each unfenced broker's registered port, as the controllers' Metadata names it."""

    async def ask() -> dict[int, int]:
        async with TieredClient(state.bootstrap_server, timeout_s=5, security=lc.operator_security(state)) as c:
            md = await c.metadata()
        return {b["node_id"]: b["port"] for b in md["brokers"] if b["node_id"] < lc.CONTROLLER_ID_BASE}

    return asyncio.run(ask())


def _wait_registered(state: LocalClusterState, expected: dict[int, int], *, timeout_s: float) -> None:
    wait_brokers(
        state, lambda ports: ports == expected, f"registered behind their link proxies at {expected}", timeout_s
    )


def wait_brokers(state: LocalClusterState, done: Callable[[dict[int, int]], bool], what: str, timeout_s: float) -> None:
    """Until the unfenced brokers' registered ports (:func:`registered_ports`) satisfy ``done``; raises
    TimeoutError naming ``what`` and the last thing seen after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    seen: dict[int, int] | str = {}
    while time.monotonic() < deadline:
        try:
            seen = registered_ports(state)
        except (TieredError, OSError) as exc:
            seen = f"{type(exc).__name__}: {exc}"
        if isinstance(seen, dict) and done(seen):
            return
        time.sleep(_POLL_S)
    raise TimeoutError(f"brokers not {what} after {timeout_s}s; saw {seen}")
