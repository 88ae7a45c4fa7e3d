"""``make demo``: the main job end to end on the embedded defaults, narrated.

A real local cluster (embedded S3 from moto's server, the SQLite store, 2 controllers, 3 brokers, each its own
process) under ``./var/demo``; every step prints the ``tieredctl`` command that does the same thing:

cluster up -> create ``orders``, ``payments`` and ``clicks`` with tiering on -> produce -> wait until segments are
tiered -> disable ``orders`` with delete and ``payments`` with retain -> status and what the bucket holds -> consume
``payments`` from the beginning (read back from S3) -> re-enable ``payments`` and show its epochs -> delete the
tiered topic ``clicks`` and wait until its remote data is deleted too (KIP-405) -> leave orphans the way real
clusters do, written by hand (an upload whose metadata was never recorded; a zombie upload that landed under
``clicks``' id after its deletion, from a broker that died before cleaning it up; objects of a topic id no metadata
knows) -> build an inventory of the bucket -> run the Spark scan and print reclaimable bytes and anomalies per
topic, with the HTML report's path -> cluster down. The cluster is always stopped at the end, also
on failure or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from orchestrator.client import TieredClient
from orchestrator.clock import wall_ms
from orchestrator.errors import LocalClusterError
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from orchestrator.logging import configure_logging
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.topic_configs import LOCAL_RETENTION_MS, REMOTE_STORAGE_ENABLE, SEGMENT_BYTES
from remote_storage.inventory import build_inventory
from remote_storage.keys import KeyParseError, SegmentKey, Suffix, build_key, parse_key
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.report import render_text
from remote_storage.scan.run import export_store, scan

UNWRAPPED_WIDTH = 100_000  # off a terminal: wider than any table; text is not wrapped at all (soft_wrap)
RULE_WIDTH = 100  # the demo's title and last line off a terminal


def _console() -> Console:
    """rich's own console on a terminal; elsewhere (``make demo | tee``, a test) one that wraps nothing, where rich
    would assume 80 columns and break a printed command or path mid-word."""
    on_terminal = Console()
    return on_terminal if on_terminal.is_terminal else Console(width=UNWRAPPED_WIDTH, soft_wrap=True)


console = _console()
DEMO_DIR = Path("var/demo")  # relative to the working directory (under `make demo`, the repository)
TOPICS = ("orders", "payments", "clicks")
TOPIC_CONFIGS = {REMOTE_STORAGE_ENABLE: "true", LOCAL_RETENTION_MS: "0", SEGMENT_BYTES: "16384"}


def rule(title: str) -> None:
    """A titled horizontal line across the terminal, or of RULE_WIDTH columns elsewhere."""
    console.print(Rule(title), width=console.width if console.is_terminal else RULE_WIDTH)


def step(title: str, command: str) -> None:
    console.print(f"\n[bold]{title}[/]   [dim]$ tieredctl {command}[/]")


def bucket_table(state: LocalClusterState, title: str) -> Table:
    rsm = S3RemoteStorage(client=lc.s3_client(state), bucket=state.bucket)
    objects: Counter[tuple[str, str, str]] = Counter()
    size: Counter[tuple[str, str, str]] = Counter()
    for o in rsm.list_objects(state.prefix):
        try:
            seg = parse_key(o.key, state.prefix).segment
        except KeyParseError:
            continue
        epoch = rsm.tags(o.key).get("tieredEpoch", "?")
        k = (seg.topic, str(seg.topic_id), epoch)
        objects[k] += 1
        size[k] += o.size
    table = Table(title=title, title_justify="left")
    for col in ("topic", "topic id", "tieredEpoch tag", "objects", "bytes"):
        table.add_column(col)
    for k in sorted(objects):
        table.add_row(*k, str(objects[k]), f"{size[k]:,}")
    if not objects:
        table.add_row("(the bucket is empty)", "", "", "0", "0")
    return table


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    """Poll ``check`` until it holds; past ``timeout_s`` the demo fails saying what it waited for."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise LocalClusterError(
                f"the demo waited {timeout_s:.0f}s for {what}; the process logs are in {DEMO_DIR}/logs"
            )
        await asyncio.sleep(0.25)


