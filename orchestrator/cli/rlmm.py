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
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

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
        to_end = from_beginning and not follow
        start = "the beginning" if from_beginning else "the end"

        def started() -> None:  # every partition's starting offset is known: what comes from now on is read
            if not to_end:
                obj.output.progress(f"reading {topic} from {start} of every partition; Ctrl-C stops")

        records = c.read_topic(topic, from_beginning=from_beginning, to_end=to_end, started=started)
        try:
            while max_records is None or printed[0] < max_records:
                record = await next_record(records, timeout)
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


async def next_record(
    records: AsyncGenerator[PartitionRecord, None], timeout_s: float | None
) -> PartitionRecord | None:
    """The next record (None at the end), waiting at most ``timeout_s`` for it (TimeoutError)."""
    try:
        if timeout_s is None:
            return await anext(records)
        return await asyncio.wait_for(anext(records), timeout_s)
    except StopAsyncIteration:
        return None
