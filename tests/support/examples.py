"""``--examples-cap=N``: every hypothesis test runs at most N examples (``make check`` uses it).

Most of the unit tests' time is property tests (the codec against kio and kafka-python for every message version,
the record batch, the log reads, the authorizer, the controller's state machine), each with the number of examples
its author chose. ``make test`` runs them as written; ``make check``, the minute-long loop, runs every one of them
with fewer examples, so a change that breaks a property still fails there at once, and ``make test`` then runs the
full count. Examples are derandomized in most of these tests, so a capped run tries the first examples of the same
sequence.

A test's settings object is where hypothesis keeps its count (``@settings(max_examples=...)`` on a ``@given`` test,
``TestCase.settings`` on a state machine); a profile cannot lower a count a test sets itself, so the cap replaces
that object with a child that differs only in ``max_examples``.
"""

from __future__ import annotations

import unittest
from typing import Any

from hypothesis import settings

_SETTINGS_ATTRIBUTE = "_hypothesis_internal_use_settings"  # where @given keeps a test's settings


def _capped(current: settings, cap: int) -> settings:
    return current if current.max_examples <= cap else settings(current, max_examples=cap)


def cap_examples(test: Any, test_class: Any, cap: int) -> bool:
    """Cap the hypothesis test ``test`` (a function) or ``test_class`` (a state machine's TestCase) at ``cap``
    examples; False when neither is a hypothesis test."""
    test = getattr(test, "__func__", test)  # a test method: its function holds the settings
    current = getattr(test, _SETTINGS_ATTRIBUTE, None)
    if getattr(test, "is_hypothesis_test", False) and isinstance(current, settings):
        setattr(test, _SETTINGS_ATTRIBUTE, _capped(current, cap))
        return True
    if isinstance(test_class, type) and issubclass(test_class, unittest.TestCase):
        machine_settings = getattr(test_class, "settings", None)
        if isinstance(machine_settings, settings):
            test_class.settings = _capped(machine_settings, cap)
            return True
    return False
