"""The scan JVM's class-data archive (remote_storage.scan.class_archive): where it is looked for, the Spark home it is
made and used with (a mirror of PySpark's package whose jars keep one path and modification time, so one archive
serves every virtualenv with the same jars), that only a whole and proven archive is ever installed, that a session
whose JVM dies on the archive starts again without it, and, with real JVMs, that the archive built by make setup is
the one the tests' session runs with, from its Spark home."""

from __future__ import annotations

import os
import re
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_storage.scan import class_archive, session
from remote_storage.scan.class_archive import ARCHIVE_ENV, ClassArchiveError, build, default_path, installed

ARCHIVE = class_archive.Archive(Path("/c/a.jsa"), Path("/c/a.spark-home"))  # for sessions whose JVM is a stand-in


def _fake_pyspark(root: Path, jars: dict[str, bytes]) -> Path:
    """A stand-in for the installed PySpark package: ``jars/`` with these jars, ``bin/spark-class``, a Python file."""
    (root / "jars").mkdir(parents=True)
    (root / "bin").mkdir()
    for name, body in jars.items():
        (root / "jars" / name).write_bytes(body)
    (root / "bin" / "spark-class").write_text("#!/bin/sh\n")
    (root / "__init__.py").write_text("")
    return root


@pytest.fixture
def pyspark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = _fake_pyspark(tmp_path / "venv" / "pyspark", {"spark-core.jar": b"core", "scala.jar": b"scala!"})
    monkeypatch.setattr(class_archive, "installed_spark_home", lambda: home)
    return home


def _installed_with_home(archive: Path, source: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"x")
    class_archive.make_spark_home(class_archive.spark_home_of(archive), source)


@pytest.mark.unit
def test_the_archive_is_looked_for_in_the_cache_unless_the_environment_names_one_or_switches_it_off(
    tmp_path: Path, pyspark_home: Path
) -> None:
    version = class_archive.spark_version()
    found = default_path({"XDG_CACHE_HOME": str(tmp_path)})
    assert found is not None and found.parent == tmp_path / "tieredctl"
    assert re.fullmatch(rf"scan-classes-spark-{re.escape(version)}-[0-9a-f]{{12}}\.jsa", found.name), found.name
    assert default_path({}) == Path.home() / ".cache" / "tieredctl" / found.name
    assert default_path({ARCHIVE_ENV: str(tmp_path / "a.jsa"), "XDG_CACHE_HOME": "/x"}) == tmp_path / "a.jsa"
    assert default_path({ARCHIVE_ENV: ""}) is None
    assert installed({ARCHIVE_ENV: str(tmp_path / "a.jsa")}) is None  # not there: no archive
    (tmp_path / "a.jsa").write_bytes(b"x")
    assert installed({ARCHIVE_ENV: str(tmp_path / "a.jsa")}) is None  # no Spark home beside it: not usable
    _installed_with_home(tmp_path / "a.jsa", pyspark_home)
    assert installed({ARCHIVE_ENV: str(tmp_path / "a.jsa")}) == class_archive.Archive(
        tmp_path / "a.jsa", tmp_path / "a.spark-home"
    )
    assert installed({ARCHIVE_ENV: ""}) is None


@pytest.mark.unit
def test_the_archive_s_name_follows_the_installed_jars_so_another_pyspark_build_looks_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    names = []
    for i, jars in enumerate([{"a.jar": b"1"}, {"a.jar": b"1"}, {"a.jar": b"22"}, {"b.jar": b"1"}]):
        home = _fake_pyspark(tmp_path / f"venv{i}" / "pyspark", jars)
        monkeypatch.setattr(class_archive, "installed_spark_home", lambda home=home: home)
        names.append(default_path(env))
    assert names[0] == names[1]  # two virtualenvs, the same jars: one archive
    assert len({names[0], names[2], names[3]}) == 3  # a jar of another size, or another jar: another archive


@pytest.mark.unit
def test_the_spark_home_mirrors_pyspark_with_the_same_files_and_times_and_is_replaced_once_the_jars_change(
    tmp_path: Path, pyspark_home: Path
) -> None:
    archive = tmp_path / "cache" / "a.jsa"
    _installed_with_home(archive, pyspark_home)
    home = class_archive.spark_home_of(archive)
    assert home == tmp_path / "cache" / "a.spark-home"
    for name in ("jars/spark-core.jar", "jars/scala.jar", "bin/spark-class", "__init__.py"):
        mirrored, original = (home / name).stat(), (pyspark_home / name).stat()
        assert (mirrored.st_size, mirrored.st_mtime_ns) == (original.st_size, original.st_mtime_ns), name
    assert sorted(p.name for p in archive.parent.iterdir()) == ["a.jsa", "a.spark-home"]  # no temporary left
    assert installed({ARCHIVE_ENV: str(archive)}) is not None

    # Another virtualenv with the same jars: the mirror is kept as it is (the archive was made with its times).
    again = _fake_pyspark(tmp_path / "venv2" / "pyspark", {"spark-core.jar": b"core", "scala.jar": b"scala!"})
    before = (home / "jars" / "scala.jar").stat().st_mtime_ns
    class_archive.make_spark_home(home, again)
    assert (home / "jars" / "scala.jar").stat().st_mtime_ns == before

    # PySpark upgraded: pip replaces the jar (a new file), the old mirror no longer fits and is replaced whole.
    (pyspark_home / "jars" / "scala.jar").unlink()
    (pyspark_home / "jars" / "scala.jar").write_bytes(b"scala 2!")
    assert installed({ARCHIVE_ENV: str(archive)}) is None
    class_archive.make_spark_home(home, pyspark_home)
    assert (home / "jars" / "scala.jar").read_bytes() == b"scala 2!"
    assert installed({ARCHIVE_ENV: str(archive)}) is not None


