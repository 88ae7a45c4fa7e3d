"""A request that finds its remote-data job running is answered once the job ends (orchestrator.broker.job_answers): a
real job registry whose job runs on its own thread, held by the test until it chooses to let it report progress or
end."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from orchestrator.broker.job_answers import answer_once_ended, only_in_progress
from orchestrator.broker.job_registry import BrokerJobStatus, JobEvents, JobRegistry, JobRun, job_answer
from orchestrator.errors import KafkaStorageError
from orchestrator.protocol import messages as m

pytestmark = pytest.mark.unit

DONE, IN_PROGRESS = int(BrokerJobStatus.DONE), int(BrokerJobStatus.IN_PROGRESS)
EVENTS = JobEvents("test.started", "test.done", "test.failed", "test.crashed")


class World:
    """One key's job: ``release`` lets its work end (failing with ``fail`` when set), ``asks`` counts requests."""

    def __init__(self) -> None:
        self.registry: JobRegistry[str] = JobRegistry(events=EVENTS, run_in_background=self._thread)
        self.running = threading.Event()
        self.release = threading.Event()
        self.step = threading.Event()  # set: the job reports its first partition finished, then waits for release
        self.stepped = threading.Event()  # the job reported it
        self.fail: Exception | None = None
        self.asks = 0
        self.threads: list[threading.Thread] = []

    def _thread(self, fn: Any) -> None:
        t = threading.Thread(target=fn)
        self.threads.append(t)
        t.start()

    def _work(self, run: JobRun) -> None:
        self.running.set()
        assert self.step.wait(30), "the test never let the job move on"
        if not self.release.is_set():
            run.partitions_finished()
            self.stepped.set()
        assert self.release.wait(30), "the test never let the job end"
        if self.fail is not None:
            raise self.fail
        run.partitions_finished(2 - run.progress.partitions_done)

    def ask(self) -> m.DisableRemoteTopicResponse:
        self.asks += 1
        progress = self.registry.request("t", covers=[0, 1], begin=lambda: self._work, context={})
        return job_answer(progress, m.DisableRemoteTopicResponse)

    def end(self) -> None:
        """Let the job end without reporting progress first."""
        self.release.set()
        self.step.set()

    def join(self) -> None:
        self.end()
        for t in self.threads:
            t.join(30)


@pytest.fixture
def world() -> Any:
    w = World()
    yield w
    w.join()


def _answered(world: World, *, wait_s: float, then: Any = None) -> Any:
    async def go() -> Any:
        task = asyncio.create_task(answer_once_ended(world.ask, world.registry.on_end, wait_s=wait_s))
        await asyncio.to_thread(world.running.wait, 30)
        if then is not None:
            then()
        return await task

    return asyncio.run(go())


def test_a_running_job_is_answered_once_it_ends_in_the_same_round_trip(world: World) -> None:
    answer = _answered(world, wait_s=30, then=world.end)
    assert (answer["error_code"], answer["status"], answer["partitions_done"]) == (0, DONE, 2)
    assert world.asks == 2, "asked again once the job ended"


def test_a_job_still_running_when_the_wait_is_over_is_answered_with_its_progress_then(world: World) -> None:
    def progress() -> None:  # progress, no end, reported well before the wait is over
        world.step.set()
        assert world.stepped.wait(30), "the job never reported its progress"

    # the held answer is not woken by the progress, and says so at the wait's end
    answer = _answered(world, wait_s=2.0, then=progress)
    assert (answer["error_code"], answer["status"], answer["partitions_done"]) == (0, IN_PROGRESS, 1)
    assert world.asks == 2, "asked again at the end of the wait"


def test_a_job_that_fails_while_held_is_answered_with_its_failure(world: World) -> None:
    world.fail = KafkaStorageError("3 object(s) of t-0 could not be deleted")

    answer = _answered(world, wait_s=30, then=world.end)
    assert answer["error_code"] == KafkaStorageError.code and "could not be deleted" in answer["error_message"]


def test_a_wait_of_zero_answers_at_once(world: World) -> None:
    answer = _answered(world, wait_s=0)
    assert (answer["status"], world.asks) == (IN_PROGRESS, 1)


def test_only_an_answer_that_says_nothing_but_in_progress_is_held() -> None:
    assert only_in_progress({"error_code": 0, "status": IN_PROGRESS})
    assert not only_in_progress({"error_code": 0, "status": DONE})
    assert not only_in_progress({"error_code": KafkaStorageError.code, "status": IN_PROGRESS})
    entries = [{"error_code": 0, "status": DONE}, {"error_code": 0, "status": IN_PROGRESS}]
    assert only_in_progress({"error_code": 0, "topics": entries})
    assert not only_in_progress({"error_code": 0, "topics": entries[:1]}), "all done: answered at once"
    refused = [*entries, {"error_code": 117, "status": DONE}]
    assert not only_in_progress({"error_code": 0, "topics": refused}), "a refusal goes back at once"
    assert not only_in_progress({"error_code": 0, "topics": []})
