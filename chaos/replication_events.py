"""What replication did during a chaos run, read from its metadata log: how often a partition's leadership moved to
another replica, and how often an ISR shrank or grew (issue 37: a run with replicas says it covered failovers).

Pure: :func:`count` walks the :class:`~chaos.checker.LogRecord` s the run tailed, as the checker does, without the
code under test. A partition is known from its ``PartitionRecord``; a ``PartitionChangeRecord`` names only what
changes (``leader`` -2 for unchanged, ``isr`` None for unchanged).

What is counted (the rows of :data:`ROWS`):

* ``leader moved``: a partition led by a broker again after a change, by another broker than the last one that led
  it (through a leaderless spell or not). With one replica it stays 0: the only replica leaves and comes back;
* ``isr shrunk`` / ``isr expanded``: a change whose ISR has fewer / more members than the partition's before it.

Invariant: a change of a partition the log never created (a gap the tail could not read) is skipped, not counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from chaos.checker import LogRecord

LEADER_MOVED, ISR_SHRUNK, ISR_EXPANDED = "leader moved", "isr shrunk", "isr expanded"
ROWS = (LEADER_MOVED, ISR_SHRUNK, ISR_EXPANDED)
_NO_LEADER, _LEADER_UNCHANGED = -1, -2


def count(log: Iterable[LogRecord]) -> Counter[str]:
    """The :data:`ROWS` events of the partitions ``log`` creates and changes (every row present, 0 or more)."""
    out: Counter[str] = Counter(dict.fromkeys(ROWS, 0))
    last_leader: dict[tuple[str, int], int] = {}  # the last broker that led it (a leaderless spell keeps it)
    isr: dict[tuple[str, int], int] = {}  # its ISR's size
    for r in log:
        f = r.fields
        if r.name not in ("PartitionRecord", "PartitionChangeRecord"):
            continue
        key = (str(f["topic_id"]), f["partition_id"])
        if r.name == "PartitionRecord":
            last_leader[key], isr[key] = f["leader"], len(f["isr"])
            continue
        if key not in isr:
            continue
        leader = f.get("leader", _LEADER_UNCHANGED)
        if leader not in (_LEADER_UNCHANGED, _NO_LEADER):
            if last_leader[key] not in (_NO_LEADER, leader):
                out[LEADER_MOVED] += 1
            last_leader[key] = leader
        if f.get("isr") is not None:
            size = len(f["isr"])
            if size < isr[key]:
                out[ISR_SHRUNK] += 1
            elif size > isr[key]:
                out[ISR_EXPANDED] += 1
            isr[key] = size
    return out
