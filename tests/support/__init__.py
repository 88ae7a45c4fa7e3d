"""Helpers shared by the tests: real servers, workers run as processes, generated worlds. ``REPO_ROOT`` is where
a worker process is started from (so ``python -m tests.support...`` finds the project)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
