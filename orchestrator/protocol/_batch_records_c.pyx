# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of :func:`orchestrator.protocol.batch_records.decode_records_py` (the reference).

Same arguments, same records, same :class:`~orchestrator.errors.CorruptMessage` texts for the same bytes: the
property tests of ``tests/orchestrator/protocol/test_compiled_records.py`` hold it to the reference. Every read is
bounded by the record's declared end, as there; the byte pointer is never moved past ``end``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

from orchestrator.errors import CorruptMessage


cdef class _Varint:
    cdef long long value
    cdef Py_ssize_t pos


cdef int _read_varint(
    const unsigned char* data, Py_ssize_t pos, Py_ssize_t end, int max_bytes, str what, _Varint out
) except -1:
    """The zigzag varint (``max_bytes`` 5) or varlong (10) at ``pos`` into ``out``; CorruptMessage as the reference
    raises it."""
    cdef Py_ssize_t start = pos
    cdef unsigned long long result = 0
    cdef unsigned long long byte
    cdef int shift = 0
    cdef bint overflow = False
    while True:
        if pos >= end:
            raise CorruptMessage(f"{what} runs past the end ({pos - start} of its bytes present)")
        if pos - start == max_bytes:
            raise CorruptMessage(f"{what} is a varint longer than {max_bytes} bytes")
        byte = data[pos]
        pos += 1
        if shift < 63:
            result |= (byte & 0x7F) << shift
        elif shift == 63:
            result |= (byte & 0x01) << 63
            overflow = overflow or (byte & 0x7E) != 0
        else:
            overflow = overflow or (byte & 0x7F) != 0
        if byte < 0x80:
            break
        shift += 7
    if max_bytes == 5:
        if (result >> 32) != 0:
            raise CorruptMessage(f"{what} is a varint that overflows 32 bits")
    elif overflow:
        raise CorruptMessage(f"{what} is a varint that overflows 64 bits")
    out.value = <long long>(result >> 1) ^ -<long long>(result & 1)
    out.pos = pos
    return 0


cdef tuple _decode_headers(
    bytes raw, const unsigned char* data, Py_ssize_t pos, Py_ssize_t end, long long count, _Varint v
):
    if count < 0 or count > (end - pos) // 2:
        raise CorruptMessage(f"header count {count} with {end - pos} bytes left in the record")
    cdef list headers = []
    cdef long long key_length, value_length
    cdef Py_ssize_t key_end, value_end
    cdef long long i
    try:
        for i in range(count):
            _read_varint(data, pos, end, 5, "key length", v)
            key_length, pos = v.value, v.pos
            key_end = pos + key_length
            if key_length < 0 or key_end > end:
                raise CorruptMessage(f"key length {key_length} with {end - pos} bytes left in the record")
            try:
                key = raw[pos:key_end].decode()
            except UnicodeDecodeError as e:
                raise CorruptMessage(f"key is not UTF-8 ({e.reason} at its byte {e.start})") from None
            _read_varint(data, key_end, end, 5, "value length", v)
            value_length, pos = v.value, v.pos
            if value_length < 0:
                if value_length != -1:
                    raise CorruptMessage(f"value length {value_length}")
                headers.append((key, None))
            else:
                value_end = pos + value_length
                if value_end > end:
                    raise CorruptMessage(f"value length {value_length} runs past the record")
                headers.append((key, PyBytes_FromStringAndSize(<const char*>data + pos, value_length)))
                pos = value_end
    except CorruptMessage as e:
        raise CorruptMessage(f"header {len(headers)}: {e.message}") from None
    return tuple(headers), pos


def decode_records(
    bytes data, long long count, long long origin, str where, record_type, new, setters
):
    """``count`` records filling ``data`` exactly (see the reference). ``new`` makes an empty ``record_type`` and
    ``setters`` are its six slots' setters in field order: the records are the reference's very objects."""
    cdef const unsigned char* d = data
    cdef Py_ssize_t end = len(data)
    cdef Py_ssize_t pos = 0, start = 0, record_end
    cdef long long length, timestamp_delta, offset_delta, key_length, value_length, header_count
    cdef int attributes
    cdef long long i
    cdef _Varint v = _Varint()
    cdef list records = []
    set_offset_delta, set_timestamp_delta, set_key, set_value, set_headers, set_attributes = setters
    try:
        for i in range(count):
            start = pos
            _read_varint(d, pos, end, 5, "length", v)
            length, pos = v.value, v.pos
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise CorruptMessage(f"length {length} with {end - pos} bytes left")
            attributes = d[pos]
            pos += 1
            _read_varint(d, pos, record_end, 10, "timestamp delta", v)
            timestamp_delta, pos = v.value, v.pos
            _read_varint(d, pos, record_end, 5, "offset delta", v)
            offset_delta, pos = v.value, v.pos
            _read_varint(d, pos, record_end, 5, "key length", v)
            key_length, pos = v.value, v.pos
            if key_length < 0:
                if key_length != -1:
                    raise CorruptMessage(f"key length {key_length}")
                key = None
            else:
                if pos + key_length > record_end:
                    raise CorruptMessage(f"key length {key_length} runs past the record")
                key = PyBytes_FromStringAndSize(<const char*>d + pos, key_length)
                pos += key_length
            _read_varint(d, pos, record_end, 5, "value length", v)
            value_length, pos = v.value, v.pos
            if value_length < 0:
                if value_length != -1:
                    raise CorruptMessage(f"value length {value_length}")
                value = None
            else:
                if pos + value_length > record_end:
                    raise CorruptMessage(f"value length {value_length} runs past the record")
                value = PyBytes_FromStringAndSize(<const char*>d + pos, value_length)
                pos += value_length
            if pos < record_end and d[pos] == 0:  # no headers, the common case
                headers = ()
                pos += 1
            else:
                _read_varint(d, pos, record_end, 5, "header count", v)
                header_count, pos = v.value, v.pos
                headers, pos = _decode_headers(data, d, pos, record_end, header_count, v)
            if pos != record_end:
                raise CorruptMessage(f"length {length} but its fields take {pos - record_end + length}")
            record = new(record_type)
            set_offset_delta(record, offset_delta)
            set_timestamp_delta(record, timestamp_delta)
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            set_attributes(record, attributes - 256 * (attributes >> 7))
            records.append(record)
    except CorruptMessage as e:
        raise CorruptMessage(f"{where}record {len(records)} at byte {origin + start}: {e.message}") from None
    if pos != end:
        raise CorruptMessage(f"{where}{end - pos} bytes at byte {origin + pos} after the {count} records it declares")
    return tuple(records)