async def story(state: LocalClusterState) -> None:
    topic_ids: dict[str, Uuid] = {}
    async with TieredClient(state.bootstrap_server, timeout_s=30) as c:
        for name in TOPICS:
            step(
                f"create {name} with tiering on",
                f"topic create {name} --partitions 2 --config remote.storage.enable=true",
            )
            tid = await c.create_topic(name, partitions=2, configs=TOPIC_CONFIGS)
            topic_ids[name] = tid
            console.print(f"  topic id {tid}")
        step("produce 2,000 records to each", "topic produce orders --records 2000 --record-size 200")
        for name in TOPICS:
            for p in range(2):
                await c.produce(name, [f"{name}-{p}-{i}:".encode().ljust(200, b".") for i in range(1000)], partition=p)
        step("wait until closed segments are copied to S3", "tiering status")

        async def first_records_are_remote() -> bool:
            for name in TOPICS:  # noqa: SIM110 (all() cannot consume an async generator)
                if not any([r.remote async for r in c.consume(name, 0, max_records=1)]):
                    return False
            return True

        await until("segments to be copied to S3", first_records_are_remote, 60)
        console.print(bucket_table(state, "what the bucket holds after tiering"))

        step("disable orders with the delete policy", "tiering disable orders --policy delete --wait")
        await c.disable_tiering("orders", "delete")
        step("disable payments with the retain policy", "tiering disable payments --policy retain --wait")
        await c.disable_tiering("payments", "retain")

        async def all_disabled() -> bool:
            return all(s.state == TieredState.DISABLED for s in await c.tiering_status(["orders", "payments"]))

        await until("both topics to be DISABLED", all_disabled, 120)
        statuses = await c.tiering_status(["orders", "payments"])
        table = Table("topic", "state", "tiered epoch", "policy", "segments deleted", "pending brokers")
        for s in statuses:
            policy = s.policy.name.lower()
            pending = ", ".join(str(p.broker_id) for p in s.pending_brokers) or "-"
            table.add_row(s.topic, s.state.name, str(s.tiered_epoch), policy, str(s.segments_deleted), pending)
        step("tiering status", "tiering status")
        console.print(table)
        console.print(bucket_table(state, "what the bucket holds now: orders' objects are gone, payments' kept"))

        step("consume payments from the beginning, across tiers", "topic consume payments --from-beginning")
        total = remote = 0
        for p in range(2):
            async for r in c.consume("payments", p):
                total += 1
                remote += r.remote
        console.print(f"  read {total} records, {remote} of them from S3 (retained after the disable)")

        step("re-enable tiering on payments", "tiering enable payments --wait")
        await c.enable_tiering("payments")
        for p in range(2):
            await c.produce("payments", [f"more-{i}:".encode().ljust(200, b".") for i in range(500)], partition=p)
        st = (await c.tiering_status(["payments"]))[0]
        console.print(
            f"  payments is {st.state.name} at tiered epoch {st.tiered_epoch}; new segments are tagged with it"
        )
        rsm = S3RemoteStorage(client=lc.s3_client(state), bucket=state.bucket)

        async def new_epoch_tiered() -> bool:
            tag = str(st.tiered_epoch)
            return any(rsm.tags(o.key).get("tieredEpoch") == tag for o in rsm.list_objects(state.prefix))

        await until(f"segments tagged with tiered epoch {st.tiered_epoch}", new_epoch_tiered, 30)
        console.print(bucket_table(state, "objects by tiered epoch: old segments keep epoch 1, new ones carry the new"))

        step("delete the tiered topic clicks: its remote data is deleted too (KIP-405)", "topic delete clicks")
        await c.delete_topic("clicks")
        clicks_prefix = f"{state.prefix}clicks-{topic_ids['clicks']}/"

        async def clicks_remote_data_gone() -> bool:
            deleting = await c.remote_deletions(["clicks"])
            return not deleting and not any(True for _ in rsm.list_objects(clicks_prefix))

        await until("the deleted topic's remote data to be deleted", clicks_remote_data_gone, 120)
        console.print("  every partition of clicks is DELETE_PARTITION_FINISHED and none of its objects is left")
        payments_id = (await c.topic("payments"))["topic_id"]
    console.print("\n[bold]leave orphans the way real clusters do[/] (written by hand here)")
    orphans = {
        # An upload whose metadata was never recorded (a broker that died between the PUT and the RLMM write).
        "an upload that never finished": SegmentKey("payments", payments_id, 1, 99_000, Uuid.random()),
        # A zombie upload that landed after clicks' deletion, from a broker that died before removing it.
        "a zombie upload under the deleted clicks": SegmentKey("clicks", topic_ids["clicks"], 0, 0, Uuid.random()),
        # Objects of a topic id no metadata knows (another cluster's, or a restore gone wrong).
        "objects of a topic id nobody knows": SegmentKey("strays", Uuid.random(), 0, 0, Uuid.random()),
    }
    for what, lost in orphans.items():
        key = build_key(state.prefix, lost, Suffix.LOG)
        rsm.client.put_object(Bucket=state.bucket, Key=key, Body=b"\0" * 4096)
        console.print(f"  {what}: {key}")


