"""Which operation committed a version, from the first bytes of the copy of its transaction
Lance writes into the version's manifest file (:func:`manifest_kind`: one ranged read, two
with an index section), else of its transaction file.

``LanceDataset.read_transaction`` builds the whole operation in Python: an Append of 100,000
fragments is 100,000 ``FragmentMetadata`` objects and 2 s, only for its kind. The kind is the
number of the transaction message's operation field (a ``oneof``), which Lance writes right
after the read version and the uuid: 64 bytes of the file hold it. The file's name is the
manifest's ``transaction_file`` (field 12). Neither is in pylance's API; read here with the
wire format only (runtime/protobuf.py), pinned to pylance 14.0.2 by
``tests/test_fragment_facts.py``, which commits every operation below and compares with
``read_transaction``. Any other field number, a short file or a failed read: None, and the
caller reads the transaction as before.

The manifest is read from its file, not through ``checkout_version`` and
``serialized_manifest()`` (which decode the manifest and encode it again: 0.4-0.8 s a version
at 100,000 fragments, where the file's bytes and a walk to field 12 take 0.05 s): a manifest
file is length-prefixed messages (u32, little-endian: an index section, Lance's copy of the
transaction, the manifest) and a 16-byte footer (the manifest's offset, the format's version,
``LANC``). The manifest is the message the footer points at, found by following the lengths
from the start; anything unexpected (another naming, a footer that does not point back) takes
the decoding route.
"""
from __future__ import annotations

import re
import struct
from typing import Any, Mapping

from ..runtime import protobuf
from ..runtime.tables import FILE_SESSIONS

# The operation's field number -> pylance's class name of it (ReserveFragments has no class
# of its own: pylance calls it BaseOperation). Restore and Clone (a shallow clone's first
# version) were read with pylance 14.0.2's read_transaction: unknown here, a Clone's took 1.5 s
# to decode at 1,000,000 fragments, in every search for a clone's last compaction.
KINDS = {100: "Append", 101: "Delete", 102: "Overwrite", 103: "CreateIndex", 104: "Rewrite",
         105: "Merge", 106: "Restore", 107: "BaseOperation", 108: "Update", 110: "UpdateConfig",
         113: "Clone"}
_TRANSACTION_FILE = 12  # the manifest's field
_HEAD = 64  # read version (at most 11 bytes), uuid (38), the operation's key


_U64_MAX = (1 << 64) - 1
_FOOTER = struct.Struct("<qHH4s")  # the manifest message's offset, major and minor version, magic
_MAGIC = b"LANC"
_MOST_MESSAGES = 8  # a manifest file holds three today


def manifest_names(version: int) -> tuple[str, str]:
    """The two names Lance gives version ``version``'s manifest (V2, then V1)."""
    return f"_versions/{_U64_MAX - version:020d}.manifest", f"_versions/{version}.manifest"


def manifest_message(session: Any, path: str) -> bytes | None:
    """The manifest message of the manifest file at ``path`` (of ``session``): the
    length-prefixed message the file's footer points at, found by following the messages'
    lengths from the start (a read of 16 bytes after each); None when the file is not laid
    out so."""
    at = 0
    length = struct.unpack("<I", bytes(session.read_range(path, 0, 4)))[0]
    for _ in range(_MOST_MESSAGES):
        after = bytes(session.read_range(path, at + 4 + length, 16))
        if len(after) < 4:
            return None
        if len(after) == 16:
            pos, _, _, magic = _FOOTER.unpack(after)
            if magic == _MAGIC and pos == at:
                body = bytes(session.read_range(path, at + 4, length))
                return body if len(body) == length else None
        at, length = at + 4 + length, struct.unpack("<I", after[:4])[0]
    return None


def top_level_string(buf: bytes, number: int) -> str | None:
    """The length-delimited top-level field ``number`` of message ``buf`` as text, or None:
    every other field skipped without a copy (a manifest of 100,000 fragments is 100,000 of
    them: 0.05 s, where protobuf.fields, which yields each, takes 0.5 s)."""
    varint = protobuf.varint
    i, end = 0, len(buf)
    try:
        while i < end:
            key = buf[i]
            i += 1
            if key & 0x80:
                key, i = varint(buf, i - 1)
            wire = key & 7
            if wire == 2:
                n = buf[i]
                i += 1
                if n & 0x80:
                    n, i = varint(buf, i - 1)
                if key >> 3 == number:
                    return buf[i:i + n].decode()
                i += n
            elif wire == 0:
                _, i = varint(buf, i)
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return None
    except (IndexError, UnicodeDecodeError):
        return None
    return None


