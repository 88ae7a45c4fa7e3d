"""A TLS + SASL/SCRAM + ACL cluster runs the whole story, and nobody gets in or through who should not (issue 16).

One local cluster (``cluster up --tls --sasl --acls``: real processes, a local CA, the admin's SCRAM login written
into the log before the first controller started). The operator manages users and ACLs with the CLI; the user
``alice`` runs the tiering story with the CLI (disable retain, re-enable, disable delete) and with real Kafka
clients (confluent-kafka over SCRAM, both libraries over mutual TLS); refused attempts get Kafka's codes and change
nothing; the embedded S3 serves only requests signed with the cluster's key pair and every /metrics only HTTPS
scrapes with a certificate of the cluster's CA (issue 37); and no secret of the run is found in any file it wrote
or any output it printed.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions as bce
import pytest
from botocore import UNSIGNED
from botocore.config import Config

from orchestrator.client import TieredClient
from orchestrator.errors import BrokerNotAvailable, SaslAuthenticationFailed
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.local.s3_keys import S3_CREDENTIALS_FILE
from orchestrator.local.security import ADMIN, TLS_DIR, LocalSecurity, password_of
from orchestrator.metadata.records import TieredState
from orchestrator.net.client_properties import write_client_properties
from orchestrator.net.client_security import ClientSecurity, SaslCredentials
from orchestrator.net.connection import KafkaConnection
from orchestrator.protocol.api_keys import ApiKey
from remote_storage.s3 import make_s3_client
from tests.support.kafka_clients import ConfluentJudge, JudgeFailure, KafkaPythonJudge
from tests.support.live_cluster import LiveCluster, bucket_keys, run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

ALICE_PASSWORD = "alice-Secret-7f3a9c1e2b"
BOB_PASSWORD = "bob-Secret-0d9e8c7b6a"
CAROL_PASSWORD = "carol-Secret-5e4d3c2b1a"
TIERED = [
    "--config",
    "remote.storage.enable=true",
    "--config",
    "local.retention.ms=0",
    "--config",
    "segment.bytes=4096",
]


class Run:
    """The secure cluster, the properties files of its users, and everything the run printed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster = LiveCluster(root / "cluster", brokers=2, controllers=2, security=LocalSecurity(True, True, True))
        self.dir = self.cluster.dir
        self.outputs: list[str] = []
        self.tls_dir = self.dir / TLS_DIR
        self.admin_properties = self.dir / "client.properties"
        ca = str(self.tls_dir / "ca.pem")
        self.properties: dict[str, Path] = {"admin": self.admin_properties}
        logins = (
            ("alice", ALICE_PASSWORD),
            ("bob", BOB_PASSWORD),
            ("carol", CAROL_PASSWORD),
            ("eve", "not-a-password"),
        )
        for user, password in logins:
            path = root / f"{user}.properties"
            write_client_properties(path, self.login(user, password))
            self.properties[user] = path
        self.ca = ca

    def login(self, user: str, password: str) -> ClientSecurity:
        return ClientSecurity(
            tls=True, cafile=str(self.tls_dir / "ca.pem"), sasl=SaslCredentials("SCRAM-SHA-512", user, password)
        )

    def tieredctl(self, user: str, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "orchestrator.cli", "--command-config", str(self.properties[user])]
        command += ["--bootstrap-server", self.cluster.bootstrap, *args]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=180, env=dict(os.environ))
        self.outputs += [proc.stdout, proc.stderr]
        if check is not None:
            assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def json(self, user: str, *args: str) -> Any:
        return json.loads(self.tieredctl(user, "-o", "json", *args).stdout)

    def state(self, topic: str) -> str:
        return str(self.json("admin", "tiering", "status", topic)[0]["state"])


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("secure")
    world = Run(root)
    try:
        yield world
    finally:
        world.cluster.close()


