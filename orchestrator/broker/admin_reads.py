"""The admin reads a broker answers from its own metadata image: Metadata, DescribeConfigs, DescribeCluster.

A Kafka client sends them to any node it knows of (:mod:`orchestrator.admin_api.reads` shapes the answers); the
broker catches its image up with the store first, so a write the controller acknowledged is in the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from orchestrator.admin_api import reads
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.store import Lease
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request

BROKER_READS = (ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_CLUSTER)


def answer_read(
    request: Request, *, image: MetadataImage, lease: Lease | None, now_ms: int, cluster_id: str
) -> Mapping[str, object]:
    """The answer to one of :data:`BROKER_READS` from ``image``, the controller lease as the store has it now."""
    body, version = request.body, request.header.api_version
    view = reads.cluster_view(image, reads.live_holder(lease, now_ms), cluster_id=cluster_id)
    api_key = request.header.api_key
    if api_key == ApiKey.METADATA:
        return reads.metadata(image, cast(m.MetadataRequest, body), version, view)
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        return reads.describe_configs(image, cast(m.DescribeConfigsRequest, body), version)
    return reads.describe_cluster(cast(m.DescribeClusterRequest, body), version, view)
