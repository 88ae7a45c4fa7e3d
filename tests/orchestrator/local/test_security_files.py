"""What a secured local cluster is planned and prepared with for its embedded S3 and /metrics: a random key pair in
a private file that every process of the cluster is given, and each node's ``[metrics]`` HTTPS with client
certificates; an unsecured cluster keeps today's open S3 and plain HTTP.

Files only (a temporary directory): nothing is started.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.local.plan import ClusterRequest, plan_new
from orchestrator.local.processes import process_env
from orchestrator.local.s3_keys import S3_CREDENTIALS_FILE, read_key_pair
from orchestrator.local.security import LocalSecurity, OperatorCertificate, prepare

pytestmark = pytest.mark.unit

NODES = [("controller", 3000), ("broker", 1)]


@pytest.mark.parametrize("security", [LocalSecurity(tls=True, sasl=True, acls=True), LocalSecurity(sasl=True)])
def test_a_secured_cluster_gets_a_private_key_pair_and_https_metrics_with_client_certificates(
    tmp_path: Path, security: LocalSecurity, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_new(tmp_path, ClusterRequest(security=security))
    assert (plan.state.s3_auth, plan.state.metrics_tls, plan.state.s3_secret_key) == (True, True, None)
    tables, _ = prepare(tmp_path, security, NODES, s3_key_pair=plan.state.s3_auth)

    pair_file = tmp_path / S3_CREDENTIALS_FILE
    assert pair_file.stat().st_mode & 0o777 == 0o600 and pair_file.parent.stat().st_mode & 0o777 == 0o700
    pair = read_key_pair(pair_file)
    assert len(pair.access_key_id) == 20 and len(pair.secret_access_key) >= 40
    assert plan.state.s3_credentials == pair.as_tuple()
    assert pair.secret_access_key not in plan.state.__repr__()

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone-elses")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    env = process_env(plan.state)  # the cluster's pair wins: its S3 takes no other
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == pair.as_tuple()
    assert "AWS_SESSION_TOKEN" not in env

    operator = OperatorCertificate.of(tmp_path)
    for node in ("controller-3000", "broker-1"):
        metrics = tables[node]["metrics"]
        assert metrics["client_cafile"] == str(operator.cafile)
        assert Path(metrics["certfile"]).exists() and Path(metrics["keyfile"]).exists()
        assert ("tls" in tables[node]) is security.tls  # the Kafka port speaks TLS only with --tls
    assert operator.certfile.exists() and operator.keyfile.exists()


def test_an_unsecured_cluster_keeps_an_open_s3_with_its_own_secret_and_plain_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_new(tmp_path, ClusterRequest())
    assert (plan.state.s3_auth, plan.state.metrics_tls) == (False, False)
    assert plan.state.s3_credentials_file is None
    tables, _ = prepare(tmp_path, LocalSecurity(), NODES, s3_key_pair=plan.state.s3_auth)
    assert tables == {"controller-3000": {}, "broker-1": {}}
    assert not (tmp_path / S3_CREDENTIALS_FILE).exists()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-the-shell")
    assert process_env(plan.state)["AWS_ACCESS_KEY_ID"] == "from-the-shell"  # as before: any pair will do


def test_a_cluster_on_another_s3_is_given_no_key_pair_even_when_secured(tmp_path: Path) -> None:
    request = ClusterRequest(s3_endpoint="http://minio:9000", security=LocalSecurity(tls=True))
    state = plan_new(tmp_path, request).state
    assert (state.s3_auth, state.metrics_tls, state.s3_credentials) == (False, True, None)
