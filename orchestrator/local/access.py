"""How the operator reaches a local cluster: a client of its S3, the security its admin connects with, and the
TLS context that scrapes its processes' ``/metrics``.

Both read only the cluster's record and files (``cluster.json``, ``client.properties``): they start nothing.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.local.security import OperatorCertificate
from orchestrator.local.state import CLIENT_PROPERTIES, LocalClusterState
from orchestrator.net.client_properties import read_command_config
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity
from remote_storage.s3 import make_s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def s3_client(state: LocalClusterState) -> S3Client:
    """A client of the cluster's S3 (with the embedded server's key pair when it is the embedded one)."""
    access_key_id, secret_access_key = state.s3_credentials or (None, None)
    return make_s3_client(
        endpoint_url=state.s3_endpoint, access_key_id=access_key_id, secret_access_key=secret_access_key
    )


def operator_security(state: LocalClusterState) -> ClientSecurity:
    """How the operator connects to the cluster: as its ``client.properties`` says (plaintext without one)."""
    properties = Path(state.dir) / CLIENT_PROPERTIES
    return read_command_config(properties) if properties.exists() else PLAINTEXT


def metrics_ssl_context(state: LocalClusterState) -> ssl.SSLContext | None:
    """The client context a scrape of the cluster's ``/metrics`` needs: on a secured cluster, the cluster's CA and
    the operator's certificate (what a Prometheus ``tls_config`` names too); None on an unsecured one (plain HTTP)."""
    if not state.metrics_tls:
        return None
    operator = OperatorCertificate.of(Path(state.dir))
    ctx = ssl.create_default_context(cafile=str(operator.cafile))
    ctx.load_cert_chain(str(operator.certfile), str(operator.keyfile))
    return ctx