@pytest.fixture(scope="module")
def users(secure: Run) -> Run:
    """alice may do everything to topics named orders*, and find the controller; bob may do nothing but find the
    controller; carol, nothing at all (no ACL names her)."""
    for user, password in (("alice", ALICE_PASSWORD), ("bob", BOB_PASSWORD), ("carol", CAROL_PASSWORD)):
        password_file = secure.root / f"{user}.password"
        password_file.write_text(password + "\n")
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            add = ["users", "add", user, "--mechanism", mechanism, "--password-file", str(password_file)]
            secure.tieredctl("admin", *add)
    secure.tieredctl(
        "admin", "acls", "add", "--principal", "User:alice", "--operation", "All", "--topic", "orders", "--prefixed"
    )
    for user in ("alice", "bob"):  # tieredctl finds the active controller with DescribeCluster
        secure.tieredctl("admin", "acls", "add", "--principal", f"User:{user}", "--operation", "Describe", "--cluster")
    return secure


def test_the_admin_manages_users_and_acls_and_status_says_the_cluster_is_secure(users: Run) -> None:
    listed = {u["user"] if "user" in u else u["name"] for u in users.json("admin", "users", "list")}
    assert {"admin", "alice", "bob"} <= listed
    acls = users.json("admin", "acls", "list", "--principal", "User:alice")
    assert {(a["operation"], a["pattern_type"], a["resource_name"]) for a in acls} == {
        ("ALL", "PREFIXED", "orders"),
        ("DESCRIBE", "LITERAL", "kafka-cluster"),
    }
    status = lc.status(users.dir)
    assert status["security"] == {"tls": True, "sasl": True, "acls": True}
    text = users.tieredctl("admin", "cluster", "status", "--dir", str(users.dir)).stdout
    assert "TLS, SASL/SCRAM, ACLs" in text


def test_alice_runs_the_story_with_the_cli_disable_retain_re_enable_disable_delete(users: Run) -> None:
    users.tieredctl("alice", "topic", "create", "orders-1", "--partitions", "2", *TIERED)
    users.tieredctl("alice", "topic", "produce", "orders-1", "--records", "400", "--record-size", "200")
    topic_id = Uuid.from_string(users.json("alice", "tiering", "status", "orders-1")[0]["topic_id"])
    users.cluster.wait_tiering_settled(topic_id, minimum=4)

    retained = users.json("alice", "tiering", "disable", "orders-1", "--policy", "retain", "--wait", "--timeout", "60")
    assert retained["state"] == "DISABLED"
    consumed = users.json("alice", "topic", "consume", "orders-1", "--from-beginning")
    assert consumed["records"] == 400  # retain: everything still readable, remote segments included

    users.tieredctl("alice", "tiering", "enable", "orders-1")
    assert users.state("orders-1") == "ENABLED"
    users.tieredctl("alice", "topic", "produce", "orders-1", "--records", "200", "--record-size", "200")

    deleted = users.json("alice", "tiering", "disable", "orders-1", "--policy", "delete", "--wait", "--timeout", "90")
    assert deleted["state"] == "DISABLED"
    s3 = lc.s3_client(users.cluster.state)
    wait_until(
        "the topic's remote objects to be deleted",
        lambda: not [k for k in bucket_keys(s3, users.cluster.state.bucket) if str(topic_id) in k],
        timeout_s=60,
    )


def test_refused_requests_get_kafkas_codes_and_change_nothing(users: Run) -> None:
    denied = users.tieredctl("alice", "topic", "create", "payments", "--partitions", "1", check=1)
    assert "TOPIC_AUTHORIZATION_FAILED" in denied.stderr
    admin_topics = {t["topic"] for t in users.json("admin", "topic", "list")}
    assert "payments" not in admin_topics

    assert (
        "CLUSTER_AUTHORIZATION_FAILED"
        in users.tieredctl(
            "alice", "acls", "add", "--principal", "User:alice", "--operation", "All", "--cluster", check=1
        ).stderr
    )
    assert users.json("admin", "acls", "list", "--principal", "User:alice", "--cluster")[0]["operation"] == "DESCRIBE"

    users.tieredctl("alice", "topic", "create", "orders-kept", "--partitions", "1", *TIERED)
    assert {t["topic"] for t in users.json("bob", "topic", "list")} == set()  # bob may see no topic
    refused = users.tieredctl("bob", "tiering", "disable", "orders-kept", "--policy", "delete", check=1)
    assert "TOPIC_AUTHORIZATION_FAILED" in refused.stderr
    assert users.state("orders-kept") == "ENABLED"

    log = (users.dir / "logs" / f"controller-{users.cluster.active_controller().id}.log").read_text()
    audit = [json.loads(line) for line in log.splitlines() if '"authz.denied"' in line]
    assert {(a["principal"], a["resource"]) for a in audit} >= {("User:alice", "payments"), ("User:bob", "orders-kept")}


