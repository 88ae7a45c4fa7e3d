"""``tieredctl rlmm``: Kafka's remote log metadata as the ``__remote_log_metadata`` topic holds it.

``rlmm dump`` reads every partition of the topic over Kafka's data plane (one Fetch per leader), decodes each value
as Kafka's ``RemoteLogMetadataSerde`` does (:mod:`remote_storage.rlmm_topic.serde`) and prints it as Kafka's
console consumer prints it with ``RemoteLogMetadataSerde$RemoteLogMetadataFormatter``
(``partition: P, offset: O, value: RemoteLogSegmentMetadata{...}``), or with ``--output json`` as one JSON object per
line (JSON Lines) with its partition and offset (:func:`remote_storage.rlmm_topic.formatter.to_json`).

Where it starts and when it stops, as ``kafka-console-consumer`` does:

* without ``--from-beginning``: at the end of every partition, printing what is published from then on, until
  Ctrl-C, ``--max-records N`` records or ``--timeout SECONDS`` without a new record (``--timeout-ms``);
* with ``--from-beginning``: from every partition's first record up to the end each had when the dump began, then it
  ends by itself (a dump); ``--follow`` keeps reading after that, as without it. ``--max-records`` and ``--timeout``
  stop it earlier.

A value that does not decode (a record Kafka would not write there) is printed as undecodable with why, and the
dump goes on. The count of records printed ends the dump on stderr (text), as the console consumer's "Processed a
total of N messages"; every way of stopping exits 0.

Ctrl-C (SIGINT) is the dump's own from before it says "Ctrl-C stops": it sets an event the read waits on beside the
next record, so one Ctrl-C always ends the dump, whatever the read is waiting on (it does not rest on the
cancellation of the read being delivered: a run's only Ctrl-C was once lost that way, and the dump read on).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import click

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.views import RlmmDumpEnded, RlmmRecord
from orchestrator.client import PartitionRecord, TieredClient
from orchestrator.errors import ProtocolError
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.rlmm_topic.serde import decode_value


@click.group(cls=NounGroup)
def rlmm() -> None:
    """Kafka's remote log metadata, as the __remote_log_metadata topic holds it."""


def decoded(record: PartitionRecord) -> RlmmRecord:
    """A record of the topic as ``rlmm dump`` shows it: decoded, or why it does not decode."""
    partition, offset = record.partition, record.offset
    if record.value is None:
        return RlmmRecord(partition, offset, None, error="a null value")
    try:
        return RlmmRecord(partition, offset, decode_value(record.value), size=len(record.value))
    except ProtocolError as exc:
        return RlmmRecord(partition, offset, None, error=exc.message, size=len(record.value))


@rlmm.command("dump")
@click.option("--topic", default=TOPIC_NAME, show_default=True, help="the remote log metadata topic")
@click.option(
    "--from-beginning", is_flag=True, help="every record from each partition's start, then stop (see --follow)"
)
@click.option("--follow", is_flag=True, help="with --from-beginning: keep reading new records after the end")
@click.option("--max-records", default=None, type=click.IntRange(1, None), help="stop after this many records")
@click.option(
    "--timeout",
    default=None,
    type=click.FloatRange(0, None, min_open=True),
    metavar="SECONDS",
    help="stop when no new record came for this long",
)
@click.pass_obj
def rlmm_dump(
    obj: Ctx, topic: str, from_beginning: bool, follow: bool, max_records: int | None, timeout: float | None
) -> None:
    """Print the records of the remote log metadata topic, decoded, as Kafka's console consumer prints them."""
    printed = [0, 0]  # records, undecodable ones: counted as they are printed, so Ctrl-C still tells them

    async def dump(c: TieredClient) -> str:
        stop = asyncio.Event()
        with _stopped_by_sigint(stop):
            return await read(c, stop)

    async def read(c: TieredClient, stop: asyncio.Event) -> str:
        to_end = from_beginning and not follow
        start = "the beginning" if from_beginning else "the end"

        def started() -> None:  # every partition's starting offset is known: what comes from now on is read
            if not to_end:
                obj.output.progress(f"reading {topic} from {start} of every partition; Ctrl-C stops")

        records = c.read_topic(topic, from_beginning=from_beginning, to_end=to_end, started=started)
        try:
            while max_records is None or printed[0] < max_records:
                record = await next_record(records, timeout, stop)
                if isinstance(record, Interrupted):
                    return "interrupted"
                if record is None:
                    return "end"
                view = decoded(record)
                obj.output.show(view)
                printed[0] += 1
                printed[1] += view.record is None
            return "max-records"
        except TimeoutError:
            return "timeout"
        finally:
            await records.aclose()

    try:
        reason = obj.run(dump)
    except KeyboardInterrupt:
        reason = "interrupted"
    obj.output.show(RlmmDumpEnded(printed[0], printed[1], reason))


class Interrupted:
    """What :func:`next_record` returns once its ``stop`` is set."""


INTERRUPTED = Interrupted()


@contextlib.contextmanager
def _stopped_by_sigint(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT sets ``stop`` while inside (on the running loop, main thread); the handler before is back after."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)  # before the loop puts its own in its place
    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    except (RuntimeError, ValueError):  # not the main thread (an embedding caller): Ctrl-C is the caller's
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        # SIG_IGN and SIG_DFL come back as they were; None (a handler not set from Python) as Python's default.
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


async def next_record(
    records: AsyncGenerator[PartitionRecord, None], timeout_s: float | None, stop: asyncio.Event | None = None
) -> PartitionRecord | Interrupted | None:
    """The next record (None at the end), waiting at most ``timeout_s`` for it (TimeoutError), or
    :data:`INTERRUPTED` as soon as ``stop`` is set (the read is cancelled, and has unwound when this returns)."""
    get: asyncio.Task[PartitionRecord] = asyncio.ensure_future(anext(records))
    waiting: list[asyncio.Future[Any]] = [get]
    if stop is not None:
        waiting.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waiting, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in waiting:
            f.cancel()  # nothing for one that is done
    if get.done() and not get.cancelled():
        try:
            return get.result()
        except StopAsyncIteration:
            return None
    with contextlib.suppress(asyncio.CancelledError):
        await get  # the read unwinds (its generator is finished) before the caller closes it
    if stop is not None and stop.is_set():
        return INTERRUPTED
    raise TimeoutError(f"no new record within {timeout_s}s")
