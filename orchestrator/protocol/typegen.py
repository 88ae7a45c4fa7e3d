"""Generate :mod:`orchestrator.protocol.messages`: one ``TypedDict`` per message schema and per struct.

``python -m orchestrator.protocol.typegen`` rewrites ``messages.py`` from the schema files; a unit test fails when
the file in the tree differs from what this generator writes, so the types never drift from the schemas.

Mapping (the values the codec reads and writes; see :mod:`orchestrator.protocol.codec`):

* keys are the fields' snake_case ``py_name``; every TypedDict is ``total=False``, because a body being built may
  leave a field to its default (the codec fills it in), while a decoded body holds every field;
* ``int8`` .. ``int64`` -> ``int``, ``float64`` -> ``float``, ``bool``, ``string`` -> ``str``, ``bytes`` and
  ``records`` -> ``bytes``, ``uuid`` -> :class:`~orchestrator.ids.Uuid`, ``[]T`` -> ``list[T]``;
* a field nullable in any version is ``T | None``;
* a struct is its own TypedDict named by its schema name (``CreatableTopic``). A struct name used by several
  messages with the same fields is generated once; with different fields, each gets its message's name as a prefix.

Invariant: the output depends only on the schema files (sorted by message name), so it is byte-for-byte
reproducible.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.protocol.schema import FieldSpec, MessageSchema, load_schemas

OUTPUT = Path(__file__).with_name("messages.py")

_PRIMITIVES = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "uint32": "int",
    "int64": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes",
    "uuid": "Uuid",
}

_HEADER = '''"""Typed message bodies. GENERATED from the schemas by ``orchestrator.protocol.typegen``: do not edit.

Each class is the shape of a decoded body (every key present) and of a body being built (keys may be left out for
their defaults); see :mod:`orchestrator.protocol.typegen` for the mapping.
"""

from __future__ import annotations

from typing import TypedDict

from orchestrator.ids import Uuid'''


@dataclass(frozen=True, slots=True)
class _Struct:
    name: str
    owner: str  # the message it was first found in
    fields: tuple[FieldSpec, ...]


def _signature(fields: tuple[FieldSpec, ...]) -> tuple[object, ...]:
    return tuple((f.py_name, f.type, str(f.nullable_versions), _signature(f.fields)) for f in fields)


def _collect(schemas: list[MessageSchema]) -> tuple[dict[tuple[str, str], str], list[_Struct]]:
    """Every struct, and the class name of each (message, struct name) pair."""
    found: dict[str, list[tuple[str, tuple[FieldSpec, ...]]]] = {}

    def walk(message: str, fields: tuple[FieldSpec, ...]) -> None:
        for f in fields:
            if f.struct_name is not None:
                found.setdefault(f.struct_name, []).append((message, f.fields))
                walk(message, f.fields)

    for s in schemas:
        walk(s.name, s.fields)
    names: dict[tuple[str, str], str] = {}
    structs: list[_Struct] = []
    for struct_name, uses in sorted(found.items()):
        shapes = {_signature(fields) for _, fields in uses}
        for message, fields in uses:
            class_name = struct_name if len(shapes) == 1 else f"{message}{struct_name}"
            names[(message, struct_name)] = class_name
            if all(s.name != class_name for s in structs):
                structs.append(_Struct(class_name, message, fields))
    return names, structs


def _annotation(f: FieldSpec, message: str, names: dict[tuple[str, str], str]) -> str:
    element = names[(message, f.struct_name)] if f.struct_name is not None else _PRIMITIVES[f.element_type]
    text = f"list[{element}]" if f.is_array else element
    nullable = f.nullable_versions.hi is None or f.nullable_versions.lo <= f.nullable_versions.hi
    return f"{text} | None" if nullable else text


def _class(name: str, doc: str, fields: tuple[FieldSpec, ...], message: str, names: dict[tuple[str, str], str]) -> str:
    lines = [f"class {name}(TypedDict, total=False):", f'    """{doc}"""', ""]
    lines += [f"    {f.py_name}: {_annotation(f, message, names)}" for f in fields]
    return "\n".join(lines)


def render() -> str:
    """The text of ``messages.py`` for the schemas shipped in the package."""
    schemas = sorted(load_schemas().values(), key=lambda s: s.name)
    names, structs = _collect(schemas)
    blocks = [_HEADER]
    for st in sorted(structs, key=lambda s: s.name):
        blocks.append(_class(st.name, f"A struct of {st.owner}.", st.fields, st.owner, names))
    for s in schemas:
        key = f", api key {s.api_key}" if s.api_key is not None else ""
        doc = f"{s.name} ({s.type}{key}; versions {s.valid_versions})."
        blocks.append(_class(s.name, doc, s.fields, s.name, names))
    return "\n\n\n".join(blocks) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python -m orchestrator.protocol.typegen", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
