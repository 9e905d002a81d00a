"""Concurrent writers the tests inject right before a compaction's commit (the documented
test-only hook ``test_before_commit``). Each acts once per table (a local marker file says
so, also for tables on an object store); they write with the CALL's storage options."""
import hashlib
import os
import tempfile

import lance
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from oracle import batch


def _state(uri: str, name: str) -> str:
    folder = os.environ.get("LANCE_COMPACT_TEST_STATE") or os.path.join(
        tempfile.gettempdir(), "lance-compact-test-writers")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{hashlib.sha1(uri.encode()).hexdigest()}.{name}")


def _once(uri: str, name: str) -> bool:
    marker = _state(uri, name)
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def _delete_from_first_fragment(uri, storage_options, rows: int | None) -> None:
    """Delete the first ``rows`` rows (all when None) of the table's first fragment."""
    ds = lance.dataset(uri, storage_options=storage_options)
    first = min(f.fragment_id for f in ds.get_fragments())
    ids = ds.get_fragment(first).to_table(columns=["id"])["id"].to_pylist()
    ds.delete(f"id IN ({', '.join(map(str, ids[:rows]))})")


def delete_in_first_fragment(uri, storage_options):
    """A streaming delete touching only the table's first fragment."""
    if _once(uri, "delete_first"):
        _delete_from_first_fragment(uri, storage_options, 5)


def delete_everywhere(uri, storage_options):
    """A delete touching every fragment, before every commit: always conflicting."""
    ds = lance.dataset(uri, storage_options=storage_options)
    count = _state(uri, "everywhere.count")
    n = int(open(count).read()) if os.path.exists(count) else 0
    ds.delete(f"id % 97 = {n}")
    with open(count, "w") as f:
        f.write(str(n + 1))


def append_rows(uri, storage_options):
    """A streaming append: compatible with compaction."""
    if _once(uri, "append"):
        lance.write_dataset(batch(900_000, 25), uri, mode="append", storage_options=storage_options)


def overwrite(uri, storage_options):
    """Someone overwrites the table: incompatible with compaction."""
    if _once(uri, "overwrite"):
        lance.write_dataset(batch(700_000, 10), uri, mode="overwrite", storage_options=storage_options)


def update_some(uri, storage_options):
    """A streaming update: deletes the old rows, appends them with the new value."""
    if _once(uri, "update"):
        lance.dataset(uri, storage_options=storage_options).update(
            {"payload": "'updated'"}, where="id % 50 = 1")


def upsert_some(uri, storage_options):
    """A CDC upsert (merge_insert): changes 20 rows, inserts 10 new ones."""
    if _once(uri, "upsert"):
        rows = batch(0, 400).filter(pa.compute.equal(pa.compute.bit_wise_and(
            batch(0, 400)["id"], 15), 7)).slice(0, 20)
        rows = pa.concat_tables([rows.set_column(2, "payload", pa.array(["upserted"] * rows.num_rows)),
                                 batch(800_000, 10)])
        ds = lance.dataset(uri, storage_options=storage_options)
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)


def remove_first_fragment(uri, storage_options):
    """Deletes every row of the first fragment: Lance removes the fragment outright."""
    if _once(uri, "remove_first"):
        _delete_from_first_fragment(uri, storage_options, None)


def add_column(uri, storage_options):
    """Adds a computed column: every fragment's data files change (a Merge)."""
    if _once(uri, "add_column"):
        lance.dataset(uri, storage_options=storage_options).add_columns({"doubled": "id * 2"})


def compact_concurrently(uri, storage_options):
    """Another compaction rewrites the table first."""
    if _once(uri, "compact"):
        lance.dataset(uri, storage_options=storage_options).optimize.compact_files(
            target_rows_per_fragment=1000)


def restore_previous(uri, storage_options):
    """Someone restores the previous version: incompatible with compaction."""
    if _once(uri, "restore"):
        ds = lance.dataset(uri, storage_options=storage_options)
        lance.dataset(uri, version=ds.version - 1, storage_options=storage_options).restore()


def overwrite_before_third_commit(uri, storage_options):
    """Someone overwrites the table right before a run's third commit (partial progress)."""
    count = _state(uri, "third.count")
    n = (int(open(count).read()) if os.path.exists(count) else 0) + 1
    with open(count, "w") as f:
        f.write(str(n))
    if n == 3:
        lance.write_dataset(batch(700_000, 10), uri, mode="overwrite", storage_options=storage_options)


def slow_commit(uri, storage_options):
    """A slow moment right before every commit (no Spark job runs then)."""
    import time
    time.sleep(3)


