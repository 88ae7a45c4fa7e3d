"""``tiering disable|enable|status`` through Kafka's own configs (``--compat kafka``, or any cluster whose
ApiVersions lack our DescribeTieredState / DisableRemoteTopic): the config change of
:mod:`orchestrator.client.kafka_configs`, and progress read from the metadata topic
(:class:`~orchestrator.client.kafka_tiering.MetadataTail`).

``--wait`` polls the metadata topic until the topic is DISABLED (delete: every segment DELETE_SEGMENT_FINISHED;
retain: no copy in flight). Two ways it stops short, each with its own exit status:

* the segments stopped moving for ``--stall-timeout`` seconds: it shows what remains per partition, names the scan
  and reclaim that finish the job, and exits with :data:`STALLED_EXIT` (4). Kafka does not retry a deletion that
  failed, so this is the end of it on a stock cluster; ours retries, and a later ``--wait`` may see it finish;
* ``--timeout`` passed while segments were still moving: REQUEST_TIMED_OUT, exit status 1, as without ``--compat``.

The loop reads time from an injected clock and sleeps through an injected sleep (:func:`follow`), so a test can
drive it without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import click

from orchestrator.cli.context import DEFAULT_TIMEOUT_S, Ctx
from orchestrator.cli.kafka_status import KafkaTopicStatus, change_message, stalled_message, status_message
from orchestrator.cli.views import Message
from orchestrator.client import TieredClient
from orchestrator.client.kafka_configs import disable_change, enable_change, remote_storage_on
from orchestrator.client.kafka_tiering import (
    MetadataTail,
    apply_change,
    speaks_tiered_apis,
    topic_ref,
)
from orchestrator.errors import RequestTimedOut
from orchestrator.metadata.records import TieredState
from remote_storage.rlmm_topic.progress import StallWatch, TopicSegments, fold

T = TypeVar("T")

STALLED_EXIT = 4
DEFAULT_STALL_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.5


class RemoteDataStalled(click.ClickException):
    """``--wait --compat kafka``: the topic's segments stopped moving short of DISABLED (exit status 4)."""

    exit_code = STALLED_EXIT

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: REMOTE_DATA_STALLED: {self.message}", err=True, file=file)


