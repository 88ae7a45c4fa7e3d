"""The leader's view of its followers and the high watermark it derives (orchestrator/broker/replication.py)."""

import pytest

from orchestrator.broker.replication import ReplicaStates
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit

KEY = (Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ"), 0)


def _hw(states, *, isr=(1, 2, 3), leader_end=100, epoch=0, log_start=0):
    return states.high_watermark(KEY, leader_epoch=epoch, leader=1, isr=isr, leader_end=leader_end, log_start=log_start)


def _fetched(states, follower, offset, *, leader_end=100, now=0, epoch=0):
    return states.follower_fetched(
        KEY, leader_epoch=epoch, follower=follower, fetch_offset=offset, leader_end=leader_end, now_ms=now
    )


def test_the_leader_alone_in_the_isr_has_its_log_end_as_high_watermark():
    assert _hw(ReplicaStates(), isr=(1,)) == 100


def test_the_high_watermark_is_the_least_log_end_of_the_isr_and_waits_for_members_not_heard_of():
    states = ReplicaStates()
    assert _hw(states) == 0, "followers not heard of in this term hold it at the log start"
    _fetched(states, 2, 60)
    assert _hw(states) == 0
    _fetched(states, 3, 40)
    assert _hw(states) == 40
    _fetched(states, 3, 80)
    assert _hw(states) == 60
    assert _hw(states, isr=(1, 3)) == 80, "a member out of the ISR no longer holds it back"


def test_the_high_watermark_never_moves_back_and_never_passes_the_log_end():
    states = ReplicaStates()
    _fetched(states, 2, 90)
    assert _hw(states, isr=(1, 2)) == 90
    assert _hw(states, isr=(1, 2, 3)) == 90, "a member joining does not take it back"
    assert _hw(states, isr=(1,), leader_end=95) == 95
    assert states.stored_high_watermark(KEY) == 95


def test_a_new_term_forgets_the_followers_but_keeps_the_high_watermark():
    states = ReplicaStates()
    _fetched(states, 2, 50)
    assert _hw(states, isr=(1, 2)) == 50
    assert _hw(states, isr=(1, 2), epoch=1) == 50
    assert states.followers(KEY) == {}


def test_a_follower_is_caught_up_at_the_end_or_at_the_end_the_leader_had_at_its_last_fetch():
    states = ReplicaStates()
    assert _fetched(states, 2, 100, now=10).caught_up_ms == 10
    # the leader moved on to 120; this fetch reaches 100, the end the leader had at the last one (at 10)
    assert _fetched(states, 2, 100, leader_end=120, now=20).caught_up_ms == 10
    assert _fetched(states, 2, 120, leader_end=130, now=30).caught_up_ms == 20
    assert _fetched(states, 2, 125, leader_end=140, now=40).caught_up_ms == 20, "short of 130, the end at its last"
    assert _fetched(states, 2, 140, leader_end=140, now=50).caught_up_ms == 50


def test_members_not_caught_up_within_the_lag_time_are_out_of_sync_and_caught_up_replicas_may_join():
    states = ReplicaStates()
    _fetched(states, 2, 100, now=1_000)
    lagging = states.out_of_sync(KEY, leader=1, isr=(1, 2, 3), now_ms=40_000, lag_max_ms=30_000, since_ms=5_000)
    assert lagging == [2, 3], "3 was never heard of since this broker began leading at 5 s"
    assert states.out_of_sync(KEY, leader=1, isr=(1, 2, 3), now_ms=20_000, lag_max_ms=30_000, since_ms=5_000) == []
    recent = {"now_ms": 20_000, "lag_max_ms": 30_000}
    assert states.caught_up(KEY, replicas=(1, 2, 3), isr=(1,), high_watermark=100, **recent) == [2]
    assert states.caught_up(KEY, replicas=(1, 2, 3), isr=(1,), high_watermark=101, **recent) == []
    stale = {"now_ms": 40_000, "lag_max_ms": 30_000}
    assert states.caught_up(KEY, replicas=(1, 2, 3), isr=(1,), high_watermark=100, **stale) == [], "not heard of since"


def test_a_follower_keeps_its_leaders_high_watermark_cut_to_its_own_log_and_truncation_lowers_it():
    states = ReplicaStates()
    assert states.follower_high_watermark(KEY, leader_epoch=0, leader_hw=80, log_end=50) == 50
    assert states.follower_high_watermark(KEY, leader_epoch=0, leader_hw=80, log_end=90) == 80
    states.truncated(KEY, 70)
    assert states.stored_high_watermark(KEY) == 70


def test_the_fetcher_walks_the_image_for_what_it_follows_once_per_image(monkeypatch):
    """What a broker follows is a walk of every partition of the cluster: done when the image changes, not before
    each Fetch (at ten thousand partitions that walk was most of a follower's work)."""
    import asyncio

    from orchestrator.broker import replica_fetcher
    from orchestrator.metadata.image import MetadataImage
    from orchestrator.net.connection import ConnectionPool

    walks = []
    monkeypatch.setattr(replica_fetcher, "followed_by_leader", lambda image, broker: walks.append(image) or {})
    images = [MetadataImage()]
    fetcher = replica_fetcher.ReplicaFetcher(
        broker_id=1,
        image=lambda: images[-1],
        open_log=lambda *_: None,
        log_lock=asyncio.Lock(),
        replicas=ReplicaStates(),
        pool=ConnectionPool(),
        request_timeout_s=1.0,
    )
    for _ in range(3):
        fetcher._followed_now()
    assert walks == [images[0]]
    images.append(MetadataImage())
    fetcher._followed_now()
    assert walks == images
