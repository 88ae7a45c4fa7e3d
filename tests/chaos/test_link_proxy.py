"""The link proxy relays, delays, drops (both ways or one way) and resets, on live connections at once; a healed
link resets the connections that lost bytes; close() ends every thread.

Plain sockets against a small echo server (which also records what reached it and can push bytes of its own). No
test asserts an upper bound on a delay; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from chaos.link_proxy import LinkProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

QUIET_S = 0.5  # how long "nothing arrives" is watched for


class EchoServer:
    """Echoes every byte back; records what reached it; :meth:`push` sends bytes of its own to every connection."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self.received = bytearray()
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                if self._closing.is_set():  # accepted as close() ran: close() has taken its list already
                    conn.close()
                    return
                self.accepted += 1
                self._conns.append(conn)
            t = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                with self._lock:
                    self.received += data
                conn.sendall(data)
        except OSError:
            pass

    def push(self, data: bytes) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.sendall(data)

    def close(self) -> None:
        self._closing.set()  # before the lock: a connection accepted from now on is closed by _accept itself
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def link(echo: EchoServer) -> Iterator[LinkProxy]:
    proxy = LinkProxy("127.0.0.1", echo.port, name="test")
    yield proxy
    proxy.close()


def connect(link: LinkProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", link.port), timeout=5)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def nothing_arrives(sock: socket.socket) -> bool:
    sock.settimeout(QUIET_S)
    try:
        return sock.recv(100) == b"!"  # never: a timeout is the only way to "nothing"
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)


def is_reset(sock: socket.socket) -> bool:
    """The peer reset the connection: a recv raises ConnectionResetError (bounded: a 5 s timeout)."""
    try:
        sock.recv(100)
    except ConnectionResetError:
        return True
    return False


def wait_until(check, timeout_s: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_pass_relays_both_ways_and_counts(link, echo):
    with connect(link) as s:
        s.sendall(b"hello")
        assert recv_exactly(s, 5) == b"hello"
    assert link.connections == 1
    assert wait_until(lambda: link.bytes_relayed == 10)
    assert link.bytes_dropped == 0 and link.resets == 0


def test_delay_holds_each_chunk_at_least_the_delay_in_each_direction(link):
    link.set_mode("delay", delay_s=0.3)
    with connect(link) as s:
        started = time.monotonic()
        s.sendall(b"slow")
        assert recv_exactly(s, 4) == b"slow"
        assert time.monotonic() - started >= 0.6  # 0.3 there, 0.3 back


def test_drop_is_a_black_hole_both_ways_for_live_and_new_connections(link, echo):
    with connect(link) as live:
        live.sendall(b"one")
        assert recv_exactly(live, 3) == b"one"
        link.set_mode("drop")
        live.sendall(b"lost")
        assert nothing_arrives(live)
        with connect(link) as new:  # accepted, never relayed: the target never sees it
            new.sendall(b"also lost")
            assert nothing_arrives(new)
        assert bytes(echo.received) == b"one"
        assert echo.accepted == 1
        assert link.bytes_dropped >= len(b"lost") + len(b"also lost")


def test_back_to_pass_resets_the_black_holed_connections_and_new_ones_relay(link, echo):
    live = connect(link)
    try:
        link.set_mode("drop")
        live.sendall(b"lost")
        assert wait_until(lambda: link.bytes_dropped == 4)
        link.set_mode("pass")
        assert is_reset(live)  # its stream has a hole: it must reconnect
    finally:
        live.close()
    assert link.resets == 1
    with connect(link) as s:
        s.sendall(b"again")
        assert recv_exactly(s, 5) == b"again"


def test_drop_in_discards_client_bytes_and_relays_the_targets(link, echo):
    with connect(link) as s:
        assert wait_until(lambda: echo.accepted == 1)
        link.set_mode("drop_in")
        s.sendall(b"ping")
        assert nothing_arrives(s)
        assert bytes(echo.received) == b""
        echo.push(b"news")
        assert recv_exactly(s, 4) == b"news"


def test_drop_out_relays_client_bytes_and_discards_the_targets(link, echo):
    with connect(link) as s:
        link.set_mode("drop_out")
        s.sendall(b"ping")
        assert wait_until(lambda: bytes(echo.received) == b"ping")
        assert nothing_arrives(s)  # the echo was dropped
        assert link.bytes_dropped == 4


def test_one_way_drop_healed_resets_only_connections_that_lost_bytes(link, echo):
    with connect(link) as lossy, connect(link) as clean:
        assert wait_until(lambda: echo.accepted == 2)
        link.set_mode("drop_in")
        lossy.sendall(b"x")
        assert wait_until(lambda: link.bytes_dropped == 1)
        link.set_mode("drop")  # relays nothing: no hole can be read yet, nothing is reset
        assert link.resets == 0
        link.set_mode("pass")
        assert is_reset(lossy)
        clean.sendall(b"fine")
        assert recv_exactly(clean, 4) == b"fine"
    assert link.resets == 1


def test_reset_resets_live_connections_and_every_new_one(link):
    with connect(link) as live:
        live.sendall(b"a")
        assert recv_exactly(live, 1) == b"a"
        link.set_mode("reset")
        assert is_reset(live)
    try:  # reset as soon as accepted: the connect itself may already see it
        with connect(link) as new:
            assert is_reset(new)
    except ConnectionResetError:
        pass
    assert link.resets == 2
    link.set_mode("pass")
    with connect(link) as s:
        s.sendall(b"back")
        assert recv_exactly(s, 4) == b"back"


def test_modes_switch_on_a_live_connection(link):
    with connect(link) as s:
        for mode in ("pass", "delay", "pass", "delay", "pass"):
            link.set_mode(mode, delay_s=0.05)  # type: ignore[arg-type]
            s.sendall(mode.encode())
            assert recv_exactly(s, len(mode)) == mode.encode()
        link.set_mode("drop_out")
        s.sendall(b"gone")
        assert nothing_arrives(s)
        link.set_mode("drop_in")  # the out direction relays again after a hole: reset
        assert is_reset(s)


def test_a_bad_mode_is_refused(link):
    with pytest.raises(ValueError, match="unknown link mode"):
        link.set_mode("flaky")  # type: ignore[arg-type]
    assert link.mode == "pass"


def test_close_ends_every_thread_and_resets_every_connection(echo):
    link = LinkProxy("127.0.0.1", echo.port, name="closing")
    socks = [connect(link) for _ in range(3)]
    try:
        socks[0].sendall(b"x")
        assert recv_exactly(socks[0], 1) == b"x"
        link.set_mode("drop")
        socks[1].sendall(b"y")
        assert wait_until(lambda: link.connections == 3)
        link.close()
        assert link.live_threads() == 0
        assert all(is_reset(s) for s in socks)
    finally:
        for s in socks:
            s.close()
