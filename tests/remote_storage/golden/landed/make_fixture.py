"""Writes the fixture of this directory: one segment as the landed code's broker tiered it, before the objects became
Aiven's. Kept so that a broker of the current code is shown to read and delete what was acknowledged before.

It must run with the landed code on the import path, not this checkout's:

    git archive fb2156f5fa9ed72877d294601cbe87c4e264bd83 | tar -x -C /tmp/landed
    cd /tmp/landed && PYTHONPATH=/tmp/landed python <this checkout>/tests/remote_storage/golden/landed/make_fixture.py \
        <this checkout>/tests/remote_storage/golden/landed

It starts moto's server in-process, has the landed broker (its RemoteLogManager, through the landed test harness)
tier one segment of topic ``orders`` partition 0 (30 records, value ``<offset>:`` plus 40 ``x``, timestamps 1000 +
10 * offset, leader epoch -1 as the landed harness wrote them; an offset index entry every 256 bytes), then saves
the three objects under their key's file names and ``segment.json``: the RLMM entry of the segment and the
objects' keys and tags.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from moto.server import ThreadedMotoServer

from orchestrator.broker.local_log import LogConfig
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.s3 import make_s3_client
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter


def main(out: Path) -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        client = make_s3_client(endpoint_url=f"http://{host}:{port}", access_key_id="x", secret_access_key="x")
        client.create_bucket(Bucket="landed")
        with tempfile.TemporaryDirectory() as tmp:
            store_path = Path(tmp) / "metadata.db"
            writer = ControllerWriter(SqliteMetadataStore(store_path))
            broker = BrokerUnderTest(
                broker_id=1,
                data_dir=Path(tmp) / "broker-1",
                store_path=store_path,
                s3_client=client,
                bucket="landed",
                log_config=LogConfig(segment_bytes=10**6, segment_ms=2**62, index_interval_bytes=256),  # one segment
            )
            tid = writer.create_topic("orders")
            plog = broker.log(tid)
            for offset in range(30):
                plog.append([(None, f"{offset}:".encode() + b"x" * 40, 1000 + 10 * offset)])
            copied = broker.tier(tid)
            assert copied == 1, (copied, plog.segments())
            broker.rlmm.refresh()
            [seg] = broker.rlmm.live_segments(tid, 0)
            keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="landed")["Contents"])
            for key in keys:
                body = client.get_object(Bucket="landed", Key=key)["Body"].read()
                (out / key.rsplit("/", 1)[1]).write_bytes(body)
            doc = {
                "written_by": "fb2156f5fa9ed72877d294601cbe87c4e264bd83",
                "prefix": "tiered/",
                "keys": keys,
                "tags": {key: client.get_object_tagging(Bucket="landed", Key=key)["TagSet"] for key in keys},
                "segment": {
                    "topic": seg.topic,
                    "topic_id": str(seg.topic_id),
                    "partition": seg.partition,
                    "segment_id": str(seg.segment_id),
                    "start_offset": seg.start_offset,
                    "end_offset": seg.end_offset,
                    "max_timestamp_ms": seg.max_timestamp_ms,
                    "size_bytes": seg.size_bytes,
                    "tiered_epoch": seg.tiered_epoch,
                    "broker_id": seg.broker_id,
                },
            }
            (out / "segment.json").write_text(json.dumps(doc, indent=2) + "\n")
            broker.close()
            writer.store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
