"""``make demo``: the main job end to end on the embedded defaults (moto's S3 server on loopback, a SQLite store).

This first version runs every part in one process: the controller's records are appended under a real lease,
one broker tiers real segment files to the embedded S3, and KIP-950 disablement runs through the broker's
DisableRemoteTopic handler. (The multi-process local cluster story replaces it when ``cluster up`` exists.)

Story: create two tiered topics, produce, tier to S3, disable ``orders`` with the delete policy and ``payments``
with retain, show what the bucket holds, read ``payments`` back from offset 0 across tiers, re-enable it and show
that new objects carry the new tiered epoch.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orchestrator.broker.disable_handler import DisableRemoteTopicHandler, DisableStatus
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import DisablePolicy, TieredState, make_record
from orchestrator.metadata.sqlite_store import SqliteMetadataStore
from remote_storage.keys import parse_key
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import S3RemoteStorage, make_s3_client

console = Console()


def now_ms() -> int:
    return int(time.time() * 1000)


def main() -> None:
    import logging

    from moto.server import ThreadedMotoServer

    configure_logging("cli", level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with tempfile.TemporaryDirectory(prefix="tieredctl-demo-") as tmp:
            story(Path(tmp), endpoint)
    finally:
        server.stop()


def story(tmp: Path, endpoint: str) -> None:
    console.rule("[bold]tieredctl demo: KIP-950 tiered storage disablement, end to end")
    console.print(f"embedded S3 (moto's server) at {endpoint}, bucket 'demo'; metadata store {tmp / 'metadata.db'}")
    client = make_s3_client(endpoint_url=endpoint)
    client.create_bucket(Bucket="demo")
    store = SqliteMetadataStore(tmp / "metadata.db")
    lease = store.acquire_lease(holder="demo-controller", now_ms=now_ms(), ttl_ms=3_600_000)
    assert lease is not None
    epoch = lease.controller_epoch
    follower = MetadataFollower(store)
    rsm = S3RemoteStorage(client=client, bucket="demo", prefix="tiered/")
    rlmm = RemoteLogMetadataManager(store)
    logs: dict[tuple[Uuid, int], PartitionLog] = {}
    rlm = RemoteLogManager(broker_id=1, rsm=rsm, rlmm=rlmm, logs=logs, image=follower.refresh, now_ms=now_ms)
    handler = DisableRemoteTopicHandler(broker_id=1, store=store, rlm=rlm, logs=logs, refresh_image=follower.refresh,
                                        now_ms=now_ms)  # fmt: skip

    def set_state(tid: Uuid, state: TieredState, policy: DisablePolicy = DisablePolicy.NONE) -> int:
        # DISABLING -> DISABLED completes the current epoch; every other change bumps it (DESIGN §4).
        current = follower.refresh().topics[tid].tiered_epoch
        new_epoch = current if state == TieredState.DISABLED else current + 1
        store.append([make_record("TieredStateRecord", topic_id=tid, tiered_epoch=new_epoch, tiered_state=int(state),
                                  policy=int(policy))], controller_epoch=epoch)  # fmt: skip
        return new_epoch

    topics: dict[str, Uuid] = {}
    for name in ("orders", "payments"):
        tid = Uuid.random()
        topics[name] = tid
        store.append([
            make_record("TopicRecord", name=name, topic_id=tid),
            make_record("PartitionRecord", partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1,
                        leader_epoch=0, partition_epoch=0),
            make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=1, policy=0),
        ], controller_epoch=epoch)  # fmt: skip
        plog = logs[(tid, 0)] = PartitionLog(tmp / "broker-1" / f"{name}-0", topic_id=tid,
                                             config=LogConfig(segment_bytes=16 * 1024), clock=now_ms)  # fmt: skip
        plog.append([(None, f"{name} record {i}".encode().ljust(200, b"."), None) for i in range(1000)])
        plog.roll()
        copied = rlm.copy_partition(tid, 0).copied
        plog.delete_local_segments_before(rlmm.highest_copied_offset(tid, 0) + 1)
        console.print(f"created [bold]{name}[/] ({tid}), produced 1000 records, tiered {copied} segments to S3")
    show_bucket(client, "after tiering")

    for name, policy in (("orders", DisablePolicy.DELETE), ("payments", DisablePolicy.RETAIN)):
        tid = topics[name]
        new_epoch = set_state(tid, TieredState.DISABLING, policy)
        body = {"topic_id": tid, "partition_id": -1, "tiered_epoch": new_epoch, "controller_epoch": epoch}
        for _ in range(1000):
            resp = handler.handle(body)
            if resp["error_code"] or resp["status"] == DisableStatus.DONE:
                break
            time.sleep(0.02)
        set_state(tid, TieredState.DISABLED, policy)
        console.print(f"disabled [bold]{name}[/] with policy {policy.name.lower()}: tiered_epoch {new_epoch}, "
                      f"segments deleted {resp['segments_deleted']}, error code {resp['error_code']}")  # fmt: skip
    show_bucket(client, "after disabling (orders: delete, payments: retain)")

    tid = topics["payments"]
    plog = logs[(tid, 0)]
    offset, read, remote = plog.log_start_offset, 0, 0
    while offset < plog.log_end_offset:
        recs = rlm.fetch(tid, 0, offset)
        read += len(recs)
        remote += sum(1 for r in recs if r.offset < plog.local_log_start_offset)
        offset = recs[-1].offset + 1
    console.print(f"consumed payments from offset 0: {read} records ({remote} read back from S3)")

    new_epoch = set_state(tid, TieredState.ENABLED)
    plog.append([(None, f"payments record {i}".encode().ljust(200, b"."), None) for i in range(1000, 1500)])
    plog.roll()
    rlm.copy_partition(tid, 0)
    console.print(f"re-enabled payments at tiered_epoch {new_epoch} and tiered 500 more records")
    epochs = Counter(rsm.tags(o.key)["tieredEpoch"] for o in rsm.list_objects("tiered/"))
    console.print(f"objects by tieredEpoch tag: {dict(sorted(epochs.items()))}")
    store.close()
    for plog in logs.values():
        plog.close()
    console.rule("[bold green]demo complete")


def show_bucket(client: object, title: str) -> None:
    table = Table(title=f"bucket 'demo' {title}")
    for col in ("topic", "topic id", "objects", "bytes"):
        table.add_column(col)
    counts: Counter[tuple[str, str]] = Counter()
    sizes: Counter[tuple[str, str]] = Counter()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="demo")  # type: ignore[attr-defined]
    for page in pages:
        for o in page.get("Contents", []):
            seg = parse_key(o["Key"], "tiered/").segment
            counts[(seg.topic, str(seg.topic_id))] += 1
            sizes[(seg.topic, str(seg.topic_id))] += o["Size"]
    for (topic, tid), n in sorted(counts.items()):
        table.add_row(topic, tid, str(n), f"{sizes[(topic, tid)]:,}")
    if not counts:
        table.add_row("(empty)", "", "0", "0")
    console.print(table)


if __name__ == "__main__":
    main()