def uses_kafka_configs(obj: Ctx, compat: str | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """``--compat kafka``, or a cluster that does not speak our tiering APIs (asked with the command's session
    timeout, ``timeout_s``: the first request of a command opens its session)."""
    return compat == "kafka" or not obj.run(speaks_tiered_apis, timeout_s=timeout_s)


@dataclass
class Followed:
    """Where a followed topic stands: its tail on the metadata topic and its segments folded so far."""

    tail: MetadataTail
    segments: TopicSegments

    async def poll(self, c: TieredClient) -> TopicSegments:
        self.segments = fold(self.segments, await self.tail.read_new(c))
        return self.segments


async def open_followed(c: TieredClient, name: str) -> Followed:
    ref = await topic_ref(c, name)
    followed = Followed(MetadataTail(ref), TopicSegments(ref.topic_id))
    await followed.poll(c)
    return followed


async def topic_status(c: TieredClient, followed: Followed) -> KafkaTopicStatus:
    ref = followed.tail.topic
    configs = await c.describe_configs(ref.name)
    segments = await followed.poll(c)
    complete = not followed.tail.log_start_above_zero
    return KafkaTopicStatus(ref.name, ref.topic_id, ref.partitions, configs, segments, history_complete=complete)


async def follow(
    c: TieredClient,
    followed: Followed,
    *,
    target: TieredState,
    timeout_s: float,
    stall_timeout_s: float,
    on_poll: Callable[[KafkaTopicStatus], None] = lambda _s: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[str, KafkaTopicStatus]:
    """Poll until the topic is in ``target`` ("done"), its segments stopped moving for ``stall_timeout_s``
    ("stalled") or ``timeout_s`` passed ("timeout"); returns which, with the last status."""
    start = clock()
    status = await topic_status(c, followed)
    watch = StallWatch(status.segments.mark, int(start * 1000))
    while True:
        on_poll(status)
        if status.state == target:
            return "done", status
        now = clock()
        watch = watch.observe(status.segments.mark, int(now * 1000))
        if watch.stalled(int(now * 1000), int(stall_timeout_s * 1000)):
            return "stalled", status
        if now - start > timeout_s:
            return "timeout", status
        await sleep(POLL_INTERVAL_S)
        status = await topic_status(c, followed)


def _finish(
    obj: Ctx, outcome: str, change: Message, status: KafkaTopicStatus, *, timeout_s: float, stall_timeout_s: float
) -> None:
    """Show the change's result, and fail as the wait's ``outcome`` says when it did not reach its target."""
    if outcome == "stalled":
        view, message = stalled_message(change, status, stalled_s=stall_timeout_s)
        obj.output.show(view)
        raise RemoteDataStalled(message)
    obj.output.show(change)
    if outcome == "done":
        return
    raise RequestTimedOut(
        f"{status.topic} is still {status.state.name} after {timeout_s:g}s, its segments still moving; it keeps "
        "going: follow it with 'tieredctl tiering status --compat kafka'"
    )


def _progress(obj: Ctx, status: KafkaTopicStatus) -> None:
    if not obj.output.shows_progress:
        return
    parts = status.partitions
    left = sum(p.remaining for p in parts)
    obj.output.progress(
        f"{status.topic}: {status.state.name}, {left} segment(s) remaining in {len(parts)} partition(s)"
    )


def disable(
    obj: Ctx,
    names: list[str],
    policy: str,
    *,
    wait: bool,
    timeout_s: float,
    stall_timeout_s: float,
    session_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Disable each topic of ``names`` with Kafka's configs, one IncrementalAlterConfigs a topic, in turn; every
    request with the command's session timeout ``session_timeout_s``."""
    for name in names:
        _disable_one(obj, name, policy, wait, timeout_s, stall_timeout_s, session_timeout_s)


def _disable_one(
    obj: Ctx, name: str, policy: str, wait: bool, timeout_s: float, stall_timeout_s: float, session_timeout_s: float
) -> None:
    def run(request: Callable[[TieredClient], Coroutine[Any, Any, T]]) -> T:
        return obj.run(request, timeout_s=session_timeout_s)

    async def send(c: TieredClient) -> tuple[dict[str, Any] | None, dict[str, str]]:
        plan = disable_change(name, policy, await c.describe_configs(name))
        await apply_change(c, name, plan)
        return (None if plan.empty else plan.as_json()), dict(plan.replaced)

    sent, replaced = run(send)
    followed = run(lambda c: open_followed(c, name))
    outcome = "done"
    if wait:
        outcome, status = run(
            lambda c: follow(
                c,
                followed,
                target=TieredState.DISABLED,
                timeout_s=timeout_s,
                stall_timeout_s=stall_timeout_s,
                on_poll=lambda s: _progress(obj, s),
            )
        )
    else:
        status = run(lambda c: topic_status(c, followed))
    change = change_message(status, sent=sent, replaced=replaced)
    _finish(obj, outcome, change, status, timeout_s=timeout_s, stall_timeout_s=stall_timeout_s)


def enable(obj: Ctx, name: str, *, wait: bool, timeout_s: float) -> None:
    """Re-enable tiering on ``name`` with Kafka's configs; ``wait``: until the configs read back enabled."""

    async def change(c: TieredClient) -> dict[str, Any] | None:
        plan = enable_change(await c.describe_configs(name))
        await apply_change(c, name, plan)
        return None if plan.empty else plan.as_json()

    sent = obj.run(change)
    followed = obj.run(lambda c: open_followed(c, name))
    status = obj.run(lambda c: topic_status(c, followed))
    if wait:
        outcome, status = obj.run(
            lambda c: follow(c, followed, target=TieredState.ENABLED, timeout_s=timeout_s, stall_timeout_s=timeout_s)
        )
        if outcome != "done":
            raise RequestTimedOut(f"{name} still reads {status.state.name} after {timeout_s:g}s")
    obj.output.show(change_message(status, sent=sent))


def status(obj: Ctx, name: str | None) -> None:
    """Each topic's state from its configs and the metadata topic (every topic with remote storage on or any
    segment recorded, without NAME; the cluster's internal topics left out)."""

    async def statuses(c: TieredClient) -> list[KafkaTopicStatus]:
        if name is not None:
            return [await topic_status(c, await open_followed(c, name))]
        metadata = await c.metadata()
        names = sorted(t["name"] for t in metadata["topics"] if t["name"] and not t["is_internal"])
        out = []
        for n in names:
            st = await topic_status(c, await open_followed(c, n))
            if remote_storage_on(st.configs) or st.segments.segments:
                out.append(st)
        return out

    obj.output.show(status_message(obj.run(statuses)))