def test_a_user_without_cluster_describe_hears_she_is_not_authorized_not_that_no_broker_answered(users: Run) -> None:
    """carol logs in, but no ACL lets her describe the cluster, which tieredctl does to find the active controller:
    she must hear the refusal (Kafka's code, from the first broker that answered), not that no server answered."""
    refused = users.tieredctl("carol", "topic", "create", "orders-carol", "--partitions", "1", check=1)
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    assert "BROKER_NOT_AVAILABLE" not in refused.stderr, refused.stderr
    assert "orders-carol" not in {t["topic"] for t in users.json("admin", "topic", "list")}


def test_unauthenticated_attempts_are_refused(users: Run) -> None:
    wrong = users.tieredctl("eve", "topic", "list", check=1)
    assert "SASL_AUTHENTICATION_FAILED" in wrong.stderr

    async def attempt(security: ClientSecurity) -> None:
        async with TieredClient(users.cluster.bootstrap, timeout_s=3, security=security) as client:
            await client.metadata()

    with pytest.raises(SaslAuthenticationFailed):
        run(attempt(users.login("alice", "wrong password")))
    for nobody in (ClientSecurity(tls=True, cafile=users.ca), ClientSecurity()):  # TLS without a login; plaintext
        with pytest.raises(BrokerNotAvailable):
            run(attempt(nobody))


def test_only_the_clusters_own_processes_may_send_disable_remote_topic_or_heartbeat(users: Run) -> None:
    users.tieredctl("alice", "topic", "create", "orders-fenced", "--partitions", "1", *TIERED)
    status = users.json("admin", "tiering", "status", "orders-fenced")[0]
    broker = users.cluster.process("broker", 1)
    controller = users.cluster.active_controller()
    alice = users.login("alice", ALICE_PASSWORD)

    async def send() -> tuple[int, int]:
        async with await KafkaConnection.open(
            "127.0.0.1", broker.port, ssl_context=alice.ssl_context(), sasl=alice.sasl
        ) as conn:
            body = {"topic_id": Uuid.from_string(status["topic_id"]), "tiered_epoch": 99, "partition_id": 0}
            disable = await conn.request(ApiKey.DISABLE_REMOTE_TOPIC, 0, body, timeout_s=5)
        async with await KafkaConnection.open(
            "127.0.0.1", controller.port, ssl_context=alice.ssl_context(), sasl=alice.sasl
        ) as conn:
            heartbeat = {"broker_id": 1, "broker_epoch": 1, "current_metadata_offset": 0, "want_fence": True}
            fenced = await conn.request(ApiKey.BROKER_HEARTBEAT, 0, heartbeat, timeout_s=5)
        return int(disable["error_code"]), int(fenced["error_code"])

    assert run(send()) == (31, 31)  # CLUSTER_AUTHORIZATION_FAILED, both
    assert users.state("orders-fenced") == "ENABLED"
    assert {b["node_id"] for b in users.json("admin", "broker", "list")} >= {1, 2}  # nobody was fenced


