"""Two real OS processes race for the controller lease on one SQLite file (ARCHITECTURE §4 invariant 6).

Every round starts with a free lease and both workers asked to acquire it at the same moment: exactly one wins,
at the previous epoch + 1, and the loser's append (with the last epoch it ever held) is refused. Even rounds end
with the winner releasing; odd rounds let the winner's lease run out (it renews itself down to a short ttl and
then goes quiet, like a paused or partitioned controller): the other worker polls until it takes over at
epoch + 1, after which the deposed holder can neither append nor renew. Waiting is a bounded polling loop.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.metadata.sqlite import SqliteMetadataStore
from tests.support.store_worker import StoreWorker

pytestmark = pytest.mark.integration

ROUNDS = 6
RACE_TTL_MS = 60_000  # long, so a slow racer can never find the winner's lease already expired
SHORT_TTL_MS = 300
TAKEOVER_DEADLINE_S = 20.0
STALE_CONTROLLER_EPOCH = 11


def test_exactly_one_of_two_processes_holds_the_lease_and_a_deposed_one_can_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    workers: list[StoreWorker] = []
    try:
        for holder in ("controller-a", "controller-b"):
            workers.append(StoreWorker(path, holder, log_dir=tmp_path))
        held_epoch = {w.holder: 0 for w in workers}  # the last epoch each one ever held
        epoch = 0
        next_offset = 0
        for round_no in range(ROUNDS):
            for w in workers:  # both are blocked on stdin: the commands arrive together
                w.send(op="acquire", ttl_ms=RACE_TTL_MS)
            answers = {w.holder: w.read() for w in workers}
            winners = [w for w in workers if answers[w.holder]["lease"] is not None]
            assert len(winners) == 1, f"round {round_no}: {answers}"
            winner = winners[0]
            loser = next(w for w in workers if w is not winner)
            _holder, won_epoch, _expires = answers[winner.holder]["lease"]
            assert won_epoch == epoch + 1, f"round {round_no}: epoch {won_epoch} after {epoch}"
            epoch = held_epoch[winner.holder] = won_epoch

            assert winner.call(op="append", epoch=epoch, name=f"r{round_no}-winner") == {"offset": next_offset}
            next_offset += 1
            refused = loser.call(op="append", epoch=held_epoch[loser.holder], name=f"r{round_no}-loser")
            assert refused["code"] == STALE_CONTROLLER_EPOCH, refused

            if round_no % 2 == 0:
                assert winner.call(op="release", epoch=epoch) == {"released": True}
                continue

            # The winner goes quiet with a short lease; the other polls (bounded) until it takes over.
            assert winner.call(op="renew", epoch=epoch, ttl_ms=SHORT_TTL_MS)["lease"][1] == epoch
            deadline = time.monotonic() + TAKEOVER_DEADLINE_S
            while True:
                taken = loser.call(op="acquire", ttl_ms=RACE_TTL_MS)["lease"]
                if taken is not None:
                    break
                assert time.monotonic() < deadline, "the expired lease was never taken over"
                time.sleep(0.02)
            assert taken[0] == loser.holder and taken[1] == epoch + 1
            epoch = held_epoch[loser.holder] = taken[1]

            for op in ({"op": "append", "name": "zombie"}, {"op": "renew", "ttl_ms": RACE_TTL_MS}):
                refused = winner.call(**op, epoch=held_epoch[winner.holder])
                assert refused["code"] == STALE_CONTROLLER_EPOCH, refused
            assert loser.call(op="append", epoch=epoch, name=f"r{round_no}-takeover") == {"offset": next_offset}
            next_offset += 1
            assert loser.call(op="release", epoch=epoch) == {"released": True}
    finally:
        for w in workers:
            w.kill()

    with SqliteMetadataStore(path) as store:
        entries = list(store.read())
        assert [e.offset for e in entries] == list(range(next_offset))
        assert not any(e.record["name"] in ("zombie",) or "loser" in e.record["name"] for e in entries)
        epochs = [e.controller_epoch for e in entries]
        assert epochs == sorted(epochs)  # written in epoch order: no deposed writer slipped in
        assert store.current_lease() is None
