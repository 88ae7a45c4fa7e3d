# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of a metadata replay's two per-record loops: reading a page of the log
(:func:`orchestrator.metadata.sql.tables.page_log`, each row checked and decoded by ``verified``) and folding records
into an image (:func:`orchestrator.metadata.image.replay_py`). ``make`` builds this module; without it the
references run.

Both run the common case here and hand every other record to the Python reference, one record at a time, so they
return equal values and raise the same errors by construction:

* :func:`read_page` decodes a row itself only when its checksum holds, its frame header is three varints of one or
  two bytes, its type and version have a plain codec (``lookup`` says which: not the legacy tiered-epoch rule, not
  an unknown type or version) and that codec takes exactly the row's bytes. Any other row, including one the codec refuses,
  goes to ``verified``, the reference, which returns its record or raises (and logs) what the reference raises.
  It stops at the first row whose offset breaks the run: the caller decides between a truncated log and damage.
* :func:`fold` applies the four record types that make up the bulk of a cluster's log (TopicRecord,
  PartitionRecord, ConfigRecord, TieredStateRecord) here when they apply cleanly. A record of another type, or one
  its rule refuses (an unknown topic, a stale tiered epoch, an unknown state or policy code), is applied by the
  reference rule, which raises where the reference raises. Nothing is written before a refusal is known.
  :func:`fold_partitions` is the end of the reference's ``_Builder.build``.

So this module holds a second copy of four replay rules and of the row check: a change to one of them is made here
too, and the property tests fail until it is.

