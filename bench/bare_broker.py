"""The data plane's ceiling: a bare server that speaks just enough Kafka for a client to produce and fetch.

``python -m bench.bare_broker --dir D [--serve TOPIC=SEGMENT_DIR]`` listens on 127.0.0.1 (a free port, printed
as ``port N`` on its first line of output) and serves, with the same server and message codec as a broker
(:class:`~orchestrator.net.server.KafkaServer`, so clients negotiate the same versions of each API):

* **Produce**: the records of each partition are appended, the very bytes received, to ``D/<topic>-<p>.log`` with
  one unbuffered write (as a broker's segment takes them: in the OS, not synced), and answered with the next
  offsets, counted from the batches' headers. Nothing is validated, no offset is written into the batches, no
  index is kept, nothing is replicated: what is left of a broker's work is the protocol and the write.
* **Fetch**: a topic named by ``--serve`` is read from the segment files a broker wrote (``*.log`` of
  ``SEGMENT_DIR``, in order), indexed once at start (each batch's base offset and position): a fetch answers whole
  batches from the one at the fetch offset, up to the partition's byte limit (at least one batch), read from the
  files with ``pread``. Other topics are empty.
* **ListOffsets**: 0 for the earliest, the end of what was produced or served for the latest.
* **Metadata**: every topic asked for exists with one partition, led by this server (node 0).

It serves no other API (no InitProducerId: idempotent producers are not its business) and holds every byte it
was sent. It exists only to be measured against (``bench/dataplane.py``), never to be run as a broker.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from orchestrator.admin_api.responses import normalized
from orchestrator.logging import configure_logging
from orchestrator.net.server import KafkaServer
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.protocol.record_batch import batch_header, frames

NODE_ID = 0
CLUSTER_ID = "bare-broker-bench"


class ServedTopic:
    """One partition's batches in a broker's segment files: ``(base offset, file, position, size)`` each."""

    def __init__(self, segment_dir: Path) -> None:
        self.files: list[int] = []
        self.bases: list[int] = []
        self.places: list[tuple[int, int, int]] = []  # (file index, position, size)
        self.end = 0
        for path in sorted(segment_dir.glob("*.log")):
            data = path.read_bytes()
            fd = os.open(path, os.O_RDONLY)
            self.files.append(fd)
            for position, raw in frames(data):
                header = batch_header(raw)
                self.bases.append(header.base_offset)
                self.places.append((len(self.files) - 1, position, header.size))
                self.end = header.base_offset + header.last_offset_delta + 1
        if not self.bases:
            raise SystemExit(f"bare broker: no record batch in {segment_dir}/*.log")

    def read(self, offset: int, limit: int) -> bytes:
        """Whole batches from the one holding ``offset``, within ``limit`` bytes (one batch at least), from one file."""
        if offset >= self.end:
            return b""
        first = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        file, start, size = self.places[first]
        last = first
        while last + 1 < len(self.places):
            nfile, nposition, nsize = self.places[last + 1]
            if nfile != file or nposition + nsize - start > limit:
                break
            last += 1
            size = nposition + nsize - start
        return os.pread(self.files[file], size, start)


class BareBroker:
    def __init__(self, directory: Path, served: Mapping[str, ServedTopic]) -> None:
        self.directory = directory
        self.served = dict(served)
        self.ends: dict[tuple[str, int], int] = {}
        self.files: dict[tuple[str, int], int] = {}
        self.port = 0

    async def metadata(self, request: Request) -> m.MetadataResponse:
        body = cast(m.MetadataRequest, request.body)
        version = request.header.api_version
        topics = [
            m.MetadataResponseTopic(
                error_code=0,
                name=t["name"],
                is_internal=False,
                partitions=[
                    m.MetadataResponsePartition(
                        error_code=0,
                        partition_index=0,
                        leader_id=NODE_ID,
                        leader_epoch=0,
                        replica_nodes=[NODE_ID],
                        isr_nodes=[NODE_ID],
                        offline_replicas=[],
                    )
                ],
            )
            for t in body["topics"] or []
        ]
        response = m.MetadataResponse(
            brokers=[m.MetadataResponseBroker(node_id=NODE_ID, host="127.0.0.1", port=self.port, rack=None)],
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=topics,
        )
        return cast(m.MetadataResponse, normalized("MetadataResponse", version, response))

    def _append(self, name: str, partition: int, records: bytes) -> int:
        key = (name, partition)
        fd = self.files.get(key)
        if fd is None:
            path = self.directory / f"{name}-{partition}.log"
            fd = self.files[key] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        count = sum(batch_header(raw).last_offset_delta + 1 for _, raw in frames(records))
        view = memoryview(records)
        while view:
            view = view[os.write(fd, view) :]
        base = self.ends.get(key, 0)
        self.ends[key] = base + count
        return base

    async def produce(self, request: Request) -> m.ProduceResponse:
        body = cast(m.ProduceRequest, request.body)
        responses: list[m.TopicProduceResponse] = []
        for topic in body["topic_data"]:
            partitions: list[m.PartitionProduceResponse] = []
            for data in topic["partition_data"]:
                base = self._append(topic["name"], data["index"], data["records"] or b"")
                partitions.append(
                    {
                        "index": data["index"],
                        "error_code": 0,
                        "base_offset": base,
                        "log_append_time_ms": -1,
                        "log_start_offset": 0,
                    }
                )
            responses.append({"name": topic["name"], "partition_responses": partitions})
        return {"responses": responses, "throttle_time_ms": 0}

    def _end(self, name: str, partition: int) -> int:
        served = self.served.get(name)
        return served.end if served is not None and partition == 0 else self.ends.get((name, partition), 0)

    async def fetch(self, request: Request) -> m.FetchResponse:
        body = cast(m.FetchRequest, request.body)
        responses: list[m.FetchableTopicResponse] = []
        for topic in body["topics"]:
            partitions: list[m.FetchResponsePartitionData] = []
            for p in topic["partitions"]:
                served = self.served.get(topic["topic"])
                records = b"" if served is None else served.read(p["fetch_offset"], p["partition_max_bytes"])
                end = self._end(topic["topic"], p["partition"])
                partitions.append(
                    {
                        "partition_index": p["partition"],
                        "error_code": 0,
                        "high_watermark": end,
                        "last_stable_offset": end,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records,
                    }
                )
            responses.append({"topic": topic["topic"], "partitions": partitions})
        return {"error_code": 0, "session_id": 0, "responses": responses, "throttle_time_ms": 0}

    async def list_offsets(self, request: Request) -> m.ListOffsetsResponse:
        body = cast(m.ListOffsetsRequest, request.body)
        topics: list[m.ListOffsetsTopicResponse] = []
        for t in body["topics"]:
            partitions: list[m.ListOffsetsPartitionResponse] = []
            for p in t["partitions"]:
                offset = 0 if p["timestamp"] == -2 else self._end(t["name"], p["partition_index"])
                partitions.append(
                    {
                        "partition_index": p["partition_index"],
                        "error_code": 0,
                        "timestamp": -1,
                        "offset": offset,
                        "leader_epoch": 0,
                    }
                )
            topics.append({"name": t["name"], "partitions": partitions})
        return {"topics": topics, "throttle_time_ms": 0}


async def serve(directory: Path, served: Mapping[str, ServedTopic]) -> None:
    bare = BareBroker(directory, served)
    server = KafkaServer(
        name="bare-broker",
        host="127.0.0.1",
        port=0,
        handlers={
            ApiKey.METADATA: bare.metadata,
            ApiKey.PRODUCE: bare.produce,
            ApiKey.FETCH: bare.fetch,
            ApiKey.LIST_OFFSETS: bare.list_offsets,
        },
    )
    _, bare.port = await server.start()
    print(f"port {bare.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_broker", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where produced records are appended")
    parser.add_argument("--serve", action="append", default=[], metavar="TOPIC=SEGMENT_DIR")
    args = parser.parse_args()
    configure_logging("cli", level=logging.WARNING)  # stdout carries the port line first
    served: dict[str, ServedTopic] = {}
    for entry in args.serve:
        topic, sep, segment_dir = entry.partition("=")
        if not sep or not topic:
            parser.error(f"--serve {entry!r}: expected TOPIC=SEGMENT_DIR")
        served[topic] = ServedTopic(Path(segment_dir))
    args.dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(args.dir, served))


if __name__ == "__main__":
    main()