def scan_story(state: LocalClusterState) -> None:
    out = DEMO_DIR / "scan"
    inventory_command = f"inventory build --dest {DEMO_DIR}/inventory --format parquet"
    step("build an inventory of the bucket (AWS S3 Inventory format)", inventory_command)
    client = lc.s3_client(state)
    inventory_dest = str(DEMO_DIR / "inventory")
    now_ms = wall_ms()
    manifest = build_inventory(
        client, bucket=state.bucket, prefix=state.prefix, dest=inventory_dest, fmt="parquet", now_ms=now_ms
    )
    console.print(f"  {manifest}")
    scan_title = "scan it with Spark against the metadata (grace 0s: the demo's objects are minutes old; default 3d)"
    scan_command = f"scan run --inventory {DEMO_DIR}/inventory --out {out} --grace 0s"
    step(scan_title, scan_command)
    export_dir = export_store(state.metadata_store, out)
    settings = ScanSettings(prefix=state.prefix, grace_ms=0, max_anomalies=0)

    def say(message: str) -> None:
        console.print(f"  [dim]{message}[/]")

    outcome = scan(inventory_uri=manifest, export_dir=export_dir, out_dir=out, settings=settings, progress=say)
    console.print(render_text(outcome.summary))
    console.print(f"  HTML report with the chart: [bold]{outcome.report}[/]")
    console.print("  reclaim it after the demo (dry run first): start the cluster again, then reclaim")
    console.print(f"  [dim]$ tieredctl cluster up --dir {DEMO_DIR}[/]")
    console.print(f"  [dim]$ tieredctl reclaim {out} --cluster-dir {DEMO_DIR} --older-than 0s[/]")


def main() -> None:
    configure_logging("cli", level=logging.WARNING)
    rule("[bold]tieredctl demo: KIP-950 tiered storage disablement on a local cluster")
    directory = DEMO_DIR.resolve()
    if LocalClusterState.load_if_present(directory) is not None:
        lc.down(directory, purge=True)
    shutil.rmtree(directory, ignore_errors=True)
    step("start a local cluster: embedded S3, 2 controllers, 3 brokers", f"cluster up --dir {DEMO_DIR}")
    broker_overrides = {"broker": {"tiering_interval_ms": 250, "metadata_poll_ms": 50}}

    def say(message: str) -> None:
        console.print(f"  {message}")

    state = lc.up(directory, brokers=3, controllers=2, broker_overrides=broker_overrides, progress=say)
    console.print(f"  bootstrap server {state.bootstrap_server}, S3 {state.s3_endpoint}, bucket {state.bucket}")
    try:
        asyncio.run(story(state))
        scan_story(state)
    finally:
        step("stop the cluster", f"cluster down --dir {DEMO_DIR}")
        stopped = lc.down(directory)
        for p in stopped.processes:
            console.print(f"  stopped {p.role} {p.id} (pid {p.pid})")
        console.print(f"  its data is kept: 'tieredctl cluster up --dir {DEMO_DIR}' resumes it")
    rule("[bold green]demo complete")


if __name__ == "__main__":
    main()
