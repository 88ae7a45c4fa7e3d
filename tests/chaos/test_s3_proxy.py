"""The S3 fault proxy in front of moto's server: every operation the cluster uses works unchanged through it; each
fault is seen by botocore as S3's own would be; rules filter by operation and key, draw reproducible dice and stop
at their limit; the mutation log holds exactly what was written and deleted; garbage never stops it.

A real boto3 client (botocore's retries off, as the cluster's) talks to the proxy. Delays are asserted only as
lower bounds.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from chaos.s3_proxy import Mutation, S3Fault, S3FaultProxy, classify, deleted_keys
from remote_storage.s3 import make_s3_client
from tests.support.live_cluster import wait_until

integration = pytest.mark.integration
pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(moto_endpoint, seed=1) as p:
        yield p


@pytest.fixture
def client(proxy: S3FaultProxy):  # type: ignore[no-untyped-def]
    return make_s3_client(endpoint_url=proxy.url, read_timeout=10)


def raw_exchange(proxy: S3FaultProxy, data: bytes) -> bytes:
    """What the proxy answers to ``data`` on a fresh connection, up to its close (b"" if it closed at once)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def mutations(proxy: S3FaultProxy) -> list[tuple[str, str, int]]:
    return [(m.operation, m.key, m.status) for m in proxy.mutations()]


# -- naming requests (pure) ------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("method", "target", "headers", "expected"),
    [
        ("PUT", "/b/a/k%20x", {}, ("PutObject", "a/k x")),
        ("PUT", "/b/k", {"x-amz-copy-source": "/b/src"}, ("CopyObject", "k")),
        ("PUT", "/b/k?partNumber=1&uploadId=u", {}, ("UploadPart", "k")),
        ("PUT", "/b/k?tagging", {}, ("Other", "k")),
        ("GET", "/b/k", {}, ("GetObject", "k")),
        ("GET", "/b/k?uploadId=u", {}, ("Other", "k")),
        ("HEAD", "/b/k", {}, ("HeadObject", "k")),
        ("DELETE", "/b/k", {}, ("DeleteObject", "k")),
        ("DELETE", "/b/k?uploadId=u", {}, ("AbortMultipartUpload", "k")),
        ("POST", "/b/k?uploads", {}, ("CreateMultipartUpload", "k")),
        ("POST", "/b/k?uploadId=u", {}, ("CompleteMultipartUpload", "k")),
        ("POST", "/b?delete", {}, ("DeleteObjects", "")),
        ("GET", "/b?list-type=2&prefix=p%2F", {}, ("ListObjectsV2", "")),
        ("GET", "/b/", {}, ("ListObjects", "")),
        ("GET", "/b?location", {}, ("Other", "")),
        ("PUT", "/b", {}, ("CreateBucket", "")),
        ("HEAD", "/b", {}, ("HeadBucket", "")),
        ("DELETE", "/b", {}, ("DeleteBucket", "")),
        ("GET", "/", {}, ("Other", "")),
    ],
)
def test_requests_are_named_by_operation_and_key(method, target, headers, expected):
    url = urlsplit(target)
    assert classify(method, url.path, parse_qs(url.query, keep_blank_values=True), headers) == expected


@pytest.mark.unit
def test_the_keys_of_a_delete_objects_body_are_read_plain_or_aws_chunked():
    body = b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a/1</Key></Object>'
    body += b"<Object><Key>b &amp; c</Key></Object><Quiet>true</Quiet></Delete>"
    assert deleted_keys(body) == ["a/1", "b & c"]
    chunked = f"{len(body):x};chunk-signature=abc\r\n".encode() + body + b"\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"
    assert deleted_keys(chunked, aws_chunked=True) == ["a/1", "b & c"]


