"""The architecture document is the one the code cites, and the README's layout is the tree as it is.

``docs/ARCHITECTURE.md`` numbers its sections (``## N. Title``) and the invariants of its section 4
(``### Invariant N: ...``). Code, tests and documents cite them as ``ARCHITECTURE §N``, ``ARCHITECTURE §4
invariant N`` (also ``invariants N and M``, ``inv. N``, ``items N, M``), and may name further sections after a
citation (``ARCHITECTURE §4 invariant 8, §10``). A citation of a section or an invariant the document does not have
points a reader at nothing, so it fails here, as does a citation of a design document outside the repository.
The README's layout section must name every package directory by its path, and nothing that is gone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
CITING_SUFFIXES = (".py", ".md", ".toml", ".j2")
PRUNED_DIRS = {"node_modules", "var", "__pycache__", "build", "dist"}  # and every hidden directory (.git, .venv)
PACKAGE_ROOTS = ("orchestrator", "remote_storage", "policies", "chaos", "bench")

SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
INVARIANT = re.compile(r"^### Invariant (\d+): ", re.MULTILINE)
_NUMBERS = r"\d+(?:(?:\s*,\s*|\s+and\s+)\d+)*"
_AFTER_SECTION = rf"(?:\s+(?:invariants?|inv\.|items?)\s+(?P<invariants>{_NUMBERS}))?(?P<more>(?:\s*,\s*§\d+)*)"
CITATION = re.compile(rf"ARCHITECTURE §(?P<section>\d+){_AFTER_SECTION}")
SELF_REFERENCE = re.compile(rf"(?<!ARCHITECTURE )§(?P<section>\d+){_AFTER_SECTION}")
OUTSIDE_CITATION = re.compile(r"\bDESIGN §\d")
TEST_REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
MODULE_REFERENCE = re.compile(r"`([\w/]+/[\w]+\.py)`")
LAYOUT_PATH = re.compile(rf"\b(?:{'|'.join(PACKAGE_ROOTS)})/[\w/]*(?:\.py)?")


def sections_and_invariants() -> tuple[set[int], set[int]]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section_4 = re.search(r"^## 4\. .*?(?=^## \d+\. |\Z)", text, re.MULTILINE | re.DOTALL)
    invariants = {int(n) for n in INVARIANT.findall(section_4.group(0))} if section_4 else set()
    return {int(n) for n in SECTION.findall(text)}, invariants


def citing_files() -> Iterator[Path]:
    for directory, subdirs, files in os.walk(ROOT):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in PRUNED_DIRS)
        for name in sorted(files):
            if name.endswith(CITING_SUFFIXES):
                yield Path(directory, name)


def numbers(text: str | None) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text or "")]


def line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def unresolved(text: str, pattern: re.Pattern[str], sections: set[int], invariants: set[int]) -> list[str]:
    """What each citation in ``text`` names that the document does not have, with the citation's line."""
    out = []
    for match in pattern.finditer(text):
        line = line_of(text, match.start())
        cited = " ".join(match.group(0).split())
        named = [int(match.group("section")), *numbers(match.group("more"))]
        missing = [f"§{n}" for n in named if n not in sections]
        if match.group("invariants"):
            if int(match.group("section")) != 4:
                missing.append(f"invariants of §{match.group('section')} (only §4 numbers invariants)")
            missing += [f"§4 invariant {n}" for n in numbers(match.group("invariants")) if n not in invariants]
        if missing:
            out.append(f"line {line}: {cited!r} names {', '.join(missing)}")
    return out


def test_the_architecture_document_numbers_its_sections_and_the_invariants_the_code_cites() -> None:
    sections, invariants = sections_and_invariants()
    # The subjects today's citations rely on: 2 the parts, 4 the state machine and invariants 1-8, 7 the scan, 8 the
    # CLI surface, 9 the layers, 10 the fault model. Numbers are never reused: new sections come after the last.
    assert sections == set(range(1, max(sections) + 1)), f"sections are numbered 1..N without gaps: {sorted(sections)}"
    assert {2, 4, 7, 8, 9, 10} <= sections
    assert invariants == set(range(1, 9)), f"§4 numbers invariants 1 to 8: {sorted(invariants)}"


def test_every_citation_in_the_repository_names_a_section_and_invariant_the_document_has() -> None:
    sections, invariants = sections_and_invariants()
    problems, cited = [], 0
    for path in citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        cited += len(CITATION.findall(text))
        where = path.relative_to(ROOT)
        problems += [f"{where} {p}" for p in unresolved(text, CITATION, sections, invariants)]
    assert not problems, "citations of what docs/ARCHITECTURE.md does not have:\n" + "\n".join(problems)
    assert cited > 0, "the repository cites the document"


def test_the_documents_references_to_its_own_sections_resolve() -> None:
    sections, invariants = sections_and_invariants()
    problems = unresolved(ARCHITECTURE.read_text(encoding="utf-8"), SELF_REFERENCE, sections, invariants)
    assert not problems, "\n".join(problems)


def test_nothing_cites_a_design_document_outside_the_repository() -> None:
    stale = []
    for path in citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        stale += [f"{path.relative_to(ROOT)}:{line_of(text, m.start())}" for m in OUTSIDE_CITATION.finditer(text)]
    assert not stale, "cite docs/ARCHITECTURE.md as ARCHITECTURE §N instead:\n" + "\n".join(stale)


def test_the_tests_and_modules_the_document_names_exist() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert TEST_REFERENCE.search(text) and MODULE_REFERENCE.search(text), "the document names tests and modules"
    missing = []
    for path, name in TEST_REFERENCE.findall(text):
        source = ROOT / path
        defined = re.compile(rf"^(?:async def |def ){name}\(|^{name} = ", re.MULTILINE)
        if not source.is_file() or not defined.search(source.read_text(encoding="utf-8")):
            missing.append(f"{path}::{name}")
    for module in MODULE_REFERENCE.findall(text):
        if not any((base / module).is_file() for base in (ROOT, ROOT / "orchestrator", ROOT / "remote_storage")):
            missing.append(module)
    assert not missing, "docs/ARCHITECTURE.md names what is not there:\n" + "\n".join(missing)


def layout_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Layout\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def package_directories() -> list[str]:
    found = {
        init.parent.relative_to(ROOT).as_posix() + "/"
        for root in PACKAGE_ROOTS
        for init in (ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    return sorted(found)


def test_the_readme_layout_names_every_package_directory() -> None:
    layout = layout_section()
    packages = package_directories()
    assert "orchestrator/controller/" in packages
    missing = [p for p in packages if f"`{p}`" not in layout]
    assert not missing, "README's Layout section does not list these packages by their path:\n" + "\n".join(missing)


def test_the_readme_layout_names_nothing_that_is_gone() -> None:
    gone = sorted({p for p in LAYOUT_PATH.findall(layout_section()) if not (ROOT / p).exists()})
    assert not gone, "README's Layout section names paths that do not exist:\n" + "\n".join(gone)
