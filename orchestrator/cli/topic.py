"""``tieredctl topic``: create, inspect, grow and delete topics; produce and consume records.

``produce`` draws a progress bar on stderr (text only) and, if it fails part way, still says which records were
acknowledged (count and offsets per partition) before the error; ``consume`` prints the first records as it reads them
(text only) and ends with the totals, saying how many came from remote storage.
"""

from __future__ import annotations

import copy
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.options import parse_key_values
from orchestrator.cli.progress import progress_bar
from orchestrator.cli.views import ConsumedRecord, Message, PartitionRow, TopicDescription, TopicList
from orchestrator.client import TieredClient, TieringStatus
from orchestrator.errors import TieredError
from orchestrator.ids import Uuid
from orchestrator.protocol import messages as m


@click.group(cls=NounGroup)
def topic() -> None:
    """Create, inspect, delete topics; produce and consume records."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--replication-factor", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="a topic config, repeatable")
@click.pass_obj
def topic_create(obj: Ctx, name: str, partitions: int, replication_factor: int, configs: tuple[str, ...]) -> None:
    """Create topic NAME (tiering on with --config remote.storage.enable=true)."""
    cfg = parse_key_values(configs, option="--config")

    async def create(c: TieredClient) -> Uuid:
        return await c.create_topic(name, partitions=partitions, replication_factor=replication_factor, configs=cfg)

    tid = obj.run(create)
    data = {"topic": name, "topic_id": str(tid), "partitions": partitions}
    obj.output.show(Message(data, f"created topic {name} ({tid})"))


@topic.command("list")
@click.option("--include-internal", is_flag=True, help="list the cluster's internal topics too (__remote_log_metadata)")
@click.pass_obj
def topic_list(obj: Ctx, include_internal: bool) -> None:
    """Every topic with its id, partitions and tiered state (internal ones with --include-internal)."""

    async def listing(c: TieredClient) -> tuple[list[TieringStatus], frozenset[str]]:
        return await c.tiering_status(), await c.internal_topics()

    statuses, internal = obj.run(listing)
    shown = statuses if include_internal else [s for s in statuses if s.topic not in internal]
    obj.output.show(TopicList(shown, internal))


@topic.command("describe")
@click.argument("name")
@click.pass_obj
def topic_describe(obj: Ctx, name: str) -> None:
    """Partitions (leader and its epoch, replicas, ISR, under-replicated or not), configs and tiered state of topic
    NAME."""

    async def describe(c: TieredClient) -> tuple[m.MetadataResponseTopic, dict[str, str | None], TieringStatus]:
        return await c.topic(name), await c.describe_configs(name), (await c.tiering_status([name]))[0]

    t, configs, status = obj.run(describe)
    by_index = sorted(t["partitions"], key=lambda p: p["partition_index"])
    partitions: list[PartitionRow] = [
        {
            "partition": p["partition_index"],
            "leader": p["leader_id"],
            "leader_epoch": p.get("leader_epoch", -1),
            "replicas": p["replica_nodes"],
            "isr": p["isr_nodes"],
            "under_replicated": len(p["isr_nodes"]) < len(p["replica_nodes"]),
        }
        for p in by_index
    ]
    obj.output.show(TopicDescription(status, partitions, configs))


@topic.command("delete")
@click.argument("name")
@click.pass_obj
def topic_delete(obj: Ctx, name: str) -> None:
    """Delete topic NAME (its remote data becomes orphaned; 'tieredctl scan' finds it, 'reclaim' removes it)."""
    obj.run(lambda c: c.delete_topic(name))
    obj.output.show(Message({"topic": name, "deleted": True}, f"deleted topic {name}"))


@topic.command("add-partitions")
@click.argument("name")
@click.option("--total", required=True, type=click.IntRange(1, 10_000), help="the new partition count")
@click.pass_obj
def topic_add_partitions(obj: Ctx, name: str, total: int) -> None:
    """Grow topic NAME to --total partitions (new ones inherit its tiered state)."""
    obj.run(lambda c: c.add_partitions(name, total))
    obj.output.show(Message({"topic": name, "partitions": total}, f"topic {name} now has {total} partitions"))


@topic.command("produce")
@click.argument("name")
@click.option("--records", required=True, type=click.IntRange(1, 10_000_000))
@click.option("--record-size", default=100, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000), help="records per request")
@click.pass_obj
def topic_produce(obj: Ctx, name: str, records: int, record_size: int, batch: int) -> None:
    """Produce --records synthetic records to NAME, spread over its partitions.

    A produce that fails part way still says what was written: how many records the leaders acknowledged and,
    per partition, their offsets (the JSON result too, with "complete": false), so a retry does not write them
    again; the error follows on stderr (exit status 1).
    """
    acked: dict[int, tuple[int, int, int]] = {}  # partition -> (first offset, last offset, records) acknowledged
    in_flight: list[tuple[int, int]] = []  # (partition, records) of the request not yet answered

    async def produce(c: TieredClient) -> None:
        parts = sorted(p["partition_index"] for p in (await c.topic(name))["partitions"])
        sent = 0
        columns = (TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with progress_bar(obj.output, *columns) as bar:
            task = bar.add_task("produce", total=records)
            i = 0
            while sent < records:
                n = min(batch, records - sent)
                p = parts[i % len(parts)]
                values = [f"{name}-{sent + k}:".encode().ljust(record_size, b".")[:record_size] for k in range(n)]
                in_flight[:] = [(p, n)]

                def count(base: int, written: int, p: int = p) -> None:  # each batch the leader acknowledged
                    lo, _, before = acked.get(p, (base, base, 0))
                    acked[p] = (lo, base + written - 1, before + written)
                    in_flight[:] = [(p, in_flight[0][1] - written)] if in_flight and in_flight[0][1] > written else []

                await c.produce(name, values, partition=p, on_ack=count)
                in_flight.clear()
                sent += n
                i += 1
                bar.update(task, completed=sent)

    failure: TieredError | None = None
    try:
        obj.run(produce, timeout_s=60)
    except TieredError as exc:
        failure = exc
    done = sum(r for _, _, r in acked.values())
    ranges = {p: f"offsets {first}-{last} ({n} records)" for p, (first, last, n) in sorted(acked.items())}
    data = {
        "topic": name,
        "records": done,
        "requested": records,
        "complete": failure is None,
        "partitions": {str(p): [first, last] for p, (first, last, _) in sorted(acked.items())},
        "records_per_partition": {str(p): n for p, (_, _, n) in sorted(acked.items())},
    }
    if failure is None:
        obj.output.show(Message(data, f"produced {records} records to {name} ({len(acked)} partitions)"))
        return
    written = "; ".join(f"partition {p} {r}" for p, r in ranges.items()) or "nothing"
    detail = f"{done} of {records} records were acknowledged before this failure ({written})"
    if in_flight:
        p, n = in_flight[0]
        detail += (
            f"; the request in flight ({n} records to partition {p}) was not acknowledged, though it may have been "
            "written if the connection failed after sending it"
        )
    detail += f"; produce only the remaining {records - done} to finish"
    data["error"] = str(failure)
    obj.output.show(Message(data, f"produced {done} of {records} records to {name} before failing: {written}"))
    partial = copy.copy(failure)  # the same error (name, code, exit status), its message saying what was written
    partial.message = f"{failure.message}; {detail}"
    partial.args = (partial.message,)
    raise partial from failure


@topic.command("consume")
@click.argument("name")
@click.option("--from-beginning", is_flag=True, help="start at the log start offset (reads across tiers)")
@click.option("--max-records", default=None, type=click.IntRange(1, None))
@click.option("--partition", "partitions", multiple=True, type=int, help="only these partitions (repeatable)")
@click.pass_obj
def topic_consume(
    obj: Ctx, name: str, from_beginning: bool, max_records: int | None, partitions: tuple[int, ...]
) -> None:
    """Read NAME's records up to the current end; says how many came from remote storage."""

    async def consume(c: TieredClient) -> dict[str, Any]:
        parts = sorted(p["partition_index"] for p in (await c.topic(name))["partitions"])
        wanted = [p for p in parts if not partitions or p in partitions]
        total = remote = 0
        per: dict[str, dict[str, int]] = {}
        for p in wanted:
            first = last = -1
            n = r = 0
            left = None if max_records is None else max_records - total
            if left is not None and left <= 0:
                break
            async for rec in c.consume(name, p, from_beginning=from_beginning, max_records=left):
                obj.output.show(ConsumedRecord(rec, partition=p, index=total + n))
                first = rec.offset if first < 0 else first
                last = rec.offset
                n += 1
                r += rec.remote
            per[str(p)] = {"records": n, "remote": r, "first_offset": first, "last_offset": last}
            total += n
            remote += r
        return {"topic": name, "records": total, "remote_records": remote, "partitions": per}

    data = obj.run(consume, timeout_s=60)
    text = f"consumed {data['records']} records from {name} ({data['remote_records']} read from remote storage)"
    obj.output.show(Message(data, text))