@pytest.mark.unit
def test_bad_rules_are_refused_when_made():
    with pytest.raises(ValueError, match="kind"):
        S3Fault("flaky")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="probability"):
        S3Fault("slowdown", probability=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        S3Fault("slow", delay_s=-1)


# -- relaying ------------------------------------------------------------------------------------------------------


@integration
def test_every_operation_the_cluster_uses_works_unchanged_through_the_proxy(proxy, client):
    bucket = f"proxied-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.head_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="dir/a b+c", Body=b"0123456789")
    assert client.get_object(Bucket=bucket, Key="dir/a b+c")["Body"].read() == b"0123456789"
    ranged = client.get_object(Bucket=bucket, Key="dir/a b+c", Range="bytes=2-5")
    assert ranged["Body"].read() == b"2345" and ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert client.head_object(Bucket=bucket, Key="dir/a b+c")["ContentLength"] == 10
    for i in range(5):
        client.put_object(Bucket=bucket, Key=f"many/{i}", Body=b"x")
    pages = list(client.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2}))
    assert len(pages) >= 3
    assert sorted(o["Key"] for p in pages for o in p.get("Contents", [])) == ["dir/a b+c"] + [
        f"many/{i}" for i in range(5)
    ]
    client.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "many/0"})
    assert client.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"x"
    deleted = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"many/{i}"} for i in (1, 2, 3)]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == ["many/1", "many/2", "many/3"]
    client.delete_object(Bucket=bucket, Key="many/4")

    big = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB: the smallest part but the last
    upload = client.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    parts = [
        {
            "PartNumber": n,
            "ETag": client.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=n, Body=body)["ETag"],
        }
        for n, body in ((1, big), (2, b"tail"))
    ]
    client.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload, MultipartUpload={"Parts": parts})
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == big + b"tail"
    aborted = client.create_multipart_upload(Bucket=bucket, Key="abandoned")["UploadId"]
    client.abort_multipart_upload(Bucket=bucket, Key="abandoned", UploadId=aborted)

    remaining = client.list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in remaining) == ["big", "copy", "dir/a b+c", "many/0"]
    seen = proxy.requests
    for op in (
        "CreateBucket",
        "HeadBucket",
        "PutObject",
        "GetObject",
        "HeadObject",
        "ListObjectsV2",
        "CopyObject",
        "DeleteObjects",
        "DeleteObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
    ):
        assert seen[op] >= 1, op
    assert seen["Other"] == 0 and proxy.errors == 0


# -- faults as botocore sees them ------------------------------------------------------------------------------


@integration
def test_slowdown_is_s3s_503_with_a_request_id_and_nothing_reaches_the_bucket(proxy, client, s3_client, bucket):
    proxy.set_faults([S3Fault("slowdown")])
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.put_object(Bucket=bucket, Key="k", Body=b"v")
    err = caught.value.response
    assert err["Error"]["Code"] == "SlowDown"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert err["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert proxy.mutations() == [] and proxy.faults_served == {"slowdown": 1}


@integration
def test_internal_is_s3s_500_internal_error(proxy, client, bucket):
    proxy.set_faults([S3Fault("internal", operation="HeadBucket")])
    client.list_objects_v2(Bucket=bucket)  # another operation
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.head_bucket(Bucket=bucket)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    proxy.set_faults([S3Fault("internal")])
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.get_object(Bucket=bucket, Key="any")
    assert caught.value.response["Error"]["Code"] == "InternalError"


@integration
def test_botocores_own_retries_see_every_slowdown(proxy, bucket):
    """With botocore's retries on (3 attempts), a rule limited to 2 faults is retried through; one with no limit
    exhausts the attempts and the caller gets SlowDown."""
    config = Config(retries={"total_max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"})
    c = boto3.session.Session().client("s3", endpoint_url=proxy.url, config=config)
    proxy.set_faults([S3Fault("slowdown", operation="PutObject", limit=2)])
    c.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert proxy.faults_served["slowdown"] == 2 and proxy.requests["PutObject"] == 3
    proxy.set_faults([S3Fault("slowdown", operation="PutObject")])
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        c.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert caught.value.response["Error"]["Code"] == "SlowDown"
    assert proxy.requests["PutObject"] == 6


@integration
def test_reset_is_a_connection_error_to_botocore_and_an_rst_on_the_wire(proxy, client, bucket):
    proxy.set_faults([S3Fault("reset", operation="GetObject")])
    with pytest.raises(botocore.exceptions.HTTPClientError):
        client.get_object(Bucket=bucket, Key="k")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        s.sendall(f"GET /{bucket}/k HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        with pytest.raises(ConnectionResetError):
            s.recv(100)
    assert proxy.faults_served == {"reset": 2}
    client.head_bucket(Bucket=bucket)  # other operations pass


@integration
def test_slow_answers_at_least_the_delay_late_and_succeeds(proxy, client, bucket):
    proxy.set_faults([S3Fault("slow", operation="PutObject", delay_s=0.4)])
    started = time.monotonic()
    client.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert time.monotonic() - started >= 0.4
    assert mutations(proxy) == [("PutObject", "k", 200)]


@integration
def test_rules_match_by_operation_and_key_pattern_first_match_wins(proxy, client, bucket):
    client.put_object(Bucket=bucket, Key="hot/1", Body=b"h")
    client.put_object(Bucket=bucket, Key="cold/1", Body=b"c")
    proxy.set_faults(
        [S3Fault("internal", operation="GetObject", key_pattern=r"^hot/"), S3Fault("slowdown", operation="GetObject")]
    )
    with pytest.raises(botocore.exceptions.ClientError) as hot:
        client.get_object(Bucket=bucket, Key="hot/1")
    with pytest.raises(botocore.exceptions.ClientError) as cold:
        client.get_object(Bucket=bucket, Key="cold/1")
    assert hot.value.response["Error"]["Code"] == "InternalError"
    assert cold.value.response["Error"]["Code"] == "SlowDown"
    assert client.head_object(Bucket=bucket, Key="hot/1")["ContentLength"] == 1  # another operation
    proxy.clear()
    assert client.get_object(Bucket=bucket, Key="hot/1")["Body"].read() == b"h"


def _outcomes(moto_endpoint: str, bucket: str, seed: int, n: int = 30) -> list[bool]:
    with S3FaultProxy(moto_endpoint, seed=seed) as p:
        c = make_s3_client(endpoint_url=p.url)
        p.set_faults([S3Fault("slowdown", operation="HeadBucket", probability=0.5)])
        out = []
        for _ in range(n):
            try:
                c.head_bucket(Bucket=bucket)
                out.append(True)
            except botocore.exceptions.ClientError:
                out.append(False)
        return out


@integration
def test_the_dice_are_reproducible_from_the_seed(moto_endpoint, bucket):
    first = _outcomes(moto_endpoint, bucket, seed=7)
    assert first == _outcomes(moto_endpoint, bucket, seed=7)
    assert 0 < first.count(False) < len(first)
    assert first != _outcomes(moto_endpoint, bucket, seed=8)


@integration
def test_a_rule_serves_at_most_its_limit_and_set_faults_starts_it_again(proxy, client, bucket):
    proxy.set_faults([S3Fault("internal", operation="HeadBucket", limit=2)])

    def ok() -> bool:
        try:
            client.head_bucket(Bucket=bucket)
            return True
        except botocore.exceptions.ClientError:
            return False

    assert [ok() for _ in range(4)] == [False, False, True, True]
    proxy.set_faults(proxy.faults)
    assert [ok() for _ in range(3)] == [False, False, True]
    assert proxy.faults_served == {"internal": 4}


# -- the mutation log -----------------------------------------------------------------------------------------------


@integration
def test_the_mutation_log_has_exactly_what_was_written_and_deleted(proxy, client, bucket):
    for key in ("a", "b", "c", "d"):
        client.put_object(Bucket=bucket, Key=key, Body=b"v")
    client.get_object(Bucket=bucket, Key="a")
    client.head_object(Bucket=bucket, Key="a")
    client.list_objects_v2(Bucket=bucket)
    proxy.set_faults([S3Fault("slowdown", key_pattern="^never$")])
    with pytest.raises(botocore.exceptions.ClientError):
        client.put_object(Bucket=bucket, Key="never", Body=b"v")  # faulted: never reached the bucket
    proxy.clear()
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in ("a", "b", "c")]})
    client.delete_object(Bucket=bucket, Key="d")
    assert mutations(proxy) == [
        ("PutObject", "a", 200),
        ("PutObject", "b", 200),
        ("PutObject", "c", 200),
        ("PutObject", "d", 200),
        ("DeleteObjects", "a", 200),
        ("DeleteObjects", "b", 200),
        ("DeleteObjects", "c", 200),
        ("DeleteObject", "d", 204),
    ]
    times = [m.time_ms for m in proxy.mutations()]
    assert times == sorted(times) and all(isinstance(m, Mutation) for m in proxy.mutations())


