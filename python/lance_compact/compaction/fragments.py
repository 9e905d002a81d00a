"""Facts about fragments that planning, committing and reporting share."""
from __future__ import annotations

from typing import Any, Iterable

import lance
import numpy as np

from ..errors import CompactionError
from .fragment_facts import FragmentFacts


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


def system_index(ix: dict[str, Any]) -> bool:
    """Whether an entry of ``list_indices()`` is one of Lance's own system indices: a name
    starting ``__`` (``__lance_frag_reuse``, the fragment-reuse index of a deferred remap;
    ``__lance_mem_wal``) on no column, or any ``__lance_`` name. A user's index that pylance
    let be named ``__mine`` indexes a column: it is the user's, listed and droppable."""
    name = ix["name"]
    return name.startswith("__lance_") or (name.startswith("__") and not ix.get("fields"))


def index_state(ds, facts: FragmentFacts | None = None) -> dict[str, dict[str, Any]]:
    """Per user index (Lance's own system indices left out: :func:`system_index`), by name: its ``type``, its
    columns (``fields``), its segments (deltas, ``segments``), the live fragments it covers
    (``covered``, a set; ``covered_mask``, the same as booleans in ``facts``' order) and those it
    does not (``unindexed_ids``, sorted; ``unindexed``, their
    count; ``unindexed_rows``, their live rows, from the manifest). The one place index coverage
    is computed: describe_layout, the ``fragments`` and ``indices`` metadata tables, table
    health, maintain and optimize_indices read it here. ``facts``: the table's fragments as
    the caller read them already (fragment_facts.py)."""
    indices = [ix for ix in ds.list_indices() if not system_index(ix)]  # Lance's own left out
    if not indices:
        return {}
    if facts is None:
        facts = FragmentFacts.of(ds)
    live = facts.live
    state: dict[str, dict[str, Any]] = {}
    for ix in indices:
        e = state.setdefault(ix["name"], {"type": ix["type"], "fields": list(ix["fields"]),
                                          "covered": np.zeros(len(facts), bool), "segments": 0})
        ids = np.fromiter(ix["fragment_ids"] or [], np.int64)
        at = np.searchsorted(facts.ids, ids)
        inside = at < len(facts.ids)
        at = at[inside]
        e["covered"][at[facts.ids[at] == ids[inside]]] = True  # live fragments only
        e["segments"] += 1
    for e in state.values():
        covered = e["covered_mask"] = e["covered"]
        e["covered"] = set(facts.ids[covered].tolist())
        e["unindexed_ids"] = facts.ids[~covered].tolist()
        e["unindexed"] = len(e["unindexed_ids"])
        e["unindexed_rows"] = int(live[~covered].sum())
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


def damaged_files(dataset: lance.LanceDataset, fragment_ids: Iterable[int],
                  storage_options: dict[str, str] | None = None, limit: int = 3) -> list[tuple[int, str, str]]:
    """The data files of ``fragment_ids`` that Lance cannot read, as (fragment id, path under
    ``data/``, Lance's words), at most ``limit``: every file's footer and metadata first (Lance's
    file reader, one small read a file), then, when no footer is refused, the fragments' rows one
    fragment at a time (a damaged page). For a failure already named corrupt: which file it is."""
    from lance.file import LanceFileReader

    from ..runtime.failures import first_part

    wanted = set(fragment_ids)
    fragments = [f for f in dataset.get_fragments() if f.fragment_id in wanted]
    root = dataset.uri.rstrip("/")
    found: list[tuple[int, str, str]] = []
    for f in fragments:
        for d in f.metadata.data_files():
            try:
                LanceFileReader(f"{root}/data/{d.path}", storage_options=storage_options or None).metadata()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # noqa: B036 - any refusal of the file (a Lance panic too) is what we look for
                found.append((f.fragment_id, d.path, first_part(str(e), 200)))
                if len(found) >= limit:
                    return found
    if found:
        return found
    for f in fragments:
        try:
            for _ in f.to_batches(batch_size=65_536):
                pass
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: B036
            paths = [d.path for d in f.metadata.data_files()]
            found.append((f.fragment_id, paths[0] if len(paths) == 1 else ", ".join(paths), first_part(str(e), 200)))
            if len(found) >= limit:
                break
    return found


def damage_text(found: list[tuple[int, str, str]]) -> str:
    """``found`` (:func:`damaged_files`) in words: 'the data file data/X of fragment N is damaged
    (a corrupt or unreadable file: Lance's words)' (or 'is missing (a data file the table
    references is missing: ...)'), and what to do."""
    def one(fid: int, path: str, why: str) -> str:
        low = why.lower()
        if "not found" in low or "no such file" in low:
            return f"the data file data/{path} of fragment {fid} is missing (a data file the table references is missing: {why})"
        return f"the data file data/{path} of fragment {fid} is damaged (a corrupt or unreadable file: {why})"
    parts = [one(*f) for f in found]
    return ("; ".join(parts) + "; restore the file from a backup, or restore an earlier version of the "
            "table that does not reference it")


def name_damage(dataset: lance.LanceDataset, fragment_ids: Iterable[int], error: BaseException | str,
                storage_options: dict[str, str] | None = None) -> str | None:
    """When ``error`` (a failed read of ``fragment_ids``) is a corrupt file (runtime/failures.py)
    or a Lance panic (which a damaged file can cause), the words naming the damaged file and its
    fragment (:func:`damage_text`); None when it is another failure or no file of those
    fragments is refused now."""
    from ..runtime.failures import CORRUPT, classify

    text = str(error)
    panic = type(error).__name__ == "PanicException" or "PanicException" in text or "panicked" in text
    if not panic and classify(error).kind != CORRUPT:
        return None
    try:
        found = damaged_files(dataset, fragment_ids, storage_options)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: B036 - the probe is a courtesy; the original error stands
        return None
    return damage_text(found) if found else None
