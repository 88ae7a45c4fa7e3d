"""A TCP gate in front of a server, for outages the client cannot tell from the real thing.

:class:`TcpGate` listens on 127.0.0.1 (a port of its own) and relays every connection to the target while open.
:meth:`TcpGate.shut` takes the server away: every relayed connection is reset and every new one is accepted and
reset at once, which is what a client sees of an endpoint whose process died or whose load balancer lost its
backends. :meth:`TcpGate.open` brings it back on the same address, with the server's state intact (a killed and
restarted moto server would come back empty). Threads only; :meth:`TcpGate.close` ends them all.
"""

from __future__ import annotations

import socket
import struct
import threading

_ACCEPT_POLL_S = 0.1


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: the peer sees 'connection reset'. SHUT_RD first wakes a relay
    thread blocked reading it (a close alone does not) and sends nothing."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    sock.close()


class TcpGate:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._relayed: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.refused = 0  # connections reset while shut
        self._start(self._accept_loop, "tcp-gate-accept")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def shut(self) -> None:
        """From now on every connection is reset, those relayed now included."""
        self._open.clear()
        with self._lock:
            relayed, self._relayed = self._relayed, set()
        for sock in relayed:
            _reset(sock)

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closing.set()
        self.shut()
        self._listener.close()
        for t in self._threads:
            t.join(timeout=5)

    def _start(self, target: object, name: str, *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                _reset(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._relayed |= {client, upstream}
            self._start(self._pump, "tcp-gate-up", client, upstream)
            self._start(self._pump, "tcp-gate-down", upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            mine = {src, dst} & self._relayed
            self._relayed -= mine
        for sock in mine:
            _reset(sock)
