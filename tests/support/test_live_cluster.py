"""wait_until's looks: quick at first, then sparser, never past the deadline by more than one check."""

import itertools

import pytest

from tests.support import live_cluster
from tests.support.live_cluster import LAST_LOOK_S, look_gaps, wait_until

pytestmark = pytest.mark.unit


def test_the_default_gaps_start_small_and_grow_to_the_cap():
    gaps = list(itertools.islice(look_gaps(None), 12))
    assert gaps[0] == 0.05 and gaps == sorted(gaps) and gaps[-1] == LAST_LOOK_S
    assert sum(1 for g in itertools.islice(look_gaps(None), 200) if g < LAST_LOOK_S) < 10


def test_a_given_interval_is_kept():
    assert list(itertools.islice(look_gaps(0.3), 5)) == [0.3] * 5


class _Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def test_the_value_comes_back_once_the_check_is_true(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(live_cluster, "time", clock)
    answers = iter([None, 0, "", "ready"])
    assert wait_until("x", lambda: next(answers), timeout_s=5) == "ready"
    assert clock.sleeps == pytest.approx([0.05, 0.075, 0.1125])


def test_a_check_never_true_fails_naming_what_and_the_last_value_with_a_last_look_at_the_deadline(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(live_cluster, "time", clock)
    looks = []

    def check():
        looks.append(clock.now)
        return []

    with pytest.raises(AssertionError, match=r"timed out after 3s waiting for the topic; last value \[\]"):
        wait_until("the topic", check, timeout_s=3)
    assert looks[-1] == pytest.approx(3.0) and sum(clock.sleeps) == pytest.approx(3.0)