# -- robustness --------------------------------------------------------------------------------------------------


@integration
@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
        b"NOT A REQUEST LINE AT ALL\r\n\r\n",
        b"GET\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
    ],
)
def test_malformed_requests_get_a_400_or_a_close_and_the_proxy_still_serves(proxy, client, bucket, garbage):
    if garbage.endswith(b"short"):  # a body that never comes: the client gives up and closes its side
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            s.sendall(garbage)
            s.shutdown(socket.SHUT_WR)
            answer = s.recv(100)
    else:
        answer = raw_exchange(proxy, garbage)
    assert answer == b"" or (answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n", 1)[0])
    client.put_object(Bucket=bucket, Key="still", Body=b"serving")
    assert client.get_object(Bucket=bucket, Key="still")["Body"].read() == b"serving"


@integration
def test_close_ends_every_thread_even_with_idle_keep_alive_connections(moto_endpoint, bucket):
    p = S3FaultProxy(moto_endpoint)
    c = make_s3_client(endpoint_url=p.url)
    for _ in range(3):
        c.head_bucket(Bucket=bucket)  # leaves a pooled keep-alive connection open
    with socket.create_connection(("127.0.0.1", p.port), timeout=5):  # and one that never sends a byte
        p.close()
    assert p.live_threads() == 0


@integration
def test_a_hang_outlasts_the_clients_read_timeout_and_the_held_write_still_lands_late(proxy, s3_client, bucket):
    impatient = make_s3_client(endpoint_url=proxy.url, read_timeout=0.3)
    proxy.set_faults([S3Fault("hang", operation="PutObject", delay_s=1.5, limit=1)])
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        impatient.put_object(Bucket=bucket, Key="late", Body=b"v")
    assert proxy.faults_served == {"hang": 1}
    # the client gave up; the request it left behind is forwarded once its hold ends, and the proxy logs it
    wait_until("the held write to land", lambda: ("PutObject", "late", 200) in mutations(proxy), timeout_s=10)
    assert s3_client.get_object(Bucket=bucket, Key="late")["Body"].read() == b"v"
