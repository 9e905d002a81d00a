"""Which operation committed a version, from the first bytes of its transaction file.

``LanceDataset.read_transaction`` builds the whole operation in Python: an Append of 100,000
fragments is 100,000 ``FragmentMetadata`` objects and 2 s, only for its kind. The kind is the
number of the transaction message's operation field (a ``oneof``), which Lance writes right
after the read version and the uuid: 64 bytes of the file hold it. The file's name is the
manifest's ``transaction_file`` (field 12). Neither is in pylance's API; read here with the
wire format only (runtime/protobuf.py), pinned to pylance 14.0.2 by
``tests/test_fragment_facts.py``, which commits every operation below and compares with
``read_transaction``. Any other field number, a short file or a failed read: None, and the
caller reads the transaction as before.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..runtime import protobuf
from ..runtime.tables import FILE_SESSIONS

# The operation's field number -> pylance's class name of it (ReserveFragments has no class
# of its own: pylance calls it BaseOperation).
KINDS = {100: "Append", 101: "Delete", 102: "Overwrite", 103: "CreateIndex", 104: "Rewrite",
         105: "Merge", 107: "BaseOperation", 108: "Update", 110: "UpdateConfig"}
_TRANSACTION_FILE = 12  # the manifest's field
_HEAD = 64  # read version (at most 11 bytes), uuid (38), the operation's key


def transaction_file(dataset: Any, version: int) -> str | None:
    """The name (under ``_transactions/``) of the transaction that committed ``version``."""
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
