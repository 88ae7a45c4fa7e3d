"""The embedded S3 with a key pair serves only requests signed with it, as S3 answers the others; without one it
serves anyone, as before; and its objects survive a stop and start with the pair on.

moto's server in this process (:class:`~orchestrator.local.embedded_s3.S3Server`, port 0) and real boto3 clients,
plus one real embedded S3 process for the snapshot. moto's backend is one per process, so each test uses buckets
of its own. The whole secured cluster is in ``test_secure_cluster.py``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions as bce
import pytest
from botocore import UNSIGNED
from botocore.config import Config

from orchestrator.local.embedded_s3 import S3Server
from orchestrator.local.processes import S3_STOP_TIMEOUT_S, start_embedded_s3, stop_process
from orchestrator.local.s3_keys import KeyPair, read_key_pair, write_key_pair
from orchestrator.local.state import ProcessInfo
from remote_storage.s3 import make_s3_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PAIR = KeyPair.generate()


def _client(endpoint: str, pair: KeyPair) -> Any:
    return make_s3_client(
        endpoint_url=endpoint, access_key_id=pair.access_key_id, secret_access_key=pair.secret_access_key
    )


def _anonymous(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=Config(signature_version=UNSIGNED))


def _error(call: Any) -> tuple[int, str]:
    with pytest.raises(bce.ClientError) as refused:
        call()
    response = refused.value.response
    return int(response["ResponseMetadata"]["HTTPStatusCode"]), str(response["Error"]["Code"])


@pytest.fixture
def secured() -> Iterator[str]:
    server = S3Server("127.0.0.1", 0, PAIR)
    host, port = server.host_and_port
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_the_clusters_pair_lists_puts_and_reads_and_its_presigned_urls_work(secured: str) -> None:
    own = _client(secured, PAIR)
    own.create_bucket(Bucket="tiered")
    own.put_object(Bucket="tiered", Key="orders-1/0/seg.log", Body=b"segment", Metadata={"remote-size": "7"})
    own.put_object_tagging(
        Bucket="tiered", Key="orders-1/0/seg.log", Tagging={"TagSet": [{"Key": "tieredEpoch", "Value": "0"}]}
    )
    listed = own.list_objects_v2(Bucket="tiered", Prefix="orders-1/")
    assert [o["Key"] for o in listed["Contents"]] == ["orders-1/0/seg.log"]
    got = own.get_object(Bucket="tiered", Key="orders-1/0/seg.log")
    assert (got["Body"].read(), got["Metadata"]) == (b"segment", {"remote-size": "7"})
    own.delete_objects(Bucket="tiered", Delete={"Objects": [{"Key": "orders-1/0/seg.log"}]})
    own.put_object(Bucket="tiered", Key="a b/+plus=/été", Body=b"odd")
    presigner = boto3.client(  # botocore presigns with Signature Version 2 unless told s3v4
        "s3",
        endpoint_url=secured,
        region_name="us-east-1",
        aws_access_key_id=PAIR.access_key_id,
        aws_secret_access_key=PAIR.secret_access_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    params = {"Bucket": "tiered", "Key": "a b/+plus=/été"}
    url = presigner.generate_presigned_url("get_object", Params=params, ExpiresIn=60)
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"odd"
    version_2 = own.generate_presigned_url("get_object", Params=params, ExpiresIn=60)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(version_2, timeout=10)
    assert refused.value.code == 400 and b"<Code>InvalidRequest</Code>" in refused.value.read()


def test_anonymous_requests_are_access_denied_and_create_nothing(secured: str) -> None:
    own = _client(secured, PAIR)
    own.create_bucket(Bucket="anonymous-target")
    anonymous = _anonymous(secured)
    assert _error(lambda: anonymous.put_object(Bucket="anonymous-target", Key="planted", Body=b"x")) == (
        403,
        "AccessDenied",
    )
    assert _error(lambda: anonymous.list_objects_v2(Bucket="anonymous-target")) == (403, "AccessDenied")
    assert _error(lambda: anonymous.create_bucket(Bucket="planted")) == (403, "AccessDenied")
    assert own.list_objects_v2(Bucket="anonymous-target").get("KeyCount") == 0
    assert "planted" not in {b["Name"] for b in own.list_buckets()["Buckets"]}
    for path in ("/anonymous-target/planted", "/moto-api/data.json", "/moto-api/reset"):  # moto's own API is closed too
        request = urllib.request.Request(secured + path, method="POST" if path.endswith("reset") else "GET")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        body = refused.value.read()
        assert refused.value.code == 403 and b"<Code>AccessDenied</Code>" in body
        assert refused.value.headers["Content-Type"] == "application/xml"
    assert "anonymous-target" in {b["Name"] for b in own.list_buckets()["Buckets"]}  # the reset reset nothing


def test_a_wrong_secret_or_an_unknown_key_id_is_refused_as_s3_refuses_it(secured: str) -> None:
    own = _client(secured, PAIR)
    own.create_bucket(Bucket="wrong-keys-target")
    wrong_secret = _client(secured, KeyPair(PAIR.access_key_id, "x" * 40))
    assert _error(lambda: wrong_secret.put_object(Bucket="wrong-keys-target", Key="k", Body=b"x")) == (
        403,
        "SignatureDoesNotMatch",
    )
    assert _error(lambda: wrong_secret.list_objects_v2(Bucket="wrong-keys-target")) == (403, "SignatureDoesNotMatch")
    unknown = _client(secured, KeyPair("AKIAIOSFODNN7EXAMPLE", PAIR.secret_access_key))
    assert _error(lambda: unknown.list_objects_v2(Bucket="wrong-keys-target")) == (403, "InvalidAccessKeyId")
    assert own.list_objects_v2(Bucket="wrong-keys-target").get("KeyCount") == 0


def test_without_a_pair_the_server_serves_anyone_as_before() -> None:
    server = S3Server("127.0.0.1", 0, None)
    host, port = server.host_and_port
    try:
        anonymous = _anonymous(f"http://{host}:{port}")
        anonymous.create_bucket(Bucket="open")
        anonymous.put_object(Bucket="open", Key="k", Body=b"x")
        assert [o["Key"] for o in anonymous.list_objects_v2(Bucket="open")["Contents"]] == ["k"]
    finally:
        server.stop()


def test_the_pair_file_is_private_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "s3-credentials"
    write_key_pair(path, PAIR)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_key_pair(path) == PAIR
    assert "[default]" in path.read_text()  # an AWS shared credentials file, for any AWS tool
    assert PAIR.secret_access_key not in repr(PAIR)


def test_a_secured_embedded_s3_process_keeps_its_objects_across_a_stop_and_start(tmp_path: Path) -> None:
    credentials = tmp_path / "s3-credentials"
    write_key_pair(credentials, PAIR)
    snapshots = tmp_path / "s3"
    started: list[ProcessInfo] = []
    try:
        first = start_embedded_s3(tmp_path / "first.log", snapshot_dir=snapshots, credentials_file=credentials)
        started.append(first)
        endpoint = f"http://127.0.0.1:{first.port}"
        assert _error(lambda: _anonymous(endpoint).list_buckets()) == (403, "AccessDenied")
        own = _client(endpoint, PAIR)
        own.create_bucket(Bucket="tiered")
        own.put_object(Bucket="tiered", Key="kept", Body=b"kept bytes")
        stop_process(first, timeout_s=S3_STOP_TIMEOUT_S)

        second = start_embedded_s3(tmp_path / "second.log", snapshot_dir=snapshots, credentials_file=credentials)
        started.append(second)
        endpoint = f"http://127.0.0.1:{second.port}"
        assert _client(endpoint, PAIR).get_object(Bucket="tiered", Key="kept")["Body"].read() == b"kept bytes"
        assert _error(lambda: _anonymous(endpoint).get_object(Bucket="tiered", Key="kept")) == (403, "AccessDenied")
    finally:
        for p in started:
            stop_process(p, timeout_s=S3_STOP_TIMEOUT_S)
