"""The soak knob: a test that exists to run long (many clusters, many seeds, many topics) reads its size here.

``make test`` runs such a test at a size that still catches the defect it was written for; ``make soak``
(``pytest --soak -m soak``) runs the same test at full size. ``--soak`` sets ``TIEREDCTL_SOAK=1`` before the test
modules are imported (``tests/conftest.py``), so a module-level size or a parametrize list can read it; setting
the variable by hand does the same. Every test that reads a size from here carries the ``soak`` marker, and its
docstring or comment says why the small size still catches its defect.
"""

from __future__ import annotations

import os
from typing import TypeVar

ENV = "TIEREDCTL_SOAK"

T = TypeVar("T")


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def sized(default: T, soak: T) -> T:
    """``soak`` under ``make soak``, else ``default``."""
    return soak if enabled() else default
