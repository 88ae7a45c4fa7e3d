"""The unit guard catches what a unit test must not do, in the test's own threads, and lets the rest be."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.unit_guard import NotAUnitTest, forbidding_io


@pytest.mark.unit
def test_a_sleep_of_any_length_is_refused_naming_the_duration() -> None:
    with pytest.raises(NotAUnitTest, match=r"slept 0\.001 s"):
        time.sleep(0.001)


@pytest.mark.unit
def test_a_socket_connect_is_refused_before_it_reaches_the_network() -> None:
    with socket.socket() as s, pytest.raises(NotAUnitTest, match="connected a socket to"):
        s.connect(("127.0.0.1", 9))
    with socket.socket() as s, pytest.raises(NotAUnitTest):
        s.connect_ex(("127.0.0.1", 9))


@pytest.mark.unit
def test_starting_a_process_is_refused_whichever_way_it_is_started() -> None:
    with pytest.raises(NotAUnitTest, match="started a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(NotAUnitTest, match="started a process"):
        subprocess.Popen([sys.executable, "-c", "pass"])


@pytest.mark.unit
def test_an_asyncio_sleep_that_waits_is_refused_and_a_bare_yield_is_not() -> None:
    async def scenario() -> None:
        await asyncio.sleep(0)
        with pytest.raises(NotAUnitTest, match=r"slept 0\.5 s in asyncio"):
            await asyncio.sleep(0.5)

    asyncio.run(scenario())


@pytest.mark.unit
def test_a_thread_the_test_starts_is_watched_too() -> None:
    caught: list[BaseException] = []

    def sleeper() -> None:
        try:
            time.sleep(0.001)
        except NotAUnitTest as exc:
            caught.append(exc)

    worker = threading.Thread(target=sleeper)
    worker.start()
    worker.join()
    assert len(caught) == 1


@pytest.mark.integration  # not under the conftest's guard: it opens its own after starting a thread
def test_threads_alive_before_the_guard_keep_their_own_business() -> None:
    slept = threading.Event()
    go = threading.Event()

    def background() -> None:  # plays a session's server thread, started before the test
        go.wait()
        time.sleep(0)
        slept.set()

    outside = threading.Thread(target=background)
    outside.start()
    with forbidding_io():
        go.set()
        outside.join()
        with pytest.raises(NotAUnitTest):
            time.sleep(0)  # while the test's own thread is still watched
    assert slept.is_set()


@pytest.mark.unit
def test_everything_is_restored_after_the_block() -> None:
    before = (time.sleep, socket.socket.connect, subprocess.Popen._execute_child, asyncio.sleep)  # type: ignore[attr-defined]
    with forbidding_io():
        pass
    after = (time.sleep, socket.socket.connect, subprocess.Popen._execute_child, asyncio.sleep)  # type: ignore[attr-defined]
    assert after == before