Frozen dataclasses are built as their ``__init__`` builds them, each field set as ``object.__setattr__`` sets it
(``PyObject_GenericSetAttr``), without the Python-level calls that are most of the cost of building one; the
callers check that the classes' fields are the ones named here.
``tests/orchestrator/metadata/test_compiled_replay.py`` holds both functions to the references.
"""

from cpython.object cimport PyObject, PyObject_GenericSetAttr, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from zlib import crc32


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)
    void PyObject_GC_UnTrack(object op)


cdef bint _only_ints(tuple t):
    for v in t:
        if type(v) is not int:
            return False
    return True


cdef tuple _ints(values, bint* all_ints):
    """``tuple(values)``; when it holds only ints (broker ids) it is untracked by the cycle collector, which would
    untrack it itself at its first look, after walking it (a tuple of ints can never be part of a cycle), and
    ``all_ints`` stays true, else it is set false."""
    cdef tuple t = tuple(values)
    if _only_ints(t):
        PyObject_GC_UnTrack(t)
    else:
        all_ints[0] = False
    return t


cdef tuple _NO_ARGS = ()
_MISSING = object()


cdef inline object _entry(type entry_type, offset, record, epoch):
    """``entry_type((offset, record, epoch, None))`` for a tuple subclass of four items, made as ``tuple.__new__``
    makes one of a subclass: allocated by the type, then filled."""
    e = PyType_GenericAlloc(<PyTypeObject*>entry_type, 4)
    Py_INCREF(offset)
    PyTuple_SET_ITEM(e, 0, offset)
    Py_INCREF(record)
    PyTuple_SET_ITEM(e, 1, record)
    Py_INCREF(epoch)
    PyTuple_SET_ITEM(e, 2, epoch)
    Py_INCREF(None)
    PyTuple_SET_ITEM(e, 3, None)
    return e


cdef inline object _new(type cls):
    """``object.__new__(cls)``, for a class with no ``__new__`` of its own (the frozen dataclasses here)."""
    return (<PyTypeObject*>cls).tp_new(cls, <PyObject*>_NO_ARGS, NULL)


cdef Py_ssize_t _uvarint(const unsigned char* p, Py_ssize_t pos, Py_ssize_t size, long* out):
    """The unsigned varint of at most two bytes (a value below 2**14) at ``pos``: the position after it, or -1."""
    if pos >= size:
        return -1
    if p[pos] < 0x80:
        out[0] = p[pos]
        return pos + 1
    if pos + 1 >= size or p[pos + 1] >= 0x80:
        return -1
    out[0] = (p[pos] & 0x7F) | (<long>p[pos + 1] << 7)
    return pos + 2


cdef Py_ssize_t _frame_header(
    const unsigned char* p, Py_ssize_t size, int frame_version, long* api_key, long* version
):
    """Where the body starts after a frame header of the frame version, a type and a version, each a varint of
    one or two bytes; -1 for any other header (the reference reads it)."""
    cdef long frame
    cdef Py_ssize_t pos = _uvarint(p, 0, size, &frame)
    if pos < 0 or frame != frame_version:
        return -1
    pos = _uvarint(p, pos, size, api_key)
    if pos < 0:
        return -1
    return _uvarint(p, pos, size, version)


def read_page(
    list rows, Py_ssize_t expected, dict decoders, lookup, verified, type entry_type, type record_type,
    int frame_version,
):
    """``(entries, next expected offset)``: the ``(offset, controller epoch, data, crc)`` rows as log entries, from
    the first row on while the offsets run ``expected``, ``expected + 1``, ...; ``decoders`` memoizes ``lookup``."""
    cdef list out = []
    cdef Py_ssize_t i, n_rows = len(rows), size, end_pos, start
    cdef const unsigned char* p
    cdef bytes raw
    cdef long long key
    cdef long api_key, version_number
    for i in range(n_rows):
        offset, epoch, data, crc = rows[i]
        if offset != expected:
            break
        record = None
        if type(data) is bytes and crc32(data) == crc:
            raw = <bytes>data
            p = raw
            size = len(raw)
            start = _frame_header(p, size, frame_version, &api_key, &version_number)
            if start > 0:
                key = (api_key << 16) | version_number
                how = decoders.get(key, _MISSING)
                if how is _MISSING:
                    how = lookup(api_key, version_number)
                    decoders[key] = how
                if how is not None:
                    name, version, decode_range = how
                    try:
                        fields, end_pos = decode_range(raw, start, size)
                    except Exception:  # the reference below raises it again, as the reference words it
                        end_pos = -1
                    if end_pos == size:
                        record = _new(record_type)
                        PyObject_GenericSetAttr(record, "name", name)
                        PyObject_GenericSetAttr(record, "version", version)
                        PyObject_GenericSetAttr(record, "fields", fields)
        if record is None:
            record = verified(data, crc, offset)
        out.append(_entry(entry_type, offset, record, epoch))
        expected += 1
    return out, expected


cdef class FoldKit:
    """What :func:`fold` builds images with: the image classes, the enums' members by code, the members a new
    topic starts with, the empty mapping and the read-only mapping type."""

    cdef type partition_type, topic_type, change_type
    cdef dict states, policies
    cdef object not_tiered, no_policy, empty, mapping_proxy

    def __init__(
        self, type partition_type, type topic_type, type change_type, dict states, dict policies, not_tiered,
        no_policy, empty, mapping_proxy,
    ):
        self.partition_type, self.topic_type, self.change_type = partition_type, topic_type, change_type
        self.states, self.policies = states, policies
        self.not_tiered, self.no_policy = not_tiered, no_policy
        self.empty, self.mapping_proxy = empty, mapping_proxy


cdef object _new_topic(FoldKit kit, topic_id, name, partitions, tiered_epoch, tiered_state, policy):
    t = _new(kit.topic_type)
    PyObject_GenericSetAttr(t, "topic_id", topic_id)
    PyObject_GenericSetAttr(t, "name", name)
    PyObject_GenericSetAttr(t, "partitions", partitions)
    PyObject_GenericSetAttr(t, "tiered_epoch", tiered_epoch)
    PyObject_GenericSetAttr(t, "tiered_state", tiered_state)
    PyObject_GenericSetAttr(t, "policy", policy)
    return t


cdef class _LastTopic:
    """The partitions map the last PartitionRecord wrote to, by its topic id's bytes: a log lists a topic's
    partitions together, and finding the map again by a freshly decoded Uuid costs two Python-level calls (its
    ``__hash__`` and ``__eq__``). Forgotten whenever any other record is applied (a removed and re-created topic
    gets a new map)."""

    cdef object raw
    cdef dict parts


cdef bint _partition(FoldKit kit, b, dict f, dict partitions, _LastTopic last) except -1:
    """A PartitionImage of only ints and tuples of ints (what a decoded record gives) can never be part of a cycle:
    it is untracked by the cycle collector, which walks the image's objects at every full collection otherwise
    (three quarters of a large cluster's image are partitions). One holding anything else stays tracked."""
    cdef bint all_ints = True
    p = _new(kit.partition_type)
    partition_id, leader = f["partition_id"], f["leader"]
    leader_epoch, partition_epoch = f["leader_epoch"], f["partition_epoch"]
    PyObject_GenericSetAttr(p, "partition_id", partition_id)
    PyObject_GenericSetAttr(p, "replicas", _ints(f["replicas"], &all_ints))
    PyObject_GenericSetAttr(p, "isr", _ints(f["isr"], &all_ints))
    PyObject_GenericSetAttr(p, "leader", leader)
    PyObject_GenericSetAttr(p, "leader_epoch", leader_epoch)
    PyObject_GenericSetAttr(p, "partition_epoch", partition_epoch)
    elr = f.get("eligible_leader_replicas")
    PyObject_GenericSetAttr(p, "elr", _ints(elr, &all_ints) if elr else ())
    if (
        all_ints and type(partition_id) is int and type(leader) is int and type(leader_epoch) is int
        and type(partition_epoch) is int
    ):
        PyObject_GC_UnTrack(p)
    topic_id = f["topic_id"]
    raw = topic_id.raw
    cdef dict parts
    if last.parts is not None and raw == last.raw:
        parts = last.parts
    else:
        found = partitions.get(topic_id)
        if found is None:
            found = b.partitions_of(topic_id)  # the reference's own look-up: UnknownTopicId for an unknown topic
        parts = found
        last.raw, last.parts = raw, parts
    parts[f["partition_id"]] = p
    return True


cdef bint _topic(FoldKit kit, b, dict f) except -1:
    topic_id, name = f["topic_id"], f["name"]
    b.topics[topic_id] = _new_topic(kit, topic_id, name, kit.empty, 0, kit.not_tiered, kit.no_policy)
    b.by_name[name] = topic_id
    return True


cdef bint _config(FoldKit kit, b, dict f) except -1:
    key = (f["resource_type"], f["resource_name"])
    configs = b.configs
    current = dict(configs.get(key, kit.empty))
    value = f["value"]
    if value is None:
        current.pop(f["name"], None)
    else:
        current[f["name"]] = value
    if current:
        configs[key] = kit.mapping_proxy(current)
    else:
        configs.pop(key, None)
    return True


cdef bint _tiered_state(FoldKit kit, b, dict f) except -1:
    """False, changing nothing, where the reference rule refuses the record (it then raises)."""
    topics = b._topics
    if topics is None:
        topics = b.image.topics
    t = topics.get(f["topic_id"])
    if t is None:
        return False
    epoch = f["tiered_epoch"]
    if epoch < t.tiered_epoch:
        return False
    state = kit.states.get(f["tiered_state"])
    policy = kit.policies.get(f["policy"])
    if state is None or policy is None:
        return False
    change = _new(kit.change_type)
    PyObject_GenericSetAttr(change, "tiered_epoch", epoch)
    PyObject_GenericSetAttr(change, "tiered_state", state)
    PyObject_GenericSetAttr(change, "policy", policy)
    topic_id = t.topic_id
    b.topics[topic_id] = _new_topic(kit, topic_id, t.name, t.partitions, epoch, state, policy)
    history = b.history
    history[topic_id] = history.get(topic_id, ()) + (change,)
    return True


def fold(b, entries, dict rules, FoldKit kit):
    """Apply ``(offset, record, ...)`` entries in order to the builder ``b``, as the reference's loop does."""
    cdef dict partitions = b._partitions
    cdef _LastTopic last_topic = _LastTopic()
    cdef bint done
    last = b.offset
    for entry in entries:
        offset, record = entry[0], entry[1]
        if offset <= last:
            raise ValueError(f"record offset {offset} is not after the image's offset {last}")
        name = record.name
        f = record.fields
        done = False
        if type(f) is dict:  # decoded and made records hold dicts; any other mapping goes to the reference rules
            if name == "PartitionRecord":
                done = _partition(kit, b, <dict>f, partitions, last_topic)
            else:
                last_topic.parts = None
                if name == "ConfigRecord":
                    done = _config(kit, b, <dict>f)
                elif name == "TopicRecord":
                    done = _topic(kit, b, <dict>f)
                elif name == "TieredStateRecord":
                    done = _tiered_state(kit, b, <dict>f)
        if not done:
            last_topic.parts = None
            apply = rules.get(name)
            if apply is None:
                raise ValueError(f"no replay rule for {name}")
            apply(b, f)
        last = offset
        b.offset = offset


def fold_partitions(dict topics, dict partitions, FoldKit kit):
    """Each topic of ``topics`` that ``partitions`` holds a map for gets that map (read-only) as its partitions:
    the end of the reference's ``_Builder.build``."""
    for topic_id, parts in partitions.items():
        t = topics.get(topic_id)
        if t is not None:
            topics[topic_id] = _new_topic(
                kit, t.topic_id, t.name, kit.mapping_proxy(parts), t.tiered_epoch, t.tiered_state, t.policy
            )
