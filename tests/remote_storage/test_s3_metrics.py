"""The S3 client's metrics: every request timed by operation, failures counted by S3 error code (or, with no answer,
by the client's exception), against moto's server and a port nobody listens on."""

from __future__ import annotations

import socket

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.errors import InvalidArgument
from orchestrator.metrics import RemoteStorageMetrics
from remote_storage.s3 import S3RemoteStorage, make_s3_client

pytestmark = pytest.mark.integration


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_each_request_is_timed_by_operation_and_each_error_answer_counted_by_its_code(moto_endpoint, bucket):
    registry = CollectorRegistry()
    client = make_s3_client(endpoint_url=moto_endpoint, metrics=RemoteStorageMetrics(registry))
    client.put_object(Bucket=bucket, Key="a", Body=b"x")
    client.put_object(Bucket=bucket, Key="b", Body=b"y")
    client.get_object(Bucket=bucket, Key="a")["Body"].read()
    with pytest.raises(ClientError):
        client.get_object(Bucket=bucket, Key="missing")
    got = _samples(registry)
    count = "tieredctl_s3_request_duration_seconds_count"
    assert got[(count, (("operation", "PutObject"),))] == 2
    assert got[(count, (("operation", "GetObject"),))] == 2
    errors = {k[1]: v for k, v in got.items() if k[0] == "tieredctl_s3_request_errors_total"}
    assert errors == {(("code", "NoSuchKey"), ("operation", "GetObject")): 1}


def test_a_request_that_gets_no_answer_is_counted_by_the_clients_exception():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nobody listens there
    registry = CollectorRegistry()
    metrics = RemoteStorageMetrics(registry)
    client = make_s3_client(endpoint_url=f"http://127.0.0.1:{port}", connect_timeout=1, metrics=metrics)
    with pytest.raises(EndpointConnectionError):
        client.head_object(Bucket="b", Key="k")
    got = _samples(registry)
    labels = (("code", "EndpointConnectionError"), ("operation", "HeadObject"))
    assert got[("tieredctl_s3_request_errors_total", labels)] == 1
    assert got[("tieredctl_s3_request_duration_seconds_count", (("operation", "HeadObject"),))] == 1


def test_the_storage_counts_the_objects_it_deleted_and_not_the_ones_it_refused(s3_client, bucket):
    registry = CollectorRegistry()
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, prefix="tiered/", metrics=RemoteStorageMetrics(registry))
    keys = [f"tiered/t-1/{i}" for i in range(3)]
    for k in keys:
        s3_client.put_object(Bucket=bucket, Key=k, Body=b"z")
    outcome = rsm.delete_keys([*keys, "tiered/t-1/never-written"], within_prefix="tiered/t-1/")
    assert outcome.ok and len(outcome.deleted) == 4  # a missing key counts as deleted: deletion is idempotent
    with pytest.raises(InvalidArgument, match="outside"):
        rsm.delete_keys(["elsewhere/x"], within_prefix="tiered/t-1/")
    assert _samples(registry)[("tieredctl_remote_objects_deleted_total", ())] == 4
