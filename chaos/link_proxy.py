"""A TCP fault proxy on one link of the cluster (a broker to a controller, or anyone to a broker).

:class:`LinkProxy` listens on 127.0.0.1 (a port of its own) and relays every connection to its target, one thread
per direction. :meth:`LinkProxy.set_mode` decides what happens to the bytes, on live connections at once (every
relay thread looks at the mode for each chunk it reads):

* ``pass``: relayed;
* ``delay``: each chunk relayed ``delay_s`` after it was read, both directions (order kept);
* ``drop``: a partition both ways: bytes are read and discarded, nothing is relayed, connections stay open, and a
  new connection is accepted but never connected to the target; the peers notice only by their timeouts;
* ``drop_in`` / ``drop_out``: a one-way partition: the client -> target (``in``) or target -> client (``out``)
  bytes are discarded, the other direction is relayed;
* ``reset``: every relayed connection is reset (RST), and every new one is accepted and reset at once.

Invariants:

* A connection never relays again in a direction where it lost bytes: its byte stream has a hole there, and the
  bytes after the hole would be read as a frame they are not part of. So when the mode changes to one that relays
  a direction a connection lost bytes in (``drop`` -> ``pass``, ``drop_in`` -> ``drop_out``...), that connection
  is reset, and so is one accepted during a ``drop`` (it has no target). The peers then reconnect, through the
  link as it now is: a healed partition looks to them like connections broken by it, never like corrupted ones.
* An end of stream in a direction that drops is dropped too (the other side is not told); one in a direction that
  relays is relayed (a half close); a connection ends when both directions ended, or at once on an error.
* Counters (``connections`` accepted, ``bytes_relayed``, ``bytes_dropped``, ``resets``) only grow.
* :meth:`LinkProxy.close` resets every connection and ends every thread (joins bounded in time).
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from chaos.threads import ThreadSet

Mode = Literal["pass", "delay", "drop", "drop_in", "drop_out", "reset"]
MODES: Final[frozenset[str]] = frozenset(get_args(Mode))
Direction = Literal["in", "out"]  # in: client -> target; out: target -> client

_RELAYS: Final[dict[Mode, frozenset[Direction]]] = {
    "pass": frozenset({"in", "out"}),
    "delay": frozenset({"in", "out"}),
    "drop": frozenset(),
    "drop_in": frozenset({"out"}),
    "drop_out": frozenset({"in"}),
    "reset": frozenset(),
}
_ACCEPT_POLL_S = 0.1
_CONNECT_TIMEOUT_S = 5.0
_CHUNK = 65536
_JOIN_S = 5.0  # close() waits at most this long for all the threads together


def reset_socket(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: the peer sees 'connection reset'. SHUT_RD first wakes a thread
    blocked reading the socket (a close alone does not), and sends nothing."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    sock.close()


@dataclass(eq=False)
class _Connection:
    client: socket.socket
    upstream: socket.socket | None  # None: accepted during a drop, never connected to the target
    lost: set[Direction] = field(default_factory=set)  # directions in which bytes were discarded
    ended: set[Direction] = field(default_factory=set)  # directions whose end of stream was relayed
    closed: bool = False


class LinkProxy:
    def __init__(self, target_host: str, target_port: int, *, name: str) -> None:
        self.name = name
        self.target = (target_host, target_port)
        self._mode: Mode = "pass"
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._threads = ThreadSet()
        self._closing = threading.Event()
        self.connections = 0  # accepted
        self.bytes_relayed = 0
        self.bytes_dropped = 0
        self.resets = 0  # connections reset by the proxy (mode changes, reset mode, close)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._threads.start(self._accept_loop, f"link-{name}-accept")

    def __repr__(self) -> str:
        return f"LinkProxy({self.name!r}, 127.0.0.1:{self.port} -> {self.target[0]}:{self.target[1]}, {self._mode})"

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode, delay_s: float = 0.0) -> None:
        """From now on, ``mode`` (see the module docstring); resets the connections it cannot relay faithfully."""
        if mode not in MODES:
            raise ValueError(f"unknown link mode {mode!r}; one of {sorted(MODES)}")
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        relays = _RELAYS[mode]
        with self._lock:
            self._mode, self._delay_s = mode, delay_s
            doomed = [
                c
                for c in self._connections
                if mode == "reset" or (c.upstream is None and mode != "drop") or (c.lost & relays)
            ]
        for conn in doomed:
            self._reset(conn)

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            live = list(self._connections)
        for conn in live:
            self._reset(conn)
        self._threads.join_all(_JOIN_S)

    def __enter__(self) -> LinkProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def live_threads(self) -> int:
        """How many of the proxy's threads still run (0 once :meth:`close` returned, unless a join timed out)."""
        return self._threads.live()

    # -- threads ------------------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:
                self.connections += 1
                mode = self._mode
            if mode == "reset":
                self._count_reset()
                reset_socket(client)
                continue
            upstream = None
            if mode != "drop":
                try:
                    upstream = socket.create_connection(self.target, timeout=_CONNECT_TIMEOUT_S)
                except OSError:
                    self._count_reset()
                    reset_socket(client)  # as the target would have refused it
                    continue
                upstream.settimeout(None)
            conn = _Connection(client, upstream)
            with self._lock:
                if self._closing.is_set():
                    conn.closed = True
                else:
                    self._connections.add(conn)
            if conn.closed:
                reset_socket(client)
                if upstream is not None:
                    reset_socket(upstream)
                return
            self._threads.start(self._pump, f"link-{self.name}-in", conn, "in")
            if upstream is not None:
                self._threads.start(self._pump, f"link-{self.name}-out", conn, "out")

    def _pump(self, conn: _Connection, direction: Direction) -> None:
        src = conn.client if direction == "in" else conn.upstream
        dst = conn.upstream if direction == "in" else conn.client
        assert src is not None
        try:
            while not self._closing.is_set():
                data = src.recv(_CHUNK)
                with self._lock:
                    mode, delay_s = self._mode, self._delay_s
                if mode == "reset":  # accepted while the mode changed to reset: it goes the way of the others
                    self._reset(conn)
                    return
                relayed = dst is not None and direction in _RELAYS[mode] and direction not in conn.lost
                if not data:
                    if relayed:
                        self._end_direction(conn, direction)
                    return  # an end of stream in a dropping direction is dropped with it (see the docstring)
                if not relayed:
                    with self._lock:
                        self.bytes_dropped += len(data)
                        conn.lost.add(direction)
                    continue
                if mode == "delay" and self._closing.wait(delay_s):
                    return
                assert dst is not None
                dst.sendall(data)
                with self._lock:
                    self.bytes_relayed += len(data)
        except OSError:
            self._reset(conn, counted=False)  # a peer reset or the proxy closed it: the other side is reset too

    def _end_direction(self, conn: _Connection, direction: Direction) -> None:
        dst = conn.upstream if direction == "in" else conn.client
        assert dst is not None
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            self._reset(conn, counted=False)
            return
        with self._lock:
            conn.ended.add(direction)
            both = conn.ended == {"in", "out"} and not conn.closed
            if both:
                conn.closed = True
                self._connections.discard(conn)
        if both:
            conn.client.close()
            assert conn.upstream is not None
            conn.upstream.close()

    def _reset(self, conn: _Connection, *, counted: bool = True) -> None:
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
            self._connections.discard(conn)
            if counted:
                self.resets += 1
        reset_socket(conn.client)
        if conn.upstream is not None:
            reset_socket(conn.upstream)

    def _count_reset(self) -> None:
        with self._lock:
            self.resets += 1
