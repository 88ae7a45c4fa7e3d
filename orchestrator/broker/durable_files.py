"""Small files a broker must find whole after a crash or a power cut: replaced atomically and synced, the directory
entry too.

:func:`replace_durably` writes the new contents beside the file (``<name>.tmp``), syncs them, renames them over the
file and syncs the directory, so the file is the old one or the new one, never a mix, and the rename itself
survives. :func:`fsync_directory` is the last step on its own, for a caller that renamed something else into place
(a rebuilt partition directory).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Sync ``directory``'s entries (a rename or a new file in it) to the disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes) -> None:
    """Replace ``path``'s contents with ``data`` atomically and durably (see the module docstring)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_directory(path.parent)
