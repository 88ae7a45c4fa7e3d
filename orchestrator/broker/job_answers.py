"""Answering the controller about remote-data jobs once they end: a bounded wait instead of another poll.

A DisableRemoteTopic or DeleteRemotePartitions request that finds its job running is answered IN_PROGRESS, and the
controller asks again later: after ``[disablement] repoll_ms`` when the answer showed progress, after its backoff
when it did not (a deletion journals its progress once per window of DeleteObjects calls, so a window of large
batches shows none for a while, and the backoff grows). The job's end then waits for that next request. Instead,
:func:`answer_once_ended` holds an answer that says nothing but "in progress" until one of the handler's jobs ends,
at most ``wait_s``, and then asks again: the DONE or the failure goes back in the same round trip, and a job still
running after ``wait_s`` is answered with its progress as it is then, not as it was when the request came.

Invariants:

* Only an answer with no error and a job IN_PROGRESS is held. A refusal, a failure (answered once, its job then
  restarted: ``job_registry`` invariant 3) and DONE go back at once, unchanged.
* Asking again is what a re-delivered request does (``job_registry`` invariant 1): it starts nothing the first ask
  did not, and finds the job as it is now: DONE, failed, or still running (another job of the handler ended).
* The listener is in place before the first ask, so an end between the ask and the wait is not missed; it only
  sets an event on the event loop (from the job's thread), and is removed once the answer is made.
* The wait is asynchronous: no worker thread is held while the job runs, whatever the number of requests in
  flight. ``wait_s`` stays well below the controller's request timeout (``[disablement] request_timeout_ms``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from orchestrator.broker.job_registry import BrokerJobStatus

Answer = TypeVar("Answer", bound=Mapping[str, Any])


def only_in_progress(answer: Mapping[str, Any]) -> bool:
    """Whether ``answer`` says nothing but that jobs are running: no error anywhere, and a job IN_PROGRESS (a
    version 1 DisableRemoteTopic answer: every topic's entry without error, one of them IN_PROGRESS)."""
    if answer.get("error_code", 0) != 0:
        return False
    entries = answer.get("topics")
    if entries is None:
        return bool(answer.get("status") == BrokerJobStatus.IN_PROGRESS)
    return all(e["error_code"] == 0 for e in entries) and any(
        e["status"] == BrokerJobStatus.IN_PROGRESS for e in entries
    )


async def answer_once_ended(
    ask: Callable[[], Answer],
    on_job_end: Callable[[Callable[[], None]], contextlib.AbstractContextManager[None]],
    *,
    wait_s: float,
) -> Answer:
    """``ask()`` (run on a worker thread); if its answer only says a job is in progress, ``ask()`` again once one
    of the handler's jobs ended (``on_job_end``) or ``wait_s`` passed (module docstring)."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()

    def announce() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the broker stops, nobody waits any more
            loop.call_soon_threadsafe(ended.set)

    with on_job_end(announce):
        answer = await asyncio.to_thread(ask)
        if wait_s <= 0 or not only_in_progress(answer):
            return answer
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), wait_s)
    return await asyncio.to_thread(ask)
