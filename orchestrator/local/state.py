"""The record of a local cluster: ``cluster.json`` under its directory, and where its files are.

Light on purpose (json, dataclasses): the CLI reads it for every command that falls back to the local cluster,
and must not load the object-store client to do so. Starting and stopping processes is :mod:`.processes`; the
cluster as a whole is :mod:`.cluster`.

Invariants: ``cluster.json`` is replaced atomically (written to a temporary file, then renamed), so a reader sees
the old record or the new one; it names every process the cluster started, with the settings file that
identifies it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.local.s3_keys import S3_CREDENTIALS_FILE, read_key_pair
from orchestrator.local.s3_snapshot import SNAPSHOT_DIR
from orchestrator.private_files import write_private

STATE_FILE = "cluster.json"
STORE_FILE = "metadata.db"  # the cluster's SQLite metadata store, beside cluster.json
CLIENT_PROPERTIES = "client.properties"  # how the operator connects (cluster up --tls/--sasl); read by the CLI
STORE_PASSWORD_FILE = "config/store-password"  # a PostgreSQL store's password given in --store's URL (mode 0600)
DEFAULT_BUCKET = "tiered-storage"
DEFAULT_PREFIX = "tiered/"
# An unsecured cluster's embedded S3 (moto's server) accepts any key pair; this one is for it alone and never leaves
# the machine. A cluster made since secret keys were generated keeps its own random secret key in cluster.json (0600)
# instead, and a secured one (--tls or --sasl) a random pair its S3 requires, in S3_CREDENTIALS_FILE.
EMBEDDED_S3_CREDENTIALS = ("local", "local")

CLUSTER_FILES = (
    STATE_FILE,
    CLIENT_PROPERTIES,
    "security",
    STORE_FILE,
    f"{STORE_FILE}-wal",
    f"{STORE_FILE}-shm",
    "config",
    "run",
    "data",
    "logs",
    SNAPSHOT_DIR,
)
"""Everything a local cluster writes under its directory: ``cluster down --purge`` deletes exactly these, and
``cluster up`` refuses a directory that holds any of them without a ``cluster.json`` to resume from."""


@dataclass
class ProcessInfo:
    role: str  # s3 | controller | broker
    id: int
    pid: int
    port: int
    config: str | None  # a file its command line names, which identifies it in /proc: its settings file (the
    # embedded S3: its ready file)
    log: str
    metrics_port: int = 0  # a controller's or broker's Prometheus endpoint (0: none; a record from before metrics)


@dataclass
class LocalClusterState:
    dir: str
    bootstrap_server: str
    s3_endpoint: str
    bucket: str
    prefix: str
    embedded_s3: bool
    processes: list[ProcessInfo] = field(default_factory=list)
    store: str | None = None  # an external store's URL without its password (PostgreSQL); None: STORE_FILE here
    tls: bool = False  # cluster up --tls: every port speaks TLS (orchestrator.local.security)
    sasl: bool = False  # cluster up --sasl: SCRAM logins
    acls: bool = False  # cluster up --acls: the authorizer is on
    s3_secret_key: str | None = None  # the embedded S3's secret key for this cluster (random; None: the old fixed one)
    # A secured cluster's embedded S3 serves only requests signed with the pair in S3_CREDENTIALS_FILE (then
    # s3_secret_key is None), and its controllers' and brokers' /metrics are HTTPS with client certificates.
    s3_auth: bool = False
    metrics_tls: bool = False

    @classmethod
    def load(cls, directory: Path) -> LocalClusterState:
        path = directory / STATE_FILE
        if not path.exists():
            raise LocalClusterError(
                f"no local cluster in {directory} (no {STATE_FILE}); start one with 'tieredctl cluster up'"
            )
        try:
            doc = json.loads(path.read_text())
            procs = [ProcessInfo(**p) for p in doc.pop("processes")]
            return cls(**doc, processes=procs)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LocalClusterError(
                f"{path} cannot be read as a local cluster's record ({type(exc).__name__}: {exc}); stop its processes "
                f"by hand if any run, then 'tieredctl cluster down --purge --dir {directory}' deletes the cluster"
            ) from exc

    @classmethod
    def load_if_present(cls, directory: Path) -> LocalClusterState | None:
        """The cluster started in ``directory``, or None when none was."""
        return cls.load(directory) if (directory / STATE_FILE).exists() else None

    @property
    def metadata_store(self) -> Path:
        return Path(self.dir) / STORE_FILE

    @property
    def store_spec(self) -> str:
        """What the processes' ``metadata_store`` says: the external store's URL (no password), or the file."""
        return self.store or str(self.metadata_store)

    @property
    def store_password_file(self) -> Path:
        return Path(self.dir) / STORE_PASSWORD_FILE

    @property
    def s3_credentials_file(self) -> Path | None:
        """The file holding the key pair the embedded S3 requires (None: it requires none)."""
        return Path(self.dir) / S3_CREDENTIALS_FILE if self.embedded_s3 and self.s3_auth else None

    @property
    def s3_credentials(self) -> tuple[str, str] | None:
        """The key pair for this cluster's S3: the embedded server's own, or None (the usual AWS sources)."""
        if not self.embedded_s3:
            return None
        if self.s3_credentials_file is not None:
            return read_key_pair(self.s3_credentials_file).as_tuple()
        access_key_id, fixed_secret = EMBEDDED_S3_CREDENTIALS
        return access_key_id, self.s3_secret_key or fixed_secret

    def save(self) -> None:
        write_private(Path(self.dir) / STATE_FILE, json.dumps(asdict(self), indent=2))

    def find(self, role: str, ident: int) -> ProcessInfo:
        for p in self.processes:
            if p.role == role and p.id == ident:
                return p
        raise LocalClusterError(f"no {role} {ident} in this cluster")


@dataclass(frozen=True)
class Stopped:
    """What ``cluster down`` did."""

    processes: list[ProcessInfo]  # the processes that were running and were stopped
    directory: str
    purged: bool = False  # the cluster's files were deleted too
    deleted: list[str] = field(default_factory=list)  # with purge: every path deleted
    s3_objects: int | None = None  # without purge, on the embedded S3: objects kept in its snapshot
    resumable: bool = True  # 'cluster up' on the directory resumes the cluster (not after a purge or a lost S3)
    warnings: list[str] = field(default_factory=list)


def is_ours(p: ProcessInfo) -> bool:
    """Whether ``p`` still runs: its pid is alive, not a zombie, and its command line still names the file that
    identifies it (so a recycled pid is never taken for it). Reads /proc only: no network, no object-store client."""
    if p.config is None:
        return False
    line = _cmdline(p.pid)
    return bool(line) and p.config in line and not _is_zombie(p.pid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True