def test_real_kafka_clients_authenticate_with_scram_and_with_mutual_tls(users: Run) -> None:
    scram = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": users.ca,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": ALICE_PASSWORD,
    }
    confluent = ConfluentJudge(users.cluster.bootstrap, **scram)
    try:
        confluent.create_topic("orders-confluent", 1, {"remote.storage.enable": "true"})
        confluent.incremental_alter_configs(
            "orders-confluent", {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"}
        )
        wait_until("the disable to finish", lambda: users.state("orders-confluent") == TieredState.DISABLED.name)
        confluent.incremental_alter_configs("orders-confluent", {"remote.storage.enable": "true"})  # re-enable
        assert users.state("orders-confluent") == TieredState.ENABLED.name
        confluent.incremental_alter_configs(
            "orders-confluent", {"remote.storage.enable": "false", "remote.log.disable.policy": "retain"}
        )
        wait_until("the retain to finish", lambda: users.state("orders-confluent") == TieredState.DISABLED.name)
        assert users.json("admin", "tiering", "status", "orders-confluent")[0]["policy"] == "retain"
        with pytest.raises(JudgeFailure, match=r"TOPIC_AUTHORIZATION_FAILED|Authorization"):
            confluent.create_topic("payments-confluent", 1, {})
    finally:
        confluent.close()

    admin_cert = {"certfile": str(users.tls_dir / f"{ADMIN}.pem"), "keyfile": str(users.tls_dir / f"{ADMIN}-key.pem")}
    mtls = {
        "security.protocol": "SSL",
        "ssl.ca.location": users.ca,
        "ssl.certificate.location": admin_cert["certfile"],
        "ssl.key.location": admin_cert["keyfile"],
    }
    confluent = ConfluentJudge(users.cluster.bootstrap, **mtls)
    try:
        assert "orders-confluent" in confluent.list_topics()  # User:admin, from the certificate: a super user
    finally:
        confluent.close()

    kafka_python = KafkaPythonJudge(
        users.cluster.bootstrap,
        security_protocol="SSL",
        ssl_cafile=users.ca,
        ssl_certfile=admin_cert["certfile"],
        ssl_keyfile=admin_cert["keyfile"],
        ssl_check_hostname=False,
    )
    try:
        kafka_python.create_topic("payments-mtls", 1, {})
        assert "payments-mtls" in kafka_python.list_topics()
    finally:
        kafka_python.close()
    kafka_python = KafkaPythonJudge(
        users.cluster.bootstrap,
        security_protocol="SASL_SSL",
        ssl_cafile=users.ca,
        ssl_check_hostname=False,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=ALICE_PASSWORD,
    )
    try:
        kafka_python.create_topic("orders-kafka-python", 1, {})
        assert kafka_python.describe_topic("orders-kafka-python") == 1
        with pytest.raises(Exception, match="TopicAuthorizationFailed") as refused:  # kafka-python's own error
            kafka_python.create_topic("payments-kafka-python", 1, {})
        assert "Error 29" in str(refused.value)
    finally:
        kafka_python.close()


def _s3_error(call: Any) -> tuple[int, str]:
    with pytest.raises(bce.ClientError) as refused:
        call()
    response = refused.value.response
    return int(response["ResponseMetadata"]["HTTPStatusCode"]), str(response["Error"]["Code"])


def test_the_embedded_s3_serves_only_requests_signed_with_the_clusters_key_pair(users: Run) -> None:
    state = users.cluster.state
    pair_file = users.dir / S3_CREDENTIALS_FILE
    assert pair_file.stat().st_mode & 0o777 == 0o600 and (users.dir / "security").stat().st_mode & 0o777 == 0o700
    anonymous = boto3.client(
        "s3", endpoint_url=state.s3_endpoint, region_name="us-east-1", config=Config(signature_version=UNSIGNED)
    )
    assert _s3_error(lambda: anonymous.put_object(Bucket=state.bucket, Key="planted", Body=b"x")) == (
        403,
        "AccessDenied",
    )
    assert _s3_error(lambda: anonymous.list_objects_v2(Bucket=state.bucket)) == (403, "AccessDenied")
    assert state.s3_credentials is not None
    access_key_id = state.s3_credentials[0]
    wrong = make_s3_client(endpoint_url=state.s3_endpoint, access_key_id=access_key_id, secret_access_key="x" * 40)
    assert _s3_error(lambda: wrong.put_object(Bucket=state.bucket, Key="planted", Body=b"x")) == (
        403,
        "SignatureDoesNotMatch",
    )
    assert _s3_error(lambda: wrong.list_objects_v2(Bucket=state.bucket)) == (403, "SignatureDoesNotMatch")

    own = lc.s3_client(state)  # the cluster's own pair, as every process and command of the cluster uses it
    assert "planted" not in bucket_keys(own, state.bucket)
    # The brokers tier with the pair: a new tiered topic's segments arrive in the bucket.
    users.tieredctl("admin", "topic", "create", "orders-signed", "--partitions", "1", *TIERED)
    users.tieredctl("admin", "topic", "produce", "orders-signed", "--records", "200", "--record-size", "200")
    topic_id = users.json("admin", "tiering", "status", "orders-signed")[0]["topic_id"]
    wait_until("a segment of the topic in S3", lambda: any(topic_id in k for k in bucket_keys(own, state.bucket)))
    # A CLI command that reads the bucket finds the pair by itself, as the README runs it.
    inventory = users.root / "inventory"
    users.tieredctl("admin", "inventory", "build", "--dest", str(inventory), "--cluster-dir", str(users.dir))
    assert (inventory / "manifest.json").exists()


def test_every_metrics_endpoint_is_https_and_needs_a_certificate_of_the_clusters_ca(users: Run) -> None:
    urls = [p["metrics_url"] for p in lc.status(users.dir)["processes"] if p["role"] != "s3"]
    assert len(urls) == 4 and all(url.startswith("https://127.0.0.1:") for url in urls)
    scraper = lc.metrics_ssl_context(users.cluster.state)  # the CA and the operator's certificate
    no_certificate = ssl.create_default_context(cafile=users.ca)
    for url in urls:
        with urllib.request.urlopen(url, timeout=10, context=scraper) as response:
            assert "tieredctl_metadata_image_offset" in response.read().decode()
        # TLS 1.3: the server's refusal of a client without a certificate arrives as the client reads the answer.
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            urllib.request.urlopen(url, timeout=10, context=no_certificate)
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP: dropped in the handshake
            urllib.request.urlopen(url.replace("https://", "http://"), timeout=10)
    text = users.tieredctl("admin", "cluster", "status", "--dir", str(users.dir)).stdout
    assert "metrics https://127.0.0.1:" in text and "metrics http://" not in text


def test_no_secret_appears_in_any_file_the_run_wrote_or_any_output(users: Run) -> None:
    """Runs last in the module: every secret of the run, searched for in every file of the cluster's directory
    but the ones made to hold them (security/: keys and password files; client.properties) and in every output."""
    secrets = {
        "alice's password": ALICE_PASSWORD,
        "bob's password": BOB_PASSWORD,
        "carol's password": CAROL_PASSWORD,
        "the admin's password": password_of(users.dir, ADMIN),
        "the S3 secret key": users.cluster.state.s3_credentials[1],  # type: ignore[index]
    }
    assert len(secrets["the S3 secret key"]) >= 24  # the cluster's own, not a fixed one
    for key in sorted(users.tls_dir.glob("*-key.pem")):
        body = "".join(line for line in key.read_text().splitlines() if "PRIVATE KEY" not in line)
        secrets[f"the private key {key.name}"] = body[8:40]  # a run of the key's base64, long enough to be unique
    holders = {users.dir / "security", users.admin_properties, users.dir / "cluster.json"}  # cluster.json: S3 key
    searched = 0
    for path in sorted(users.dir.rglob("*")):
        if not path.is_file() or any(h == path or h in path.parents for h in holders):
            continue
        data = path.read_bytes()
        searched += 1
        for what, secret in secrets.items():
            assert secret.encode() not in data, f"{what} is in {path}"
    outputs = "\n".join(users.outputs)
    for what, secret in secrets.items():
        assert secret not in outputs, f"{what} was printed"
    assert searched > 10 and len(users.outputs) > 20
