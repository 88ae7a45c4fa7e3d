"""The controller's loops never end quietly: a lease or sender round that raises anything is logged with its cause
and retried (a sender that keeps failing steps down and the controller takes its lease again with a fresh core);
a lease loop that ends anyway stops the controller, and ``main`` exits nonzero.

A real ControllerService on a real SQLite store and a loopback port; the failures are injected into its store and
its core driver."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.controller import sender as sender_module
from orchestrator.controller import service as service_module
from orchestrator.controller.service import ControllerService
from orchestrator.settings import ControllerSettings

pytestmark = pytest.mark.timeout(60)  # each test's kind is beside it


def _events(logs: list[dict[str, Any]], name: str, **fields: object) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name and all(e.get(k) == v for k, v in fields.items())]


def _service(tmp_path) -> ControllerService:
    return ControllerService(ControllerSettings(node_id=3000, metadata_store=str(tmp_path / "m.db"), lease_ttl_ms=600))


async def _run_until(service: ControllerService, done: Callable[[], bool], timeout_s: float = 20) -> None:
    task = asyncio.create_task(service.run())
    try:
        async with asyncio.timeout(timeout_s):
            while not done():
                if task.done():
                    break
                await asyncio.sleep(0.02)
    finally:
        service.stop()
        await asyncio.wait_for(task, 10)


@pytest.mark.integration
def test_a_lease_round_that_raises_is_logged_with_its_cause_and_retried_until_the_controller_is_active(tmp_path):
    service = _service(tmp_path)
    real_acquire = service.lease_store.acquire_lease
    calls = {"n": 0}

    def flaky_acquire(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("disk I/O error") from OSError(5, "Input/output error")
        return real_acquire(**kwargs)

    service.lease_store.acquire_lease = flaky_acquire  # type: ignore[method-assign]
    with capture_logs() as logs:
        asyncio.run(_run_until(service, lambda: service.core is not None))
    failed = _events(logs, "controller.loop_failed", loop="lease")
    assert [e["attempt"] for e in failed] == [1, 2]
    assert failed[0]["error"] == "RuntimeError" and "Input/output error" in failed[0]["cause"]
    assert _events(logs, "controller.loop_recovered", loop="lease", failed_attempts=2)
    assert _events(logs, "controller.active")
    assert service.crashed_loop is None


@pytest.mark.integration
def test_a_sender_that_keeps_failing_steps_down_and_the_controller_comes_back_with_a_fresh_core(tmp_path, monkeypatch):
    service = _service(tmp_path)
    failures = {"left": sender_module.SENDER_FAILURES_BEFORE_STEP_DOWN}

    def failing_tick(core: Any) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ValueError("a bug in a tick")
        return [], []  # no DisableRemoteTopic, no DeleteRemotePartitions

    monkeypatch.setattr(sender_module, "tick_and_collect", failing_tick)
    cores: list[object] = []

    def second_core() -> bool:
        if service.core is not None and service.core not in cores:
            cores.append(service.core)
        return len(cores) >= 2

    with capture_logs() as logs:
        asyncio.run(_run_until(service, second_core))
    failed = _events(logs, "controller.loop_failed", loop="sender")
    assert [e["attempt"] for e in failed] == list(range(1, sender_module.SENDER_FAILURES_BEFORE_STEP_DOWN + 1))
    assert failed[0]["error"] == "ValueError" and failed[0]["detail"] == "a bug in a tick"
    assert next(e["reason"] for e in _events(logs, "controller.step_down")).startswith("the sender failed 5 rounds")
    assert len(cores) == 2, "after stepping down it took the lease again with a new core"


class LoopEnded(BaseException):
    """Stands for any way the lease task can end while the controller runs (a bug past every handler)."""


@pytest.mark.unit
def test_a_lease_loop_that_ends_stops_the_controller_and_main_exits_nonzero(tmp_path, monkeypatch):
    async def broken_loop(self: ControllerService) -> None:
        raise LoopEnded("lease loop escaped")

    monkeypatch.setattr(ControllerService, "_lease_loop", broken_loop)
    settings_file = tmp_path / "controller.toml"
    settings_file.write_text(f'[controller]\nnode_id = 3000\nmetadata_store = "{tmp_path / "m.db"}"\n')
    monkeypatch.setattr(service_module, "configure_logging", lambda mode: None)
    with capture_logs() as logs, pytest.raises(SystemExit, match="lease loop crashed"):
        service_module.main(str(settings_file))
    crashed = _events(logs, "controller.loop_crashed", loop="lease")
    assert crashed and crashed[0]["error"] == "LoopEnded"
