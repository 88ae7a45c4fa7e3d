"""A TCP gate in front of a server, for outages the client cannot tell from the real thing.

:class:`TcpGate` is the fault suite's :class:`~chaos.link_proxy.LinkProxy` with two positions: :meth:`TcpGate.shut`
takes the server away (every relayed connection is reset, and every new one is accepted and reset at once, which is
what a client sees of an endpoint whose process died or whose load balancer lost its backends); :meth:`TcpGate.open`
brings it back on the same address with the server's state intact (a killed and restarted moto server would come
back empty). ``refused`` counts the connections a client opened while the gate was shut.
"""

from __future__ import annotations

from chaos.link_proxy import LinkProxy


class TcpGate:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._proxy = LinkProxy(target_host, target_port, name="gate")
        self.port: int = self._proxy.port
        self._refused_before = 0  # connections refused in earlier shut periods
        self._accepted_at_shut: int | None = None  # the proxy's accepted count when it was shut; None while open

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def refused(self) -> int:
        """Connections opened (and reset) while the gate was shut."""
        if self._accepted_at_shut is None:
            return self._refused_before
        return self._refused_before + self._proxy.connections - self._accepted_at_shut

    def shut(self) -> None:
        """From now on every connection is reset, those relayed now included."""
        if self._accepted_at_shut is None:
            self._accepted_at_shut = self._proxy.connections
        self._proxy.set_mode("reset")

    def open(self) -> None:
        self._proxy.set_mode("pass")
        self._refused_before, self._accepted_at_shut = self.refused, None

    def close(self) -> None:
        self._proxy.close()
