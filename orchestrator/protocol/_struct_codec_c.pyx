# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the generated struct codecs (:mod:`orchestrator.protocol.codegen`).

It runs the same plan (:class:`~orchestrator.protocol.codegen.StructPlan`) the generator turns into Python source,
as a loop over fields in C: fixed-width fields, strings, arrays of fixed-width values and of UUIDs, varint lengths
and an empty tagged-field section are read and written here; bytes, nested structs and a non-empty tagged section
call the reference closures, as the generated code does.

Invariants (the generated code's, checked by ``tests/orchestrator/protocol/test_codegen.py`` against the reference
closures for every schema and version):
* The decoder accepts exactly the inputs the reference accepts and returns equal values, with keys in the same
  order; on anything malformed it raises ProtocolError, checking every length and count against the bytes left
  before reading them. No read goes past ``min(end, len(buffer))``.
* The encoder writes the reference's bytes. On any value it cannot write it removes what it wrote and runs the
  reference encoder, which raises the error naming the field, and leaves ``out`` as it found it. Fixed-width
  values are packed by the same ``struct`` objects as the generated code, so what one refuses the other does.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject_GenericSetAttr
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef extern from "Python.h":
    double PyFloat_Unpack8(const char *p, int le) except? -1.0
    int PyFloat_Pack8(double x, char *p, int le) except -1
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t *size) except NULL
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyBytes_CheckExact(object o)
    double PyFloat_AS_DOUBLE(object o)


cdef object _object_new = object.__new__
cdef str _RAW = "raw"


class _Refused(Exception):
    """A value the compiled writer leaves to the reference encoder (which writes it or names what is wrong)."""


cdef enum:
    K_FIXED = 0
    K_STRING = 1
    K_ARRAY = 2
    K_UUIDS = 3
    K_CALL = 4

KIND_FIXED = K_FIXED
KIND_STRING = K_STRING
KIND_ARRAY = K_ARRAY
KIND_UUIDS = K_UUIDS
KIND_CALL = K_CALL


cdef class Op:
    """One step of a plan: a run of fixed-width fields, or one field of another kind."""

    cdef readonly int kind
    cdef readonly object key  # the dict key (the first of a fixed run's)
    cdef readonly str label  # the schema's name, for messages
    cdef readonly bint compact  # varint lengths
    cdef readonly bint nullable
    cdef readonly object fn  # call: the reference closure (decode or encode)
    cdef readonly Py_ssize_t size  # fixed: the run's bytes; array (of numbers or UUIDs): one element's
    cdef readonly tuple keys  # fixed: every key of the run
    cdef readonly bytes chars  # one struct format character per key of a fixed run, or an array's element's
    # ('u': a UUID's 16 bytes)

    def __init__(self, int kind, key, str label, bint compact, bint nullable, fn, Py_ssize_t size, tuple keys,
                 bytes chars):
        self.kind = kind
        self.key = key
        self.label = label
        self.compact = compact
        self.nullable = nullable
        self.fn = fn
        self.size = size
        self.keys = keys
        self.chars = chars


cdef class _Default:
    """A field's default: the value itself when immutable, else a factory called for each fresh one."""

    cdef object key
    cdef object value
    cdef bint factory
    cdef bint empty_list  # the factory is ``list``: made here, with no call

    def __init__(self, key, value, bint factory):
        self.key = key
        self.value = value
        self.factory = factory
        self.empty_list = factory and value is list

    cdef inline object make(self):
        if self.empty_list:
            return []
        return self.value() if self.factory else self.value


cdef tuple _defaults(pairs):
    return tuple(_Default(key, value, factory) for key, value, factory in pairs)


cdef inline uint32_t _be16(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 8) | p[1]


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint64_t _be64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>_be32(p) << 32) | _be32(p + 4)


cdef inline object _read_one(unsigned char c, const unsigned char* p):
    """The value of struct format character ``c`` at ``p`` (big-endian), as ``struct`` unpacks it."""
    if c == b'i':
        return <int32_t>_be32(p)
    if c == b'q':
        return <int64_t>_be64(p)
    if c == b'h':
        return <int16_t>_be16(p)
    if c == b'b':
        return <int8_t>p[0]
    if c == b'H':
        return <uint16_t>_be16(p)
    if c == b'I':
        return _be32(p)
    if c == b'd':
        return PyFloat_Unpack8(<const char*>p, 0)
    return p[0] != 0  # '?'


cdef inline Py_ssize_t _width(unsigned char c) noexcept:
    if c == b'i' or c == b'I':
        return 4
    if c == b'q' or c == b'd':
        return 8
    if c == b'h' or c == b'H':
        return 2
    return 1


