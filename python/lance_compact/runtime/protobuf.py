"""The few protobuf messages of Lance's files read here without a schema (the manifest's
``max_fragment_id``, an index segment's PQ codebook tensor): Lance exposes neither through its
Python API. Only the wire format: varints and a message's top-level fields."""
from __future__ import annotations

from typing import Iterator


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at ``buf[i:]`` and the position after it."""
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(buf: bytes, what: str) -> Iterator[tuple[int, int | bytes]]:
    """A message's top-level fields in order: (field number, an int for a varint field, else the
    field's bytes). ``what`` names the message in an error."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
            yield number, value
        elif wire == 2:
            n, i = varint(buf, i)
            yield number, buf[i:i + n]
            i += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            yield number, buf[i:i + n]
            i += n
        else:
            raise ValueError(f"unexpected protobuf wire type {wire} in {what}")


def packed_varints(buf: bytes) -> list[int]:
    """A packed repeated varint field's values."""
    out, i = [], 0
    while i < len(buf):
        v, i = varint(buf, i)
        out.append(v)
    return out
