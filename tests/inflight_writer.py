"""A writer in flight, as a long Spark job is one: it has written its data file and its
deletion file (Lance writes both before the commit that references them) and commits later.
Used by the cleanup tests: cleanup runs in between, then the writer commits and the table must
read back exactly what the writer meant."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import write_fragments

from oracle import batch, degraded_table
from table_files import stored


@dataclass
class InFlight:
    """The uncommitted work of one writer on the table at ``uri``."""

    uri: str
    storage_options: dict | None
    read_version: int
    appended: list = field(default_factory=list)  # FragmentMetadata of the new data file
    updated: object = None  # FragmentMetadata carrying the new deletion file
    deleted_id: int = -1
    files: set[str] = field(default_factory=set)  # the writer's files, relative to the table
    expected: pa.Table | None = None  # every live row once the writer committed, sorted by id

    def age(self, seconds: float) -> None:
        """Make the writer's files look ``seconds`` old (local tables only: the store's
        modification time cannot be set on S3)."""
        then = time.time() - seconds
        for rel in self.files:
            os.utime(os.path.join(self.uri, rel), (then, then))

    def still_stored(self) -> set[str]:
        """The writer's files the table's storage still holds."""
        return self.files & stored(self.uri, self.storage_options)

    def commit(self) -> lance.LanceDataset:
        """The writer's two commits (its deletion, then its append), as it would make them."""
        so = self.storage_options or None
        lance.LanceDataset.commit(self.uri, LanceOperation.Delete([self.updated], [], f"id = {self.deleted_id}"),
                                  read_version=self.read_version, storage_options=so)
        latest = lance.dataset(self.uri, storage_options=so).version
        lance.LanceDataset.commit(self.uri, LanceOperation.Append(self.appended), read_version=latest,
                                  storage_options=so)
        return lance.dataset(self.uri, storage_options=so)


def table_with_history(uri: str, storage_options: dict | None = None) -> lance.LanceDataset:
    """Six fragments of 20 rows in three commits, no deletions: old versions for cleanup to
    remove, and nothing for a maintain compaction with a high min_small_fragments to do."""
    return degraded_table(uri, fragments=6, rows_per_fragment=20, delete_every=0, appends=3,
                          storage_options=storage_options)


def start_writer(uri: str, storage_options: dict | None = None, first_id: int = 1_000_000) -> InFlight:
    """Write (not commit) 5 new rows and the deletion of the first row of fragment 0."""
    ds = lance.dataset(uri, storage_options=storage_options or None)
    frag = ds.get_fragments()[0]
    assert frag.metadata.deletion_file is None
    deleted_id = frag.to_table(limit=1)["id"][0].as_py()
    updated = frag.delete_rows([0])
    new_rows = batch(first_id, 5)
    appended = write_fragments(new_rows, uri, storage_options=storage_options or None)
    files = {f"data/{f.path}" for m in appended for f in m.files}
    files.add(updated.deletion_file.path(frag.fragment_id))
    before = ds.to_table()
    expected = pa.concat_tables([before.filter(pc.not_equal(before["id"], deleted_id)),
                                 new_rows.cast(before.schema)]).sort_by("id")
    w = InFlight(uri, storage_options, ds.version, appended, updated, deleted_id, files, expected)
    assert w.still_stored() == files and len(files) == 2
    return w


def assert_commit_reads_back(w: InFlight) -> None:
    """The writer's files survived; its commits land and a full scan gives exactly the rows
    it meant."""
    assert w.still_stored() == w.files, f"cleanup removed a writer's files: {w.files - w.still_stored()}"
    after = w.commit()
    got = after.to_table().sort_by("id")
    assert got.num_rows == w.expected.num_rows
    assert got.to_pylist() == w.expected.to_pylist()