@pytest.mark.unit
def test_a_pyspark_without_jars_gets_no_mirror(tmp_path: Path) -> None:
    (tmp_path / "pyspark").mkdir()
    with pytest.raises(ClassArchiveError, match=r"no Spark jars under .*pyspark/jars"):
        class_archive.make_spark_home(tmp_path / "home", tmp_path / "pyspark")
    assert not (tmp_path / "home").exists()


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
def test_an_archive_is_installed_only_once_written_whole_and_proven_by_a_second_jvm(
    tmp_path: Path, pyspark_home: Path
) -> None:
    target = tmp_path / "cache" / "a.jsa"
    home = tmp_path / "cache" / "a.spark-home"
    # Both steps run their JVM from the mirror: SPARK_HOME names it.
    train = f'test "$SPARK_HOME" = {home} && printf archive > "$archive"'
    prove = f'test "$SPARK_HOME" = {home} && test "$(cat "$archive")" = archive'
    built = build(target, python=_fake_python(tmp_path, train=train, prove=prove))
    assert target.read_bytes() == b"archive" and built.bytes == 7 and built.path == target
    assert (tmp_path / "steps").read_text().split() == ["_train", "_prove"]
    assert sorted(os.listdir(target.parent)) == ["a.jsa", "a.spark-home"]  # no temporary file left
    assert installed({ARCHIVE_ENV: str(target)}) == class_archive.Archive(target, home)


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
    tmp_path: Path, pyspark_home: Path, train: str, prove: str, error: str
) -> None:
    target = tmp_path / "a.jsa"
    target.write_bytes(b"the archive in use")
    with pytest.raises(ClassArchiveError, match=error):
        build(target, python=_fake_python(tmp_path, train=train, prove=prove))
    assert target.read_bytes() == b"the archive in use"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["a.jsa", "a.spark-home", "python", "steps", "venv"]  # no temporary file left


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
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert session.build_session(quick_jit=True, class_archive=ARCHIVE) == "session"
    assert started == [
        f"-XX:TieredStopAtLevel=1 -XX:+UseParallelGC {class_archive.java_options(Path('/c/a.jsa'))}",
        "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC",
    ]
    assert "SPARK_HOME" not in os.environ


@pytest.mark.unit
def test_the_jvm_is_launched_from_the_archive_s_spark_home_which_this_process_does_not_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str | None, str]] = []

    def fake_session(master: Any, memory: str, partitions: int, name: str, java: str) -> str:
        seen.append((os.environ.get("SPARK_HOME"), java))
        return "session"

    monkeypatch.setattr(session, "_session", fake_session)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert session.build_session(class_archive=ARCHIVE) == "session"
    assert seen == [("/c/a.spark-home", f"-XX:+UseParallelGC {class_archive.java_options(Path('/c/a.jsa'))}")]
    assert "SPARK_HOME" not in os.environ

    # SPARK_HOME naming another Spark: its jars are not the archive's, so the archive is not used.
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert session.build_session(class_archive=ARCHIVE) == "session"
    assert seen[1] == ("/opt/spark", "-XX:+UseParallelGC")
    assert os.environ["SPARK_HOME"] == "/opt/spark"


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
    monkeypatch.delenv("SPARK_HOME", raising=False)
    with pytest.raises(type(error())):
        session.build_session(class_archive=ARCHIVE)
    assert len(calls) == 1
    assert "SPARK_HOME" not in os.environ


@pytest.mark.spark
def test_the_tests_session_runs_with_the_archive_make_setup_built(spark: Any) -> None:
    archive = installed()
    if archive is None:
        pytest.skip(f"no class archive at {default_path()}: make setup builds it")
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive.path}" in arguments and "-Xshare:auto" in arguments
    # Its jars are the mirror's, whose paths and times the archive was made with (this virtualenv's would not fit).
    class_path = str(jvm.System.getProperty("java.class.path")).split(":")
    jars = [p for p in class_path if p.endswith(".jar")]
    assert jars and all(Path(p).parent == archive.spark_home / "jars" for p in jars), class_path[:3]
    assert spark.range(10).selectExpr("sum(id)").collect()[0][0] == 45


@pytest.mark.unit
def test_make_setup_s_build_keeps_an_archive_that_is_there_and_builds_none_when_switched_off(
    tmp_path: Path, pyspark_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"12345")
    class_archive.make_spark_home(class_archive.spark_home_of(archive), pyspark_home)
    monkeypatch.setattr(class_archive, "build", lambda *a, **k: pytest.fail("built again"))
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    assert class_archive.main(["build"]) == 0
    home = tmp_path / "a.spark-home"
    assert capsys.readouterr().out == f"class archive {archive} is there (5 bytes), with its Spark home {home}\n"
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


@pytest.mark.unit
def test_archives_without_a_spark_home_are_removed_from_the_cache_and_nothing_else_is(tmp_path: Path) -> None:
    legacy = tmp_path / "scan-classes-spark-4.3.0.jsa"  # made from a virtualenv's jars by an earlier version
    legacy.write_bytes(b"old")
    current = tmp_path / "scan-classes-spark-4.3.0-a02423c64ac9.jsa"
    current.write_bytes(b"new")
    class_archive.spark_home_of(current).mkdir()
    other = tmp_path / "notes.txt"
    other.write_text("kept")
    assert class_archive.remove_unusable(tmp_path) == [legacy]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [current.name, class_archive.spark_home_of(current).name, "notes.txt"]
    )
