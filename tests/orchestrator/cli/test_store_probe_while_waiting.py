"""A request to the local cluster still unanswered after one request timeout has its store checked: a store that
does not answer ends the request then with STORE_UNAVAILABLE (the request cancelled); a store that answers lets the
request go on (a long ``--wait``); a request answered in time never checks the store.

Pure logic of :func:`orchestrator.cli.context._probing_after`: the request is a coroutine that waits on an event,
the store probe is replaced by a recorder; the same against a paused PostgreSQL server and a held SQLite write lock,
through the CLI, is ``test_store_unavailable.py``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import click
import pytest

from orchestrator.cli import context
from orchestrator.errors import StoreUnavailable
from orchestrator.local import store_probe

pytestmark = pytest.mark.unit

LOCAL: Any = object()  # the local cluster's state, as the probe would receive it


class Probe:
    def __init__(self, answer: StoreUnavailable | None) -> None:
        self.answer, self.calls, self.probed = answer, 0, threading.Event()

    def __call__(self, state: Any) -> StoreUnavailable | None:
        assert state is LOCAL
        self.calls += 1
        self.probed.set()
        return self.answer


def _run(monkeypatch: pytest.MonkeyPatch, probe: Probe, body: Any) -> Any:
    monkeypatch.setattr(store_probe, "store_problem", probe)  # looked up when a request goes unanswered
    return asyncio.run(body())


def test_a_request_unanswered_for_a_timeout_ends_with_the_stores_problem_and_is_cancelled(monkeypatch):
    problem = StoreUnavailable("the metadata store user=postgres port=5 did not answer: check it with pg_isready")
    cancelled = []

    async def never_answered(_client: Any) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "unreachable"

    async def body() -> None:
        with pytest.raises(StoreUnavailable) as raised:
            await context._probing_after(0.01, LOCAL, never_answered)(None)  # type: ignore[arg-type]
        assert raised.value is problem

    probe = Probe(problem)
    _run(monkeypatch, probe, body)
    assert probe.calls == 1 and cancelled == [True]


def test_a_slow_request_on_a_store_that_answers_goes_on_to_its_answer(monkeypatch):
    async def body() -> str:
        release = asyncio.Event()

        async def slow(_client: Any) -> str:
            await release.wait()
            return "answered"

        watched = asyncio.ensure_future(context._probing_after(0.01, LOCAL, slow)(None))  # type: ignore[arg-type]
        await asyncio.to_thread(probe.probed.wait, 30)  # the store was checked and answered
        await asyncio.wait({watched}, timeout=0.05)
        assert not watched.done(), "the request is still awaited"
        release.set()
        return await watched

    probe = Probe(None)
    assert _run(monkeypatch, probe, body) == "answered" and probe.calls == 1


def test_a_request_answered_in_time_never_checks_the_store(monkeypatch):
    async def quick(_client: Any) -> int:
        return 7

    async def body() -> int:
        return await context._probing_after(60.0, LOCAL, quick)(None)  # type: ignore[arg-type]

    probe = Probe(StoreUnavailable("unused"))
    assert _run(monkeypatch, probe, body) == 7 and probe.calls == 0


def test_the_request_timeout_is_the_commands_own_unless_the_environment_sets_one():
    assert context.request_timeout_s(30.0, {}) == 30.0
    assert context.request_timeout_s(120.0, {context.REQUEST_TIMEOUT_ENV: " "}) == 120.0
    assert context.request_timeout_s(30.0, {context.REQUEST_TIMEOUT_ENV: "5"}) == 5.0
    assert context.request_timeout_s(120.0, {context.REQUEST_TIMEOUT_ENV: "0.5"}) == 0.5
    for wrong in ("0", "-3", "ten", "nan", "inf"):
        with pytest.raises(click.UsageError, match=context.REQUEST_TIMEOUT_ENV):
            context.request_timeout_s(30.0, {context.REQUEST_TIMEOUT_ENV: wrong})