def mark_then_pause(uri, storage_options):
    """Say the run reached its commit (a marker file: :func:`at_commit` of ``uri``), then pause
    3 s, so that a test can break something right before the commit."""
    import time
    open(_state(uri, "at-commit"), "w").close()
    time.sleep(3)


def at_commit(uri) -> str:
    """The marker :func:`mark_then_pause` writes for ``uri``."""
    return _state(uri, "at-commit")


def mark_then_hold(uri, storage_options):
    """Say the run reached a commit (:func:`at_commit`'s marker), then hold it there until the
    test calls :func:`release` (at most 120 s): a cancel sent meanwhile lands at a known moment
    right before the commit, and the commit's own check (the gate) decides after the release.
    Each commit of the run is held so; the marker is gone once a release was taken."""
    from lance_compact.runtime.hooks import hold
    hold(_state(uri, "at-commit"), _state(uri, "release"))


def release(uri, timeout: float = 30) -> bool:
    """Let a run held by :func:`mark_then_hold` on ``uri`` go on to its commit; whether it took
    the release within ``timeout`` (a worker killed meanwhile never does: the files are removed).
    Taken is the release gone (the hold removes it first): the marker may already be the next
    held commit's, which waited its turn (runtime/hooks.py ``hold``)."""
    import time
    marker, release_file = _state(uri, "at-commit"), _state(uri, "release")
    open(release_file, "w").close()
    deadline = time.monotonic() + timeout
    while os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    taken = not os.path.exists(release_file)
    if not taken:
        for f in (release_file, marker):
            try:
                os.remove(f)
            except FileNotFoundError:
                pass
    return taken


FILLER = "zz_filler"


def fill_disk(uri, storage_options):
    """Fill the file system holding the (local) table with one file in its folder (``FILLER``)
    until the disk is full (ENOSPC): the next write of the table fails as on a full disk."""
    with open(os.path.join(uri, FILLER), "ab", buffering=0) as f:
        for size in (1 << 20, 64 << 10, 4096, 512, 1):  # to the last pages
            try:
                while f.write(b"\0" * size):
                    pass
            except OSError:
                pass


def append_copies(uri, storage_options):
    """A streaming append of 25 rows of the table's own schema (its first rows, ids moved up
    by 900,000): for tables of any schema."""
    if _once(uri, "append_copies"):
        ds = lance.dataset(uri, storage_options=storage_options)
        rows = ds.to_table(limit=25)
        rows = rows.set_column(rows.schema.get_field_index("id"), "id", pa.compute.add(rows["id"], 900_000))
        lance.write_dataset(rows, uri, mode="append", storage_options=storage_options)


def compact_into_one(uri, storage_options):
    """Another compaction rewrites every fragment of the table into one."""
    if _once(uri, "compact_into_one"):
        lance.dataset(uri, storage_options=storage_options).optimize.compact_files(
            target_rows_per_fragment=1 << 24)


def update_ids(uri, storage_options):
    """A streaming update of the indexed column of rows in every fragment (id % 1000 = 7 moves
    up by 900,000): Lance deletes the old rows and appends them, changed, as a new fragment."""
    if _once(uri, "update_ids"):
        lance.dataset(uri, storage_options=storage_options).update({"id": "id + 900000"}, where="id % 1000 = 7")


def upsert_copies(uri, storage_options):
    """A CDC upsert (merge_insert on id) for tables of any schema with an ``id``: 20 existing
    rows changed (a vector column ``emb``, if any, negated), 10 new rows (copies of the first,
    ids moved up by 950,000)."""
    if _once(uri, "upsert_copies"):
        ds = lance.dataset(uri, storage_options=storage_options)
        matched = ds.to_table(filter="id % 1000 = 11", limit=20)
        if "emb" in matched.schema.names:
            emb = matched["emb"].combine_chunks()
            negated = pa.FixedSizeListArray.from_arrays(pa.compute.negate(emb.flatten()), emb.type.list_size)
            matched = matched.set_column(matched.schema.get_field_index("emb"), "emb", negated)
        new = ds.to_table(limit=10)
        new = new.set_column(new.schema.get_field_index("id"), "id", pa.compute.add(new["id"], 950_000))
        rows = pa.concat_tables([matched, new.cast(matched.schema)])
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)


def raise_unrecognized(uri, storage_options):
    """Not a writer: an error no rule of runtime/failures.py names (test_fail_at), as a bug of
    ours or Lance's would raise it: the engine asks for a report with its log."""
    def nested_helper():
        raise ZeroDivisionError(f"injected into {os.path.basename(uri.rstrip('/'))}: no rule names this error")
    nested_helper()
