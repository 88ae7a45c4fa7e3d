"""The HOME of a newcomer who ran ``make setup``: empty (no ``~/.aws``, no settings of anyone's), except for the scan
JVM's class-data archive and its Spark home, which ``make setup`` leaves in ``~/.cache/tieredctl``
(remote_storage/scan/class_archive.py), linked from this machine's when it has them. The tests that run the README's
commands with nothing in the environment but HOME and PATH use it, so their scans' JVMs start as a set-up
newcomer's do."""

from __future__ import annotations

from pathlib import Path

from remote_storage.scan import class_archive


def newcomer_home(path: Path) -> Path:
    """Make ``path`` such a HOME (idempotent) and return it."""
    path.mkdir(parents=True, exist_ok=True)
    archive = class_archive.installed()
    if archive is not None:
        target = class_archive.default_path({"XDG_CACHE_HOME": str(path / ".cache")})
        assert target is not None
        target.parent.mkdir(parents=True, exist_ok=True)
        for link, to in ((target, archive.path), (class_archive.spark_home_of(target), archive.spark_home)):
            if not link.exists():
                link.symlink_to(to)
    return path
