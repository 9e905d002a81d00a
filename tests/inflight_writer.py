"""A writer in flight, as a long Spark job is one: it has written its data file and its
deletion file (Lance writes both before the commit that references them) and commits later.
Used by the cleanup tests: cleanup runs in between, then the writer commits and the table must
read back exactly what the writer meant."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import write_fragments

from lance_compact import cleanup
from lance_compact.streaming import with_maintenance, with_warehouse_maintenance
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


def start_writer(uri: str, storage_options: dict | None = None, first_id: int = 1_000_000,
                 fragment: int = 0) -> InFlight:
    """Write (not commit) 5 new rows and the deletion of the first row of fragment ``fragment``
    (the ``fragment``-th of the latest version, one without deletions)."""
    ds = lance.dataset(uri, storage_options=storage_options or None)
    frag = ds.get_fragments()[fragment]
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


# Every form of cleanup a SQL (or PySpark) user has, on table ``t``.
CLEANUP_FORMS = {
    "default": lambda spark, t: spark.sql(f"CALL lance.cleanup(table => '{t}')").collect(),
    "delete_unverified": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', delete_unverified => true)").collect(),
    "delete_unverified_older_than_0": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => true)").collect(),
    "delete_unverified_false": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => false)").collect(),
    "min_age_7_days": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => true, "
        "unverified_min_age => '7 days')").collect(),
    "older_than_0": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds')").collect(),
    "older_than_timestamp_now": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '{datetime.now(timezone.utc).isoformat()}', "
        "delete_unverified => true)").collect(),
    "dry_run": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => true, "
        "dry_run => true)").collect(),
    "retain_versions": lambda spark, t: spark.sql(
        f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', retain_versions => 1, "
        "delete_unverified => true)").collect(),
    "pyspark_cleanup": lambda spark, t: cleanup(spark, t, older_than="0 seconds", delete_unverified=True,
                                                retain_versions=1).collect(),
    "maintain": lambda spark, t: spark.sql(
        f"CALL lance.maintain(table => '{t}', older_than => '0 seconds', min_small_fragments => 1000)").collect(),
    "maintain_warehouse": lambda spark, t: spark.sql(
        "CALL lance.maintain_warehouse(older_than => '0 seconds', min_small_fragments => 1000)").collect(),
}


def _stream_rows(spark, t, warehouse_wide: bool):
    """A foreachBatch helper's maintenance after one micro-batch (its write does nothing: the
    table's writer is the one in flight)."""
    rows = []
    helper = (with_warehouse_maintenance(spark, lambda b, i: None, every=1, older_than="0 seconds",
                                         min_small_fragments=1000, on_result=lambda i, r: rows.extend(r))
              if warehouse_wide else
              with_maintenance(spark, t, lambda b, i: None, every=1, older_than="0 seconds",
                               min_small_fragments=1000, on_result=lambda i, r: rows.extend(r)))
    helper(None, 0)
    return rows


CLEANUP_FORMS["stream_maintain"] = lambda spark, t: _stream_rows(spark, t, False)
CLEANUP_FORMS["stream_maintain_warehouse"] = lambda spark, t: _stream_rows(spark, t, True)


def run_form(spark, form: str, t: str, w: InFlight) -> None:
    """Cleanup form ``form`` on table ``t`` while ``w`` is in flight; checks that it really ran
    (maintain's cleanup step ran, old versions went where the form removes them)."""
    so = w.storage_options or None
    versions = len(lance.dataset(w.uri, storage_options=so).versions())
    rows = CLEANUP_FORMS[form](spark, t)
    if form.startswith(("maintain", "stream")):
        steps = [r for r in rows if r.step == "cleanup" and getattr(r, "table", t) == t]
        assert steps and steps[0].ran, rows
    if form not in ("default", "delete_unverified", "dry_run"):  # these keep Lance's two weeks of versions
        assert len(lance.dataset(w.uri, storage_options=so).versions()) < versions
