"""The chaos run's metadata-log tail holds the log at the next offset it will read (store invariant 8), so a
snapshot saved while it is behind deletes nothing it has not read: no gap, however far behind it is; once it has
read on and moved its hold, the next snapshot truncates as usual. On a real SQLite store file."""

from __future__ import annotations

import pytest

from chaos.history import History
from chaos.log_tail import LogTail
from orchestrator.ids import Uuid
from orchestrator.metadata.sqlite import SqliteMetadataStore
from tests.support.metadata_records import topic

pytestmark = pytest.mark.integration


def test_a_snapshot_saved_while_the_tail_is_behind_deletes_nothing_it_has_not_read(tmp_path):
    path = tmp_path / "metadata.db"
    with SqliteMetadataStore(path) as controller, SqliteMetadataStore(path, recover_on_open=False) as reader:
        lease = controller.acquire_lease(holder="controller", now_ms=0, ttl_ms=10**12)
        assert lease is not None
        epoch = lease.controller_epoch
        controller.append([topic(f"t{i}", Uuid.random()) for i in range(10)], controller_epoch=epoch)
        tail = LogTail(str(path), History())
        tail._read_log(reader)  # holds at 0, then reads 0..9
        controller.append([topic(f"u{i}", Uuid.random()) for i in range(10)], controller_epoch=epoch)
        # Behind by ten records, its hold still at 0: a snapshot keeping only itself deletes nothing.
        assert controller.save_snapshot(offset=19, records=[], controller_epoch=epoch, retain=1) == 0
        tail._read_log(reader)
        assert [r.offset for r in tail.records] == list(range(20)) and tail.gaps == []

        tail._held_at = None  # its next read renews the hold, at what it read
        tail._read_log(reader)
        assert controller.save_snapshot(offset=19, records=[], controller_epoch=epoch, retain=1) == 19
        controller.append([topic("after", Uuid.random())], controller_epoch=epoch)
        tail._read_log(reader)
        assert [r.offset for r in tail.records] == list(range(21)) and tail.gaps == []