cdef int _write_one(unsigned char c, v, unsigned char* p) except -1:
    """Write ``v`` as struct format character ``c`` at ``p``; :class:`_Refused` for anything but an int (bools and
    IntEnums are ints) of the type's range, or a float for 'd', so every other value goes to the reference."""
    cdef int overflow = 0
    cdef long long x
    cdef unsigned long long u
    cdef int i
    if c == b'?':
        p[0] = 1 if v else 0
        return 0
    if c == b'd':
        if not PyFloat_Check(v):
            raise _Refused()
        PyFloat_Pack8(PyFloat_AS_DOUBLE(v), <char*>p, 0)
        return 0
    if not PyLong_Check(v):
        raise _Refused()
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        raise _Refused()
    if c == b'i':
        if x < -2147483648 or x > 2147483647:
            raise _Refused()
        i = 4
    elif c == b'q':
        i = 8
    elif c == b'h':
        if x < -32768 or x > 32767:
            raise _Refused()
        i = 2
    elif c == b'b':
        if x < -128 or x > 127:
            raise _Refused()
        i = 1
    elif c == b'H':
        if x < 0 or x > 65535:
            raise _Refused()
        i = 2
    else:  # 'I'
        if x < 0 or x > 4294967295:
            raise _Refused()
        i = 4
    u = <unsigned long long>x
    while i > 0:
        i -= 1
        p[i] = u & 0xFF
        u >>= 8
    return 0


cdef object _new_uuid(type uuid_type, const unsigned char* p):
    """A Uuid of the 16 bytes at ``p``, made as :func:`orchestrator.protocol.codegen._uuid` makes it."""
    u = _object_new(uuid_type)
    PyObject_GenericSetAttr(u, _RAW, PyBytes_FromStringAndSize(<const char*>p, 16))
    return u


