"""Through the real broker process and moto's S3 server: a topic tiered with compression and encryption on is read
back from S3 by range reads, by our CLI's consume and by kafka-python; a proxy in front of moto counts the bytes
every GetObject returned, which shows that a small read fetches about one chunk, not the segment.

The broker gets its [rsm] settings (chunk size, compression, encryption with a key pair written as PEM files, all
custom metadata fields) as a real settings file, and reads its key files at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from chaos.s3_proxy import S3FaultProxy, classify
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import Suffix, parse_key
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import make_s3_client
from remote_storage.segment_format.custom_metadata import decode_custom_metadata
from tests.remote_storage.segment_format.aiven_reference import read_objects
from tests.support.kafka_clients import consume_kafka_python
from tests.support.key_pairs import write_key_pair
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CHUNK = 8 * 1024
SEGMENT = 128 * 1024
RECORDS = 3000
VALUE = 200


class CountingProxy(S3FaultProxy):
    """The fault proxy with no faults, counting the body bytes each GetObject returned, by object suffix."""

    def __init__(self, target_url: str) -> None:
        super().__init__(target_url)
        self.got: Counter[str] = Counter()
        self.gets: Counter[str] = Counter()

    def _forward(self, method: str, path: str, headers: Any, body: bytes) -> Any:
        headers = list(headers)
        answer = super()._forward(method, path, headers, body)
        url = urlsplit(path)
        query = parse_qs(url.query, keep_blank_values=True)
        operation, key = classify(method, url.path, query, {k.lower(): v for k, v in headers})
        if operation == "GetObject" and answer[0] < 300:
            with self._lock:
                self.got[key.rsplit(".", 1)[-1]] += len(answer[3])
                self.gets[key.rsplit(".", 1)[-1]] += 1
        return answer

    def reset(self) -> None:
        with self._lock:
            self.got.clear()
            self.gets.clear()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Any:
    s3 = make_s3_client(endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="live-rsm")
    proxy = CountingProxy(moto_endpoint)
    keys = write_key_pair(tmp_path_factory.mktemp("keys"), "k1")
    rsm = {
        "chunk_size": CHUNK,
        "compression_enabled": True,
        "encryption_enabled": True,
        "encryption_key_pair_id": "k1",
        "encryption_key_pairs": [keys.setting],
        "custom_metadata_fields_include": ["REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY"],
    }
    live = LiveCluster(
        tmp_path_factory.mktemp("rsm") / "cluster",
        brokers=1,
        controllers=1,
        s3_endpoint=proxy.url,
        bucket="live-rsm",
        broker_overrides={"rsm": rsm},
    )
    try:
        configs = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": str(SEGMENT)}
        live.call(lambda c: c.create_topic("orders", partitions=1, configs=configs))
        values = [f"{i}:".encode() + os.urandom(VALUE) for i in range(RECORDS)]  # incompressible
        live.call(lambda c: c.produce("orders", values))
        tid = live.status("orders").topic_id
        live.wait_tiering_settled(tid, 3)

        def local_trimmed() -> bool:
            offsets = live.call(lambda c: c.offsets("orders"))
            return offsets.local_log_start_offset > 2 * SEGMENT // (VALUE + 80)

        wait_until("local segments copied and dropped", local_trimmed, timeout_s=60)
        yield live, proxy, s3, keys, tid, values
    finally:
        live.close()
        proxy.close()


def _segments(live: LiveCluster, tid: Any) -> list[Any]:
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.refresh()
        return rlmm.live_segments(tid, 0)


def test_the_objects_are_compressed_encrypted_and_carry_the_custom_metadata(world):
    live, _proxy, s3, keys, tid, values = world
    segments = _segments(live, tid)
    assert len(segments) >= 3
    for seg in segments:
        objects = {
            s.value: s3.get_object(Bucket="live-rsm", Key=k)["Body"].read()
            for s, k in seg.object_keys("tiered/").items()
        }
        back = read_objects(objects, {"k1": keys.private_key})
        manifest = back.manifest
        assert manifest["compression"] and manifest["encryption"]["dataKey"].startswith("k1:")
        assert len(back.segment) == seg.size_bytes
        fields = decode_custom_metadata(seg.custom_metadata)
        assert fields.remote_size == sum(len(b) for b in objects.values()) and fields.object_prefix == "tiered/"
        first = parse_key(seg.object_keys("tiered/")[Suffix.LOG], "tiered/").segment.start_offset
        # The first record's value is in the clear once decrypted, and nowhere in what S3 holds.
        assert back.segment.find(values[first]) > 0 and values[first] not in objects["log"]


def test_a_small_read_from_s3_fetches_about_one_chunk_not_the_segment(world):
    live, proxy, _s3, _keys, tid, _values = world
    seg = _segments(live, tid)[0]
    middle = (seg.start_offset + seg.end_offset) // 2
    proxy.reset()
    entry = live.call(lambda c: c.fetch("orders", 0, middle, max_bytes=1))
    assert entry["error_code"] == 0 and entry["records"]
    # A window of max_bytes + 16 KiB from the index entry before the offset: at most three 8 KiB chunks, each stored
    # as a zstd frame (incompressible data: a few bytes more) in an AES-GCM envelope (28 bytes more).
    assert proxy.gets["log"] == 1 and proxy.got["log"] <= 3 * (CHUNK + 64)
    assert proxy.got["log"] * 3 < seg.size_bytes
    assert proxy.gets["rsm-manifest"] <= 1 and proxy.gets["indexes"] <= 1


def test_our_clis_consume_reads_every_record_from_s3_by_ranges_each_chunk_once(world):
    live, proxy, s3, _keys, tid, _values = world
    proxy.reset()
    env = {**os.environ, "TIEREDCTL_BOOTSTRAP_SERVER": live.bootstrap}
    command = [sys.executable, "-m", "orchestrator.cli", "-o", "json", "topic", "consume", "orders", "--from-beginning"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    consumed = json.loads(done.stdout)
    assert consumed["records"] == RECORDS and consumed["remote_records"] > 2 * SEGMENT // (VALUE + 80)
    stored = sum(
        s3.head_object(Bucket="live-rsm", Key=seg.object_keys("tiered/")[Suffix.LOG])["ContentLength"]
        for seg in _segments(live, tid)
    )
    assert 0 < proxy.got["log"] <= stored  # every chunk GET at most once (the chunk cache), never a whole segment


def test_kafka_python_reads_the_compressed_and_encrypted_remote_segments_back(world):
    live, _proxy, _s3, _keys, _tid, values = world
    records = consume_kafka_python(live.bootstrap, "orders", [0])
    assert [(offset, value) for _, offset, _, value in records] == list(enumerate(values))
