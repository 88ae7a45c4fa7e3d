"""Link proxies between each process of a running local cluster and its PostgreSQL store.

:func:`insert_store_proxies` puts a :class:`~chaos.link_proxy.LinkProxy` in front of the store for every controller
and broker, one each (``links[(role, id)]``): the process's settings file names its proxy's port in
``metadata_store`` (only the host and port of the URL change), and the process is restarted, one after the other,
controllers first; the function returns once every broker is registered again and unfenced. A fault on one link then
cuts or slows one process's store and no other's: the active controller's lease renewal hangs while the standby's
does not, or one broker's metadata reads stall while the others go on. The settings files keep naming the proxies,
so a process restarted later (a crash, a kill) comes back behind its own.

Invariants: the proxies' target is the store's own address, so a server stopped and started again on the same port
(``postgres_restart``) is reached again by every new connection; a failure on the way closes every proxy made so
far; the run's own readers (the checker's log tail) read the store directly, never through a proxy. While the
cluster runs, :meth:`StoreLinks.close` cuts every process off from the store: stop the cluster first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from chaos.link_proxy import LinkProxy
from chaos.links import wait_brokers
from orchestrator.local import cluster as lc
from orchestrator.local.settings_files import read_toml, with_overrides, write_toml
from orchestrator.local.state import LocalClusterState, ProcessInfo

_LOOPBACK = "127.0.0.1"
_STOP_TIMEOUT_S = 10.0


@dataclass
class StoreLinks:
    links: dict[tuple[str, int], LinkProxy] = field(default_factory=dict)  # (role, id) -> that process's link

    def all(self) -> list[LinkProxy]:
        return list(self.links.values())

    def close(self) -> None:
        for link in self.all():
            link.close()


def through(url: str, port: int) -> str:
    """``url`` (a ``postgresql://`` URL) with its host and port replaced by 127.0.0.1 and ``port``; the user,
    database and parameters are kept."""
    parts = urlsplit(url)
    userinfo, at, _hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@{_LOOPBACK}:{port}" if at else f"{_LOOPBACK}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def store_address(url: str) -> tuple[str, int]:
    """The host and port a ``postgresql://`` URL names (libpq's default port when it names none)."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError("the store URL names no host: a link proxy needs the server's TCP address")
    return parts.hostname, parts.port or 5432


def insert_store_proxies(directory: Path, *, timeout_s: float = 30.0) -> StoreLinks:
    """Put a store link proxy in front of every process of the local cluster in ``directory`` (see the module
    docstring); its store must be PostgreSQL. Returns once every process runs again behind its proxy."""
    state = LocalClusterState.load(directory.resolve())
    if not state.store:
        raise ValueError("the cluster keeps its metadata in SQLite: there is no store link to put a proxy on")
    host, port = store_address(state.store)
    links = StoreLinks()
    try:
        for p in sorted(state.processes, key=lambda p: (p.role != "controller", p.id)):
            if p.role not in ("controller", "broker"):
                continue
            link = LinkProxy(host, port, name=f"{p.role}-{p.id}-to-store")
            links.links[(p.role, p.id)] = link
            _route_through(p, link.port)
            lc.stop_process(p, timeout_s=_STOP_TIMEOUT_S)
            lc.restart(Path(state.dir), p.role, p.id, timeout_s=timeout_s)
        brokers = {p.id for p in state.processes if p.role == "broker"}
        wait_brokers(
            state, lambda ports: set(ports) == brokers, f"unfenced behind their store proxies: {brokers}", timeout_s
        )
    except BaseException:
        links.close()
        raise
    return links


def _route_through(p: ProcessInfo, port: int) -> None:
    assert p.config is not None, f"{p.role} {p.id} has no settings file"
    path = Path(p.config)
    tables = read_toml(path)
    url = tables[p.role]["metadata_store"]
    write_toml(path, with_overrides(tables, {p.role: {"metadata_store": through(url, port)}}))
