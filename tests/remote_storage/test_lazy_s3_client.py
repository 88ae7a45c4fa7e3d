"""The S3 client a long-running process may never use (remote_storage.s3.lazy_s3_client): nothing is built until the
first use, it is built once however many threads come first, a failed build is retried by the next use, and an
endpoint URL or region the client would refuse is refused when the lazy client is made (checked against botocore
itself, which builds the real client)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

from orchestrator.broker.remote_storage_setup import remote_storage
from orchestrator.errors import InvalidArgument, SettingsError
from orchestrator.settings import RemoteStorageManagerSettings, S3Settings
from remote_storage.s3 import LazyS3Client, check_client_settings, lazy_s3_client, make_s3_client
from tests.support import REPO_ROOT


@pytest.mark.unit
def test_nothing_is_built_until_first_use_and_then_once_for_all_threads() -> None:
    made: list[int] = []
    gate = threading.Event()

    class Client:
        region = "here"

    def make() -> Any:
        gate.wait(5)
        made.append(1)
        return Client()

    lazy = LazyS3Client(make)
    assert not lazy.built and made == []
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(lazy.region)) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert seen == ["here"] * 8 and made == [1] and lazy.built


@pytest.mark.unit
def test_a_build_that_fails_is_raised_to_its_caller_and_tried_again_by_the_next_use() -> None:
    attempts: list[int] = []

    def make() -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("no credentials yet")
        return type("Client", (), {"ok": True})()

    lazy = LazyS3Client(make)
    with pytest.raises(RuntimeError, match="no credentials yet"):
        lazy.ok  # noqa: B018
    assert lazy.ok is True and len(attempts) == 2


@pytest.mark.integration
def test_the_lazy_client_is_the_real_client_once_used(moto_endpoint: str, s3_client: Any, bucket: str) -> None:
    s3_client.put_object(Bucket=bucket, Key="k", Body=b"v")
    lazy = lazy_s3_client(endpoint_url=moto_endpoint)
    assert lazy.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    assert lazy.meta.region_name == "us-east-1" and issubclass(lazy.exceptions.NoSuchKey, Exception)


BAD_ENDPOINTS = [
    "not a url",
    "http://[::1",
    "http://bad_host_name",
    "http://-x.example.com",
    "https://",
    "http://x-.example.com",
    "http://a\nb.example.com",
    "http://" + "a" * 64 + ".example.com",
]
GOOD_ENDPOINTS = [
    "http://127.0.0.1:9000",
    "https://s3.eu-west-1.amazonaws.com",
    "http://[::1]:9000",
    "http://minio",
    "http://MinIO.Example.COM.",
    "https://[2001:db8::1]/",
    "http://" + "a" * 63 + ".example.com",
    "ftp://host",
]


@pytest.mark.unit
@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS + GOOD_ENDPOINTS)
def test_an_endpoint_is_refused_up_front_exactly_when_botocore_would_refuse_it(endpoint: str) -> None:
    try:
        make_s3_client(endpoint_url=endpoint)
        botocore_refuses = False
    except ValueError:
        botocore_refuses = True
    assert botocore_refuses == (endpoint in BAD_ENDPOINTS)
    if botocore_refuses:
        with pytest.raises(InvalidArgument, match=r"endpoint_url .* is not a URL with a host"):
            check_client_settings(endpoint_url=endpoint, region="us-east-1")
    else:
        check_client_settings(endpoint_url=endpoint, region="us-east-1")


@pytest.mark.unit
@pytest.mark.parametrize("region", ["bad region!", "-eu", "12345"])
def test_a_region_botocore_would_refuse_is_refused_up_front(region: str) -> None:
    with pytest.raises(Exception, match="region"):
        make_s3_client(region=region)
    with pytest.raises(InvalidArgument, match=f"region '{region}' is not a region name"):
        check_client_settings(endpoint_url=None, region=region)


@pytest.mark.unit
def test_a_broker_whose_s3_endpoint_is_not_a_url_does_not_start_and_says_which_setting() -> None:
    with pytest.raises(SettingsError, match=r"\[s3\] endpoint_url 'localhost 9000' is not a URL with a host"):
        remote_storage(S3Settings(endpoint_url="localhost 9000"), RemoteStorageManagerSettings())


@pytest.mark.unit
def test_a_broker_builds_no_s3_client_until_it_calls_s3() -> None:
    storage = remote_storage(S3Settings(endpoint_url="http://127.0.0.1:1"), RemoteStorageManagerSettings())
    assert isinstance(storage.rsm.client, LazyS3Client) and not storage.rsm.client.built


def _fresh_interpreter(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.integration
def test_a_broker_loads_no_botocore_until_its_first_s3_call_and_then_its_errors_are_ours(
    moto_endpoint: str, s3_client: Any, bucket: str
) -> None:
    """Made and started as a broker makes its storage, nothing of botocore is imported; the first call builds the
    client, and a missing object is then our RemoteObjectNotFound, as with a client built up front."""
    code = f"""
import sys
from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.remote_storage_setup import remote_storage
from orchestrator.settings import RemoteStorageManagerSettings, S3Settings
from remote_storage.retry import botocore_errors
storage = remote_storage(S3Settings(endpoint_url={moto_endpoint!r}, bucket={bucket!r}), RemoteStorageManagerSettings())
before = sorted(m for m in ("botocore", "boto3", "urllib3") if m in sys.modules)
assert botocore_errors("ClientError") == ()
try:
    storage.rsm.tags("no/such/key")
    outcome = "no error"
except Exception as exc:
    outcome = type(exc).__name__
print(before, outcome, "botocore" in sys.modules)
"""
    assert _fresh_interpreter(code) == "[] RemoteObjectNotFound True"
