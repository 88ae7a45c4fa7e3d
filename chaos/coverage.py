"""What a ``python -m chaos`` run covered: how often each fault kind and each crash point was hit, by store, security
and replication factor (issue 37's "fault x crash point x store x security, with hit counts", and its "RF 1 and RF 3").

Pure: :class:`Coverage` adds up what each seed's result says (:attr:`~chaos.runner.RunResult.faults`, its
``crash_points_hit``) under the seed's :class:`Config`, and :meth:`Coverage.table` returns the rows to print, one
per fault kind and per crash point, one column per configuration that ran; the caller renders them.

What a cell counts:

* a process, S3, link, store or disk fault: times injected (a store fault skipped because the server was still
  paused or down from the previous one is not counted, nor a disk fault on a disk read-only already; their
  ``skipped`` rows say how often that happened; a fault on a process's link to the store is never skipped);
  ``disk_readonly halted``: brokers that halted on their read-only disk, as they must; ``disk_lost``: brokers
  killed and started again on an empty data directory (only with replicas: ``-`` at RF 1);
* ``s3 <kind> served``: S3 requests the fault proxy answered with that fault (a rule in force that no request met
  served nothing);
* ``leader moved``, ``isr shrunk``, ``isr expanded``: what the faults made replication do, from the metadata log
  (:mod:`chaos.replication_events`; a leader moves only with replicas);
* ``deposed controller refused`` / ``refused, no lease read`` / ``unanswered``: the run's DisableRemoteTopic as a
  deposed controller (:mod:`chaos.deposed`, one per broker after each failover) refused as stale, refused because
  the broker could not read the lease, or not answered at all;
* ``traffic batches acked`` / ``records read`` / ``requests failed``: the client traffic beside the workload
  (:mod:`chaos.traffic`);
* ``crash point <name>``: times a process died there, with how often a crash point was armed in the
  ``crash_point`` row (an armed point whose moment never came is armed, not hit).

Invariants: every known fault kind and crash point has a row, even at 0 in every column, so what was never hit
shows; a fault that cannot happen in a configuration (a PostgreSQL fault on SQLite, a disk fault in a run without
them) reads ``-``, not 0; kinds the
results name that this module does not know (a new fault) still get a row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chaos import deposed, replication_events, traffic
from chaos.scenario import DISK_FAULT_KINDS, DISK_LOST, FAULT_KINDS, S3_FAULT_KINDS, STORE_FAULT_KINDS

NOT_APPLICABLE = "-"


@dataclass(frozen=True, order=True)
class Config:
    store: str  # "sqlite" | "postgresql"
    secure: bool  # TLS, SCRAM logins and ACLs
    replication_factor: int = 1  # of the workload's topics (at most the cluster's broker count)
    disk: bool = False  # brokers' data directories turn read-only too

    @property
    def label(self) -> str:
        disk = " disk" if self.disk else ""
        return f"{self.store} {'secure' if self.secure else 'plain'} RF {self.replication_factor}{disk}"


def fault_rows() -> list[str]:
    """Every fault kind a run can count, and what replication did, in the table's order."""
    rows = [*FAULT_KINDS, *(f"s3 {kind} served" for kind in S3_FAULT_KINDS)]
    for kind in STORE_FAULT_KINDS:  # a link fault is never skipped: it needs the server in no state
        rows += [kind] if kind == "postgres_link" else [kind, f"{kind} skipped"]
    for kind in DISK_FAULT_KINDS:
        rows += [kind, f"{kind} skipped", f"{kind} halted"]
    rows += [DISK_LOST, f"{DISK_LOST} skipped"]
    return [*rows, *replication_events.ROWS, *deposed.ROWS, *traffic.ROWS]


def _applies(row: str, config: Config) -> bool:
    if row.startswith(DISK_LOST):
        return config.disk and config.replication_factor >= 2
    if row.startswith(DISK_FAULT_KINDS):
        return config.disk
    return config.store == "postgresql" or not row.startswith(STORE_FAULT_KINDS)


@dataclass
class Coverage:
    seeds: Counter[Config] = field(default_factory=Counter)
    faults: dict[Config, Counter[str]] = field(default_factory=dict)
    crash_points: dict[Config, Counter[str]] = field(default_factory=dict)

    def add(self, config: Config, faults: Mapping[str, int], crash_points_hit: Sequence[str]) -> None:
        """One seed's result under ``config``."""
        self.seeds[config] += 1
        self.faults.setdefault(config, Counter()).update(faults)
        self.crash_points.setdefault(config, Counter()).update(crash_points_hit)

    def table(self, known_crash_points: Sequence[str]) -> tuple[list[str], list[list[str]]]:
        """The header (``fault``, then one column per configuration that ran) and one row per fault kind and
        crash point (see the module docstring)."""
        configs = sorted(self.seeds)
        header = ["fault", *(f"{c.label} ({self.seeds[c]} seeds)" for c in configs)]
        known = fault_rows()
        seen = {kind for c in configs for kind in self.faults[c]}
        rows: list[list[str]] = []
        for kind in [*known, *sorted(seen - set(known))]:
            cells = [str(self.faults[c][kind]) if _applies(kind, c) else NOT_APPLICABLE for c in configs]
            rows.append([kind, *cells])
        hit = {point for c in configs for point in self.crash_points[c]}
        for point in [*known_crash_points, *sorted(hit - set(known_crash_points))]:
            rows.append([f"crash point {point}", *(str(self.crash_points[c][point]) for c in configs)])
        return header, rows
