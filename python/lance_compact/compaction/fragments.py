"""Facts about fragments that planning, committing and reporting share."""
from __future__ import annotations

from typing import Any, Iterable

import lance

from ..errors import CompactionError


def data_bytes(fragments: Iterable[Any]) -> int | None:
    """Bytes of the fragments' data files, as Lance recorded them when it wrote each file.

    None when a file's size was not recorded (older datasets): a figure we did not measure
    is not reported.
    """
    total = 0
    for fragment in fragments:
        for data_file in fragment.files:
            if data_file.file_size_bytes is None:
                return None
            total += data_file.file_size_bytes
    return total


def deleted_rows(fragments: Iterable[Any]) -> int:
    """Rows marked deleted in the fragments' deletion files."""
    return sum(f.deletion_file.num_deleted_rows or 0 for f in fragments if f.deletion_file)


def live_and_deleted(m: Any) -> tuple[int, int]:
    """(live rows, deleted rows) of one fragment's metadata."""
    deleted = deleted_rows([m])
    return m.physical_rows - deleted, deleted


def fragment_signature(f: Any) -> tuple:
    """What identifies a fragment's content: its data files and its deletion file."""
    d = f.deletion_file
    return (tuple(x.path for x in f.files),
            None if d is None else (d.read_version, d.id, d.num_deleted_rows))


def changed_fragments(old: lance.LanceDataset, new: lance.LanceDataset) -> set[int]:
    """Ids of fragments of ``old`` that ``new`` no longer holds unchanged."""
    now = {f.fragment_id: fragment_signature(f.metadata) for f in new.get_fragments()}
    return {f.fragment_id for f in old.get_fragments()
            if now.get(f.fragment_id) != fragment_signature(f.metadata)}


def index_state(ds) -> dict[str, dict[str, Any]]:
    """Per user index (Lance's own ``__`` system indices left out), by name: its ``type``, its
    columns (``fields``), its segments (deltas, ``segments``), the live fragments it covers
    (``covered``, a set) and those it does not (``unindexed_ids``, sorted; ``unindexed``, their
    count). The one place index coverage is computed: describe_layout, the ``fragments`` and
    ``indices`` metadata tables, table health, maintain and optimize_indices read it here."""
    fragments = {f.fragment_id for f in ds.get_fragments()}
    state: dict[str, dict[str, Any]] = {}
    for ix in ds.list_indices():
        if ix["name"].startswith("__"):  # Lance's own system indices
            continue
        e = state.setdefault(ix["name"], {"type": ix["type"], "fields": list(ix["fields"]),
                                          "covered": set(), "segments": 0})
        e["covered"] |= set(ix["fragment_ids"] or []) & fragments
        e["segments"] += 1
    for e in state.values():
        e["unindexed_ids"] = sorted(fragments - e["covered"])
        e["unindexed"] = len(e["unindexed_ids"])
    return state


def fragments_matching(dataset: lance.LanceDataset, where: str, table: str) -> set[int]:
    """Ids of the fragments holding at least one live row matching the Lance predicate. The
    matching row addresses are streamed batch by batch, keeping only their fragment ids, so the
    driver holds one batch and the set of fragment ids, never every matching address."""
    import pyarrow.compute as pc

    fragments: set[int] = set()
    try:
        scanner = dataset.scanner(filter=where, columns=[], with_row_address=True, scan_in_order=False)
        for batch in scanner.to_batches():
            if batch.num_rows:
                ids = pc.unique(pc.shift_right(batch.column("_rowaddr"), 32))
                fragments.update(ids.to_pylist())
    except (ValueError, OSError) as e:
        raise CompactionError(f"table {table}: where {where!r} is not a predicate Lance can evaluate on "
                              f"this table ({str(e).splitlines()[0][:200]})") from None
    return fragments
