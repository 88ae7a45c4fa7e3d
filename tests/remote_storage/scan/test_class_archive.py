"""The scan JVM's class-data archive (remote_storage.scan.class_archive): where it is looked for, that only a whole
and proven archive is ever installed, that a session whose JVM dies on the archive starts again without it, and,
with real JVMs, that the archive built by make setup is the one the tests' session runs with."""

from __future__ import annotations

import os
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_storage.scan import class_archive, session
from remote_storage.scan.class_archive import ARCHIVE_ENV, ClassArchiveError, build, default_path, installed


@pytest.mark.unit
def test_the_archive_is_looked_for_in_the_cache_unless_the_environment_names_one_or_switches_it_off(
    tmp_path: Path,
) -> None:
    name = f"scan-classes-spark-{class_archive.spark_version()}.jsa"
    assert default_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "tieredctl" / name
    assert default_path({}) == Path.home() / ".cache" / "tieredctl" / name
    assert default_path({ARCHIVE_ENV: str(tmp_path / "a.jsa"), "XDG_CACHE_HOME": "/x"}) == tmp_path / "a.jsa"
    assert default_path({ARCHIVE_ENV: ""}) is None
    assert installed({ARCHIVE_ENV: str(tmp_path / "a.jsa")}) is None  # not there: no archive
    (tmp_path / "a.jsa").write_bytes(b"x")
    assert installed({ARCHIVE_ENV: str(tmp_path / "a.jsa")}) == tmp_path / "a.jsa"
    assert installed({ARCHIVE_ENV: ""}) is None


@pytest.mark.unit
def test_a_jvm_given_the_archive_maps_it_when_it_fits_and_says_nothing_on_stdout_when_it_does_not() -> None:
    options = class_archive.java_options(Path("/c/a.jsa")).split()
    assert options[:2] == [
        "-XX:SharedArchiveFile=/c/a.jsa",
        "-Xshare:auto",
    ]  # auto: an archive that does not fit is skipped
    assert options[2:] == ["-Xlog:disable", "-Xlog:all=warning:stderr"]  # its warning goes to stderr, not stdout


def _fake_python(tmp_path: Path, *, train: str, prove: str) -> str:
    """A stand-in for the interpreter ``build`` runs its two JVM steps with: shell for each step, given the archive."""
    script = tmp_path / "python"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            step="$3"; archive="$4"
            echo "$step" >> {tmp_path}/steps
            if [ "$step" = _train ]; then {train}; else {prove}; fi
            """
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.integration
def test_an_archive_is_installed_only_once_written_whole_and_proven_by_a_second_jvm(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "a.jsa"
    python = _fake_python(tmp_path, train='printf archive > "$archive"', prove='test "$(cat "$archive")" = archive')
    built = build(target, python=python)
    assert target.read_bytes() == b"archive" and built.bytes == 7 and built.path == target
    assert (tmp_path / "steps").read_text().split() == ["_train", "_prove"]
    assert os.listdir(target.parent) == ["a.jsa"]  # no temporary file left


@pytest.mark.integration
@pytest.mark.parametrize(
    ("train", "prove", "error"),
    [
        ('echo "JVM crashed" >&2; exit 134', "exit 0", "the train JVM failed .exit status 134.: JVM crashed"),
        ("exit 0", "exit 0", "the training JVM wrote no archive"),
        (
            'printf half > "$archive"',
            'echo "cannot map" >&2; exit 1',
            "the prove JVM failed .exit status 1.: cannot map",
        ),
    ],
    ids=["training-fails", "training-writes-nothing", "proof-refuses-it"],
)
def test_an_archive_that_failed_any_step_is_not_installed_and_an_old_one_stays(
    tmp_path: Path, train: str, prove: str, error: str
) -> None:
    target = tmp_path / "a.jsa"
    target.write_bytes(b"the archive in use")
    with pytest.raises(ClassArchiveError, match=error):
        build(target, python=_fake_python(tmp_path, train=train, prove=prove))
    assert target.read_bytes() == b"the archive in use"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsa", "python", "steps"]  # no temporary file left


@pytest.mark.unit
def test_a_jvm_that_dies_on_the_archive_is_started_again_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.errors import PySparkRuntimeError

    started: list[str] = []

    def fake_session(master: Any, memory: str, partitions: int, name: str, java: str) -> str:
        started.append(java)
        if "SharedArchiveFile" in java:
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        return "session"

    monkeypatch.setattr(session, "_session", fake_session)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert session.build_session(quick_jit=True, class_archive=Path("/c/a.jsa")) == "session"
    assert started == [
        f"-XX:TieredStopAtLevel=1 {class_archive.java_options(Path('/c/a.jsa'))}",
        "-XX:TieredStopAtLevel=1",
    ]


def _pyspark_error(error_class: str) -> Exception:
    from pyspark.errors import PySparkRuntimeError

    return PySparkRuntimeError(errorClass=error_class, messageParameters={})


@pytest.mark.unit
@pytest.mark.parametrize(
    "error",
    [lambda: ValueError("bad master URL"), lambda: _pyspark_error("APPLICATION_NAME_NOT_SET")],
    ids=["not-pyspark", "another-pyspark-error"],
)
def test_an_error_that_is_not_the_jvm_dying_is_raised_not_retried(
    monkeypatch: pytest.MonkeyPatch, error: Callable[[], Exception]
) -> None:
    calls: list[str] = []

    def fake_session(master: Any, memory: str, partitions: int, name: str, java: str) -> str:
        calls.append(java)
        raise error()

    monkeypatch.setattr(session, "_session", fake_session)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    with pytest.raises(type(error())):
        session.build_session(class_archive=Path("/c/a.jsa"))
    assert len(calls) == 1


@pytest.mark.spark
def test_the_tests_session_runs_with_the_archive_make_setup_built(spark: Any) -> None:
    archive = installed()
    if archive is None:
        pytest.skip(f"no class archive at {default_path()}: make setup builds it")
    arguments = list(
        spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert f"-XX:SharedArchiveFile={archive}" in arguments and "-Xshare:auto" in arguments
    assert spark.range(10).selectExpr("sum(id)").collect()[0][0] == 45


@pytest.mark.unit
def test_make_setup_s_build_keeps_an_archive_that_is_there_and_builds_none_when_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"12345")
    monkeypatch.setattr(class_archive, "build", lambda *a, **k: pytest.fail("built again"))
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    assert class_archive.main(["build"]) == 0
    assert capsys.readouterr().out == f"class archive {archive} is there (5 bytes)\n"
    monkeypatch.setenv(ARCHIVE_ENV, "")
    assert class_archive.main(["build"]) == 0
    assert "no class archive" in capsys.readouterr().err


@pytest.mark.unit
def test_a_build_that_fails_says_so_and_exits_1_so_make_setup_can_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(path: Path) -> None:
        raise ClassArchiveError("the prove JVM failed (exit status 1): cannot map")

    monkeypatch.setattr(class_archive, "build", refuse)
    assert class_archive.main(["build", str(tmp_path / "a.jsa")]) == 1
    said = capsys.readouterr().err
    assert said == "error: class archive not built: the prove JVM failed (exit status 1): cannot map\n"
    assert not (tmp_path / "a.jsa").exists()