cdef class StructDecoder:
    """``decoder(reader) -> dict``: the generated ``decode`` of one plan, compiled."""

    cdef tuple ops
    cdef bint flexible
    cdef tuple tagged_defaults
    cdef tuple absent_defaults
    cdef object read_tagged
    cdef object reader_type
    cdef type uuid
    cdef object error  # ProtocolError

    def __init__(self, tuple ops, bint flexible, tagged, absent, read_tagged, reader_type, type uuid, error):
        self.ops = ops
        self.flexible = flexible
        self.tagged_defaults = _defaults(tagged)
        self.absent_defaults = _defaults(absent)
        self.read_tagged = read_tagged
        self.reader_type = reader_type
        self.uuid = uuid
        self.error = error

    def __call__(self, r):
        cdef Py_ssize_t pos = r.pos
        value = self._decode(r.buf, &pos, r.end, r)
        return value

    def decode_range(self, buf, Py_ssize_t pos, Py_ssize_t end):
        """``(value, position after it)`` of the struct at ``buf[pos:end]``, with no Reader unless one is needed."""
        value = self._decode(buf, &pos, end, None)
        return value, pos

    cdef object _trunc(self, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t end):
        return self.error(f"truncated: need {n} bytes at position {pos}, {end - pos} left")

    cdef object _decode(self, buf, Py_ssize_t* at, Py_ssize_t end, r):
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if end > view.len:
                end = view.len
            return self._decode_view(<const unsigned char*>view.buf, buf, at, end, r)
        finally:
            PyBuffer_Release(&view)

    cdef object _varint(self, const unsigned char* data, buf, Py_ssize_t* at, Py_ssize_t end, r):
        """An unsigned varint at ``at``: inline when one byte, else the Reader's bounded loop (its errors)."""
        cdef Py_ssize_t pos = at[0]
        if pos >= end:
            raise self.error(f"truncated varint at position {pos}")
        if data[pos] < 0x80:
            at[0] = pos + 1
            return data[pos]
        if r is None:
            r = self.reader_type(buf, pos, end)
        else:
            r.pos = pos
        value = r.uvarint()
        at[0] = r.pos
        return value

    cdef long long _length(self, Op op, const unsigned char* data, buf, Py_ssize_t* at, Py_ssize_t end, r,
                           bint long_length) except? -3:
        """The field's length, or -1 for null (compact varint+1, or classic int16/int32)."""
        cdef Py_ssize_t pos = at[0]
        cdef long long n
        if op.compact:
            n = self._varint(data, buf, at, end, r)
            return n - 1
        if long_length:
            if end - pos < 4:
                raise self._trunc(4, pos, end)
            n = <int32_t>_be32(data + pos)
            pos += 4
        else:
            if end - pos < 2:
                raise self._trunc(2, pos, end)
            n = <int16_t>_be16(data + pos)
            pos += 2
        at[0] = pos
        if n < -1:
            raise self.error(f"negative length {n} at position {pos}")
        return n

    cdef object _null(self, Op op):
        if not op.nullable:
            raise self.error("null value for non-nullable field " + op.label)
        return None

    cdef object _decode_view(self, const unsigned char* data, buf, Py_ssize_t* at, Py_ssize_t end, r):
        cdef dict d = {}
        cdef Py_ssize_t pos = at[0]
        cdef Py_ssize_t i, k, stop
        cdef long long n
        cdef Op op
        cdef _Default default
        cdef const unsigned char* p
        cdef unsigned char c
        cdef list items
        for op in self.ops:
            if op.kind == K_FIXED:
                if end - pos < op.size:
                    raise self._trunc(op.size, pos, end)
                p = data + pos
                for i in range(len(op.keys)):
                    c = op.chars[i]
                    if c == b'u':
                        d[op.keys[i]] = _new_uuid(self.uuid, p)
                        p += 16
                    else:
                        d[op.keys[i]] = _read_one(c, p)
                        p += _width(c)
                pos += op.size
            elif op.kind == K_STRING:
                n = self._length(op, data, buf, &pos, end, r, False)
                if n == -1:
                    d[op.key] = self._null(op)
                    continue
                if n > 0x7FFF:
                    raise self.error(f"{op.label}: string length {n} exceeds 32767")
                if n > end - pos:
                    raise self._trunc(n, pos, end)
                try:
                    d[op.key] = PyUnicode_DecodeUTF8(<const char*>data + pos, n, NULL)
                except UnicodeDecodeError as exc:
                    raise self.error(f"{op.label}: invalid UTF-8: {exc}") from exc
                pos += n
            elif op.kind == K_ARRAY:
                n = self._length(op, data, buf, &pos, end, r, True)
                if n == -1:
                    d[op.key] = self._null(op)
                    continue
                if n * op.size > end - pos:
                    raise self.error(f"{op.label}: array of {n} elements but only {end - pos} bytes left")
                c = op.chars[0]
                items = PyList_New(n)
                for k in range(n):
                    v = _read_one(c, data + pos)
                    Py_INCREF(v)
                    PyList_SET_ITEM(items, k, v)
                    pos += op.size
                d[op.key] = items
            elif op.kind == K_UUIDS:
                n = self._length(op, data, buf, &pos, end, r, True)
                if n == -1:
                    d[op.key] = self._null(op)
                    continue
                if n * 16 > end - pos:
                    raise self._trunc(n * 16, pos, end)
                items = []
                stop = pos + n * 16
                k = pos
                while k < stop:
                    items.append(_new_uuid(self.uuid, data + k))
                    k += 16
                d[op.key] = items
                pos = stop
            else:  # K_CALL: the reference closure reads it through a Reader
                if r is None:
                    r = self.reader_type(buf, pos, end)
                else:
                    r.pos = pos
                d[op.key] = op.fn(r)
                pos = r.pos
        if self.flexible:
            if pos >= end:
                raise self.error(f"truncated varint at position {pos}")
            if data[pos] == 0:  # no tagged fields: the common case
                pos += 1
                for default in self.tagged_defaults:
                    d[default.key] = default.make()
            else:
                if r is None:
                    r = self.reader_type(buf, pos, end)
                else:
                    r.pos = pos
                self.read_tagged(r, d)
                pos = r.pos
        for default in self.absent_defaults:
            d[default.key] = default.make()
        if r is not None:
            r.pos = pos
        at[0] = pos
        return d


