"""Golden cases of the codec's cross-check suite: request frames that real clients sent to a live cluster
(kafka-python 3.0, confluent-kafka 2.16 / librdkafka 2.16, kafkajs 2.2, kcat), kept in ``golden/client_frames.jsonl``.

Each frame must read the same with our codec and with kio, and re-encode to the bytes the client sent; bytes after a
body are allowed only where a known client sends them (librdkafka's all-topics Metadata v9+), as Kafka ignores them.
The compatibility tests (``tests/orchestrator/clients``) run the same check on every frame of a live run, so a
client release that sends something new is caught there; these keep the known frames checked on every run.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.client_frames import GOLDEN, problem, read_frames

pytestmark = pytest.mark.unit

FRAMES = list(read_frames([GOLDEN]))


def test_the_golden_set_covers_every_client_and_the_admin_apis() -> None:
    clients = {f["client_id"] for f in FRAMES}
    assert clients == {"kafka-python-judge", "confluent-kafka-judge", "kafkajs-judge", "rdkafka"}
    apis = {f["api"] for f in FRAMES}
    assert {
        "MetadataRequest",
        "ApiVersionsRequest",
        "CreateTopicsRequest",
        "DeleteTopicsRequest",
        "DescribeConfigsRequest",
        "AlterConfigsRequest",
        "IncrementalAlterConfigsRequest",
        "DescribeClusterRequest",
    } <= apis


@pytest.mark.parametrize("entry", FRAMES, ids=[f"{f['client_id']}-{f['api']}-v{f['api_version']}" for f in FRAMES])
def test_a_frame_a_real_client_sent_reads_the_same_with_our_codec_and_kio(entry: dict[str, Any]) -> None:
    assert problem(entry) is None
