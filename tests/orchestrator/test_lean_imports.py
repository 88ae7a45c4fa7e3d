"""structlog is loaded without rich's traceback and pretty-printing modules, and rich stays importable after."""

import ast
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.integration  # each case is a fresh interpreter: what is loaded is the point

SKIPPED = ("rich.traceback", "rich.pretty", "pygments")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(sorted(m for m in {SKIPPED!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "entry",
    [
        "import orchestrator.cli",
        "import orchestrator.broker.agent",
        "import orchestrator.controller.service",
        "import remote_storage.inventory",
        "import policies.orphans",
    ],
)
def test_every_entry_point_loads_structlog_without_richs_traceback_modules(entry):
    assert _loaded_after(f"{entry}\nimport structlog.dev\nassert structlog.dev.rich is None") == []


def test_with_rich_loaded_first_only_the_two_modules_are_skipped_and_both_import_afterwards():
    code = (
        "import rich.console\n"
        "from orchestrator.lean_imports import import_structlog\n"
        "import_structlog()\n"
        "assert 'structlog' in sys.modules and 'rich.traceback' not in sys.modules\n"
        "import rich.traceback, rich.pretty"
    )
    assert _loaded_after(code) == ["pygments", "rich.pretty", "rich.traceback"]


def test_a_structlog_loaded_by_the_host_program_is_left_as_it_is():
    code = "import structlog\nimport orchestrator.cli"
    assert _loaded_after(code) == ["pygments", "rich.pretty", "rich.traceback"]


def test_the_tiering_commands_load_neither_rich_nor_the_record_batch_codec_until_they_draw_or_fetch():
    """A ``tiering`` call that prints JSON starts without rich (progress bars import it when made) and without the
    record batch codec and crc32c (the first produce or fetch imports them): about 70 ms of its start."""
    lazy = ("rich", "crc32c", "orchestrator.protocol.record_batch")
    probe = (
        "import sys\n"
        "import orchestrator.cli.root, orchestrator.cli.tiering, orchestrator.cli.tiering_kafka\n"
        f"print(sorted(m for m in {lazy!r} if m in sys.modules))\n"
        "from orchestrator.cli.progress import counted_columns\n"
        "counted_columns()\n"
        f"print(sorted(m for m in {lazy!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    before, after = (ast.literal_eval(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert before == [], before
    assert after == ["rich"], "a bar's columns load rich"