cdef class StructEncoder:
    """``encoder(value, out)``: the generated ``encode`` of one plan, compiled."""

    cdef str name
    cdef tuple ops
    cdef tuple unsupported
    cdef tuple plain_defaults
    cdef bint flexible
    cdef tuple tagged_defaults
    cdef object write_tagged
    cdef object reference
    cdef object missing
    cdef object zero_uuid
    cdef object unsupported_version
    cdef tuple errors

    def __init__(self, str name, tuple ops, unsupported, plain_defaults, bint flexible, tagged, write_tagged,
                 reference, missing, zero_uuid, unsupported_version, tuple errors):
        self.name = name
        self.ops = ops
        self.unsupported = _defaults(unsupported)
        self.plain_defaults = _defaults(plain_defaults)
        self.flexible = flexible
        self.tagged_defaults = _defaults(tagged)
        self.write_tagged = write_tagged
        self.reference = reference
        self.missing = missing
        self.zero_uuid = zero_uuid
        self.unsupported_version = unsupported_version
        self.errors = (_Refused,) + errors

    def __call__(self, value, out):
        cdef _Default default
        cdef Py_ssize_t start
        for default in self.unsupported:
            v = value.get(default.key)
            if v is not None and v != default.make():
                raise self.unsupported_version(
                    f"{self.name}.{default.key} cannot be sent at this version (value " + repr(v) + ")"
                )
        if type(out) is not bytearray:
            self.reference(value, out)
            return
        start = len(out)
        try:
            self._encode(value, <bytearray>out)
        except self.errors:
            del out[start:]
            try:
                self.reference(value, out)
            except BaseException:
                del out[start:]  # a refused value leaves ``out`` as it was
                raise

    cdef list _values(self, value):
        """Every plain field's value, in plan order; a value lacking one takes every default from ``get``."""
        cdef _Default default
        cdef list values = []
        try:
            for default in self.plain_defaults:
                values.append(value[default.key])
        except KeyError:
            values = []
            get = value.get
            for default in self.plain_defaults:
                v = get(default.key, self.missing)
                values.append(default.make() if v is self.missing else v)
        return values

    cdef void _uvarint(self, bytearray out, unsigned long long n):
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)

    cdef _length(self, Op op, bytearray out, Py_ssize_t n, bint long_length):
        if op.compact:
            self._uvarint(out, n + 1)
        elif long_length:
            if n > 2147483647:
                raise _Refused()
            _write_one(b'i', n, self._grow(out, 4))
        else:
            _write_one(b'h', n, self._grow(out, 2))

    cdef _null(self, Op op, bytearray out, bint long_length):
        if not op.nullable:
            raise ValueError("not nullable")  # the reference encoder then names the field
        if op.compact:
            out.append(0)
        elif long_length:
            out += b"\xff\xff\xff\xff"
        else:
            out += b"\xff\xff"

    cdef unsigned char* _grow(self, bytearray out, Py_ssize_t n) except NULL:
        """Room for ``n`` more bytes at the end of ``out``: where to write them."""
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(out)
        PyByteArray_Resize(out, size + n)
        return <unsigned char*>PyByteArray_AS_STRING(out) + size

    cdef _raw16(self, v, unsigned char* p):
        """A uuid's 16 bytes, ``(v or ZERO).raw`` as the generated code writes them."""
        raw = (v or self.zero_uuid).raw
        if not PyBytes_CheckExact(raw) or PyBytes_GET_SIZE(raw) != 16:
            raise _Refused()
        memcpy(p, PyBytes_AS_STRING(raw), 16)

    cdef _encode(self, value, bytearray out):
        cdef list values = self._values(value)
        cdef Py_ssize_t at = 0
        cdef Py_ssize_t i, n
        cdef Op op
        cdef _Default default
        cdef unsigned char c
        cdef unsigned char* p
        cdef const char* utf8
        for op in self.ops:
            if op.kind == K_FIXED:
                p = self._grow(out, op.size)
                for i in range(len(op.keys)):
                    c = op.chars[i]
                    if c == b'u':
                        self._raw16(values[at], p)
                        p += 16
                    else:
                        _write_one(c, values[at], p)
                        p += _width(c)
                    at += 1
                continue
            v = values[at]
            at += 1
            if op.kind == K_STRING:
                if v is None:
                    self._null(op, out, False)
                    continue
                if not PyUnicode_Check(v):
                    raise _Refused()
                utf8 = PyUnicode_AsUTF8AndSize(v, &n)
                if n > 0x7FFF:
                    raise ValueError("string too long")
                self._length(op, out, n, False)
                memcpy(self._grow(out, n), utf8, n)
            elif op.kind == K_ARRAY or op.kind == K_UUIDS:  # numbers, or UUIDs ('u', 16 bytes each)
                if v is None:
                    self._null(op, out, True)
                    continue
                n = len(v)
                self._length(op, out, n, True)
                c = op.chars[0]
                p = self._grow(out, n * op.size)
                for u in v:
                    if n == 0:  # the sequence grew while written
                        raise _Refused()
                    if c == b'u':
                        self._raw16(u, p)
                    else:
                        _write_one(c, u, p)
                    p += op.size
                    n -= 1
                if n:
                    raise _Refused()
            else:
                op.fn(v, out)
        if self.flexible:
            if self.tagged_defaults:
                get = value.get
                for default in self.tagged_defaults:
                    t = get(default.key, self.missing)
                    if not (t is self.missing or t == default.make()):
                        self.write_tagged(get, out)
                        return
            out.append(0)
