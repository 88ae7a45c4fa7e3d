"""The data-plane bench's ceiling (``bench/bare_broker.py``) holds what a real client sends it and serves what a
broker wrote, judged by confluent-kafka (librdkafka): a wrong ceiling would make every ratio beside it wrong.

The served topic is a partition log written by :class:`~orchestrator.broker.local_log.PartitionLog` on real
files, several segments of several batches, so a fetch crosses batch and file boundaries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.dataplane import _bare_broker, _confluent_consume, _confluent_produce, _values
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.ids import Uuid
from orchestrator.protocol.record_batch import decode_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _written_partition(directory: Path, values: list[bytes]) -> Path:
    plog = PartitionLog(
        directory, topic_id=Uuid.random(), config=LogConfig(segment_bytes=20_000), clock=lambda: 1_700_000_000_000
    )
    try:
        for i in range(0, len(values), 50):
            plog.append([(None, v, None) for v in values[i : i + 50]])
        assert len(list(directory.glob("*.log"))) >= 3, "the served log must span several segment files"
    finally:
        plog.close()
    return directory


def test_confluent_kafka_reads_a_brokers_segments_whole_and_its_produce_lands_in_the_file_byte_for_byte(tmp_path):
    served_values = _values(1_000)
    segments = _written_partition(tmp_path / "served-0", served_values)
    produced_values = _values(3_000)
    with _bare_broker(tmp_path / "bare", {"served": segments}) as bootstrap:
        _confluent_consume(bootstrap, "served", served_values)  # raises unless every value comes back, in order
        _confluent_produce(bootstrap, "fresh", produced_values)  # raises unless every record is acknowledged
    written = (tmp_path / "bare" / "fresh-0.log").read_bytes()
    got = [r.value for batch in decode_batches(written) for r in batch.records]
    assert got == produced_values