def _from_file(dataset: Any, version: int) -> str | None:
    """The transaction file's name from version ``version``'s manifest file; None when it
    is not found so (the caller decodes the manifest)."""
    options = getattr(dataset, "_storage_options", None)
    try:
        session, base = FILE_SESSIONS.folder(dataset.uri, options)
    except (OSError, ValueError):
        return None
    for name in manifest_names(version):
        try:
            body = manifest_message(session, f"{base}/{name}" if base else name)
        except (OSError, ValueError, struct.error):
            continue  # not this naming (or unreadable): the other, then the decoding route
        return top_level_string(body, _TRANSACTION_FILE) if body is not None else None
    return None


def transaction_file(dataset: Any, version: int) -> str | None:
    """The name (under ``_transactions/``) of the transaction that committed ``version``."""
    name = _from_file(dataset, version)
    if name:
        return name
    at = dataset if version == dataset.version else dataset.checkout_version(version)
    for number, value in protobuf.fields(at._ds.serialized_manifest(), "the manifest"):
        if number == _TRANSACTION_FILE and isinstance(value, bytes):
            return value.decode()
    return None


def operation_field(head: bytes) -> int | None:
    """The number of the first field from 100 on (the operation) among the top-level fields
    that start ``head``; None when ``head`` ends first."""
    i = 0
    try:
        while i < len(head):
            key, i = protobuf.varint(head, i)
            number, wire = key >> 3, key & 7
            if number >= 100:
                return number
            if wire == 0:
                _, i = protobuf.varint(head, i)
            elif wire == 2:
                n, i = protobuf.varint(head, i)
                i += n
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return None
    except IndexError:  # a varint cut by the end of head
        return None
    return None


def operation_kind(dataset: Any, version: int, storage_options: Mapping[str, str] | None = None) -> str | None:
    """pylance's name of the operation that committed ``version`` (as ``read_transaction``
    names it), or None when it is not known this way."""
    try:
        name = transaction_file(dataset, version)
        if not name:
            return None
        options = storage_options if storage_options is not None else getattr(dataset, "_storage_options", None)
        session, base = FILE_SESSIONS.folder(dataset.uri, options)
        head = session.read_range(f"{base}/_transactions/{name}" if base else f"_transactions/{name}", 0, _HEAD)
    except (OSError, ValueError):  # gone, short (under 64 bytes: cheap to read whole) or unreadable
        return None
    return KINDS.get(operation_field(bytes(head)) or -1)


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _inline_kind(message: bytes) -> str | None:
    """The operation of a transaction message's first bytes: an optional read version (field
    1, absent when 0), the uuid (field 2, 36 characters), then the operation (a field from 100
    on); None for anything else (an index section, a manifest: fields 1 and 2 of another shape)."""
    i = 0
    try:
        if message[:1] == b"\x08":
            _, i = protobuf.varint(message, 1)
    except IndexError:
        return None
    if message[i:i + 2] != b"\x12\x24" or not _UUID.fullmatch(message[i + 2:i + 38]):
        return None
    return KINDS.get(operation_field(message[i + 38:]) or -1)


def manifest_kind(session: Any, path: str) -> str | None:
    """pylance's name of the operation that committed the manifest file at ``path`` (of
    ``session``), from the copy of the transaction Lance writes into the file (length-prefixed
    messages: the index section when the table has indices, the transaction, the manifest):
    64 bytes at its start, and 68 more after the index section when there is one; None when
    the file is not laid out so (a writer that inlines no transaction: the caller reads the
    transaction file). Every read stays inside the file: a manifest file holds at least the
    transaction (over 40 bytes), the manifest and a 16-byte footer after the index section.
    Raises ``OSError`` when the file cannot be read (not there: cleaned up, or the other
    naming)."""
    head = bytes(session.read_range(path, 0, _HEAD))
    kind = _inline_kind(head[4:])
    if kind is not None or head[4:5] != b"\x0a":
        return kind
    # an index section first (field 1 of an IndexSection): the transaction follows it
    after = struct.unpack("<I", head[:4])[0] + 4
    return _inline_kind(bytes(session.read_range(path, after, _HEAD + 4))[4:])
