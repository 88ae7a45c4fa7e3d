"""Start, inspect, stop and resume a local cluster: embedded S3 (moto's server) unless an endpoint is given, the
SQLite store (or an external PostgreSQL database: ``up(store="postgresql://...")``), N controllers (one active, the
rest standby) and M brokers, each a separate OS process.

This module is the local cluster's one entry point (``from orchestrator.local import cluster as lc``); each job is
its own module:

* :mod:`.plan`: what ``up`` starts, a new cluster or the stopped one, checked against what was asked;
* :mod:`.startup`: ``up``, step by step, until the cluster is healthy;
* :mod:`.nodes`: one controller or broker started with its settings file, and the ports it bound written back;
* :mod:`.processes`: spawning, waiting on, stopping and killing the OS processes;
* :mod:`.settings_files`: the processes' TOML settings; :mod:`.cluster_store`: the store as the CLI opens it;
* :mod:`.shutdown`: ``down`` and ``--purge``; :mod:`.status`: ``cluster status``; :mod:`.restart`: one process
  started again; :mod:`.access`: the operator's S3 client and connection security;
* :mod:`.state`: the record (``cluster.json``); :mod:`.security`, :mod:`.certificates`: TLS, logins and ACLs;
  :mod:`.embedded_s3` and :mod:`.s3_snapshot`: the embedded S3 and its objects on disk.

Everything lives under ``--dir``: ``cluster.json`` (the processes with role, id, pid, port and the file on their
command line that identifies them), ``logs/<role>-<id>.log``, ``config/<role>-<id>.toml``, ``run/`` (ready files),
``metadata.db``, ``data/broker-<id>/`` and, on the embedded S3, ``s3/`` (its objects, see :mod:`.s3_snapshot`).

Invariants (each kept by the module named):
* Nothing is deleted unless asked in so many words: ``down`` stops exactly the processes recorded in
  ``cluster.json`` and keeps every file; ``up`` on that directory resumes the cluster (same node ids, data
  directories, store, bucket; the embedded S3 restores the objects it wrote as it stopped). Only
  ``down(purge=True)`` deletes, and exactly the files listed in ``CLUSTER_FILES`` (objects in an external bucket
  and the metadata in an external PostgreSQL store are never deleted). A cluster that never became healthy is
  removed by the ``up`` that failed to start it (:mod:`.shutdown`, :mod:`.startup`).
* A cluster whose embedded S3 did not stop cleanly (killed: its objects died with it) is not resumed: ``up``
  refuses and says how to purge it, instead of serving topics whose tiered data is silently gone (:mod:`.plan`).
* A pid is only signalled while ``/proc/<pid>/cmdline`` still names that process's own file (so a recycled pid
  is never hit) (:mod:`.processes`).
* Processes bind 127.0.0.1 only. Brokers, the embedded S3 and every Prometheus endpoint bind port 0: each binds a
  port itself and publishes it in its ready file, so no port chosen in advance can be taken before it is bound. A
  controller is given a port below the kernel's ephemeral range (:mod:`.ports`; one taken before its bind is
  replaced), since its address is in every bootstrap list and no outgoing connection can be given such a port
  while it is down. ``up`` writes every port into the process's settings file, so a process restarted from it
  (after a crash, or by a test) comes back on the same address. A port bound as port 0 is ephemeral: while its
  process is down an outgoing connection may be given it. ``restart`` then moves a broker to a new port (it
  registers it; clients follow Metadata) or a metrics endpoint, and refuses, with the reason, to restart a
  controller whose own port another program took (:mod:`.nodes`, :mod:`.restart`).
"""

from __future__ import annotations

from orchestrator.local.access import metrics_ssl_context, operator_security, s3_client
from orchestrator.local.plan import CONTROLLER_ID_BASE
from orchestrator.local.processes import (
    S3_STOP_TIMEOUT_S,
    broker_command,
    controller_command,
    embedded_s3_command,
    kill_process,
    process_env,
    start_embedded_s3,
    stop_process,
)
from orchestrator.local.restart import restart
from orchestrator.local.shutdown import down
from orchestrator.local.startup import up
from orchestrator.local.state import is_ours
from orchestrator.local.status import status

__all__ = [
    "CONTROLLER_ID_BASE",
    "S3_STOP_TIMEOUT_S",
    "broker_command",
    "controller_command",
    "down",
    "embedded_s3_command",
    "is_ours",
    "kill_process",
    "metrics_ssl_context",
    "operator_security",
    "process_env",
    "restart",
    "s3_client",
    "start_embedded_s3",
    "status",
    "stop_process",
    "up",
]
