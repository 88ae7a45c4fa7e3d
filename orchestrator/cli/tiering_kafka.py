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

Many topics (NAME..., ``--all-tiered``, ``--regex``) are changed one after another, each waited for before the
next with ``--wait``; a topic refused (unknown, retain after delete...) changes none of the others, and the result
is one document: a list of every topic's, the refused ones with their error. The command then fails as its worst
topic: a refusal (exit 1), a stall (exit 4), a timeout (exit 1).

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
from orchestrator.cli.progress import counted_columns, progress_bar
from orchestrator.cli.views import Message
from orchestrator.client import TieredClient
from orchestrator.client.kafka_configs import disable_change, enable_change, remote_storage_on
from orchestrator.client.kafka_tiering import (
    MetadataTail,
    TopicRef,
    apply_change,
    speaks_tiered_apis,
    topic_ref,
)
from orchestrator.errors import RequestTimedOut, TieredError
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
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

    ref: TopicRef
    tail: MetadataTail
    segments: TopicSegments

    async def poll(self, c: TieredClient) -> TopicSegments:
        self.segments = fold(self.segments, await self.tail.read_new(c))
        return self.segments


async def open_followed(c: TieredClient, name: str) -> Followed:
    ref = await topic_ref(c, name)
    followed = Followed(ref, MetadataTail((ref,)), TopicSegments(ref.topic_id))
    await followed.poll(c)
    return followed


async def topic_status(c: TieredClient, followed: Followed) -> KafkaTopicStatus:
    ref = followed.ref
    configs = await c.describe_configs(ref.name)
    segments = await followed.poll(c)
    complete, found = not followed.tail.log_start_above_zero, followed.tail.found
    return KafkaTopicStatus(ref.name, ref.topic_id, ref.partitions, configs, segments, complete, found)


async def all_topic_statuses(c: TieredClient) -> list[KafkaTopicStatus]:
    """Every topic (internal ones left out) with remote storage on or any segment recorded: the metadata topic
    read once for all of them."""
    metadata = await c.metadata()
    refs = [
        TopicRef(t["name"], t["topic_id"], len(t["partitions"]))
        for t in sorted(metadata["topics"], key=lambda t: t["name"] or "")
        if t["name"] and not t["is_internal"] and t["error_code"] == 0
    ]
    tail = MetadataTail(tuple(refs))
    records = await tail.read_new(c) if refs else []
    complete, found = not tail.log_start_above_zero, tail.found
    out = []
    for ref in refs:
        configs = await c.describe_configs(ref.name)
        segments = fold(TopicSegments(ref.topic_id), records)
        if remote_storage_on(configs) or segments.segments:
            out.append(KafkaTopicStatus(ref.name, ref.topic_id, ref.partitions, configs, segments, complete, found))
    return out


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


@dataclass(frozen=True)
class Disabled:
    """One topic's outcome: its result to show, and how its wait ended ("done", "stalled", "timeout")."""

    view: Message
    outcome: str
    status: KafkaTopicStatus
    message: str = ""  # why it did not reach DISABLED


def _outcome(outcome: str, change: Message, status: KafkaTopicStatus, *, timeout_s: float, stall_s: float) -> Disabled:
    if outcome == "stalled":
        view, message = stalled_message(change, status, stalled_s=stall_s)
        return Disabled(view, outcome, status, message)
    if outcome == "timeout":
        message = (
            f"{status.topic} is still {status.state.name} after {timeout_s:g}s, its segments still moving; it keeps "
            "going: follow it with 'tieredctl tiering status --compat kafka'"
        )
        return Disabled(change, outcome, status, message)
    return Disabled(change, outcome, status)


def _show_and_fail(obj: Ctx, results: list[Disabled], refused: list[tuple[str, TieredError]]) -> None:
    """Show every topic's result (one document: a list for many topics), then fail as the worst one says: a topic
    refused, then one whose remote data stopped moving (exit 4), then one still moving at the timeout."""
    views = [r.view for r in results]
    if len(views) == 1 and not refused:
        obj.output.show(views[0])
    else:
        data = [v.data for v in views] + [{"topic": n, "error": e.name, "error_message": e.message} for n, e in refused]
        text = [v.text for v in views] + [f"{n}: not disabled: {e}" for n, e in refused]
        obj.output.show(Message(data, "\n".join(text)))
    if refused:
        first = refused[0][1]
        listed = "; ".join(f"{n}: {e.message}" for n, e in refused[:5]) + ("; ..." if len(refused) > 5 else "")
        total = len(results) + len(refused)
        raise type(first)(f"{len(refused)} of {total} topic(s) were not disabled ({listed})")
    for outcome, error in (("stalled", RemoteDataStalled), ("timeout", RequestTimedOut)):
        short = [r.message for r in results if r.outcome == outcome]
        if short:
            raise error(" ".join(short))


def _bar_total(status: KafkaTopicStatus) -> tuple[int, int]:
    """The bar's done and total: a delete counts segments deleted of all, a retain copies finished of all."""
    segments = status.segments
    if status.policy == DisablePolicy.RETAIN:
        return len(segments.segments) - segments.copies_in_flight, len(segments.segments)
    return segments.count(SegmentState.DELETE_SEGMENT_FINISHED), len(segments.segments)


def _bar_extra(status: KafkaTopicStatus) -> str:
    left = status.unfinished
    return f"{status.state.name}; {len(left)} partition(s) with segments left" if left else status.state.name


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
    """Disable each topic of ``names`` with Kafka's configs, one IncrementalAlterConfigs a topic, in turn (and, with
    ``wait``, each waited for before the next); a topic refused changes none of the others. Every request with the
    command's session timeout ``session_timeout_s``."""
    results: list[Disabled] = []
    refused: list[tuple[str, TieredError]] = []
    for name in names:
        try:
            results.append(_disable_one(obj, name, policy, wait, timeout_s, stall_timeout_s, session_timeout_s))
        except TieredError as exc:
            if len(names) == 1:
                raise
            refused.append((name, exc))
    _show_and_fail(obj, results, refused)


def _disable_one(
    obj: Ctx, name: str, policy: str, wait: bool, timeout_s: float, stall_timeout_s: float, session_timeout_s: float
) -> Disabled:
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
        with progress_bar(obj.output, *counted_columns()) as bar:
            task = bar.add_task(f"{name}: remote segments", total=None, extra="")

            def show(s: KafkaTopicStatus) -> None:
                done, total = _bar_total(s)
                bar.update(task, completed=done, total=total or None, extra=_bar_extra(s))

            outcome, status = run(
                lambda c: follow(
                    c,
                    followed,
                    target=TieredState.DISABLED,
                    timeout_s=timeout_s,
                    stall_timeout_s=stall_timeout_s,
                    on_poll=show,
                )
            )
    else:
        status = run(lambda c: topic_status(c, followed))
    change = change_message(status, sent=sent, replaced=replaced)
    return _outcome(outcome, change, status, timeout_s=timeout_s, stall_s=stall_timeout_s)


def enabled_topics(obj: Ctx, *, timeout_s: float) -> list[str]:
    """The topics whose tiering is ENABLED by Kafka's configs, by name (for ``--all-tiered`` and ``--regex``)."""
    statuses = obj.run(all_topic_statuses, timeout_s=timeout_s)
    return sorted(st.topic for st in statuses if st.state == TieredState.ENABLED)


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
        return await all_topic_statuses(c)

    obj.output.show(status_message(obj.run(statuses)))
