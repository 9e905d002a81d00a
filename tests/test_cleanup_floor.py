"""The operator's floor for cleanup (driver setting spark.lance.compact.cleanup.unverifiedMinAge),
lowered to one hour in this module's session builder (static configuration): orphans older
than that are removed, a write in flight younger than it survives every form of cleanup, SQL
cannot go below it. And the listing order: a commit landing between cleanup's listing of the
folder and its reading of the references keeps its files."""
from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from conftest import CLEANUP_FLOOR_KEY, NO_VERSION_FLOOR, VERSION_FLOOR_KEY, engine_settings, refused
from inflight_writer import CLEANUP_FORMS, assert_commit_reads_back, run_form, start_writer, table_with_history
from lance_compact.maintenance.version_cleanup import unreferenced_files
from oracle import batch

# the version-retention check off ('0s', Delta's retentionDurationCheck.enabled=false): these
# tables' versions are seconds old
SPARK_CONF = {CLEANUP_FLOOR_KEY: "1 hour", **NO_VERSION_FLOOR}
MINUTES = 60


def fresh(warehouse, name):
    uri = str(warehouse / "db" / f"{name}.lance")
    table_with_history(uri)
    return f"db.{name}", uri


def test_the_lowered_floor_removes_aged_orphans_and_spares_a_young_write(spark, warehouse):
    t, uri = fresh(warehouse, "aged_and_young")
    abandoned = start_writer(uri, first_id=3_000_000)  # a write that failed two hours ago
    abandoned.age(120 * MINUTES)
    live = start_writer(uri)  # a write in flight, 50 minutes into its job
    live.age(50 * MINUTES)
    extra = batch(4_000_000, 2)
    # another commit lands: Lance's own delete_unverified would now remove both writers' files
    lance.write_dataset(extra, uri, mode="append")
    live.expected = pa.concat_tables([live.expected, extra.cast(live.expected.schema)]).sort_by("id")
    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, dry_run => true)").collect()[0]
    assert (dry.data_files_removed, dry.deletion_files_removed) == (1, 1)
    assert abandoned.still_stored() == abandoned.files
    r = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true)").collect()[0]
    assert (r.data_files_removed, r.deletion_files_removed) == (1, 1)
    assert not abandoned.still_stored()
    assert_commit_reads_back(live)


@pytest.mark.parametrize("min_age", ["0 seconds", "59 minutes"])
def test_sql_cannot_go_below_the_lowered_floor(spark, warehouse, min_age):
    t, uri = fresh(warehouse, "below_" + min_age.replace(" ", "_"))
    writer = start_writer(uri)
    writer.age(30 * MINUTES)
    with refused(uri, f"unverified_min_age '{min_age}' is below the floor '1 hour'.*{CLEANUP_FLOOR_KEY}"):
        spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, "
                  f"unverified_min_age => '{min_age}')").collect()
    r = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => true, "
                  "unverified_min_age => '1 hour')").collect()[0]
    assert r.old_versions >= 1 and r.data_files_removed == 0
    assert_commit_reads_back(writer)


@pytest.mark.parametrize("form", list(CLEANUP_FORMS))
def test_a_write_younger_than_the_floor_survives_every_cleanup(spark, warehouse, form):
    t, uri = fresh(warehouse, f"young_{form}")
    writer = start_writer(uri)
    writer.age(50 * MINUTES)
    run_form(spark, form, t, writer)
    assert_commit_reads_back(writer)


def test_a_commit_between_listing_and_references_keeps_its_files(warehouse):
    """unreferenced_files lists the store, then opens the table (open_latest): a writer whose
    commit lands in between (here: from open_latest) is referenced by the version it reads;
    a file written after the listing (a second writer starting then) is not a candidate at
    all. Read the other way round, the second writer's files would be listed, unreferenced."""
    _, uri = fresh(warehouse, "listing_race")
    first = start_writer(uri)
    later = []

    def open_latest():
        ds = first.commit()  # the commit lands after the listing
        later.append(start_writer(uri, first_id=5_000_000, fragment=1))
        return ds

    orphans = {f.path for f in unreferenced_files(lance.dataset(uri), open_latest)}
    assert later and not orphans & first.files and not orphans & later[0].files
    assert lance.dataset(uri).to_table().sort_by("id").to_pylist() == first.expected.to_pylist()


def test_a_stray_name_with_other_digits_in_the_deletions_folder_is_not_a_deletion_file(warehouse):
    """str.isdigit passes digits int() refuses ("²", "٣"): a file so named in _deletions/ (put
    there by anyone who writes the store) is no deletion file of the table, not a crash."""
    _, uri = fresh(warehouse, "stray_deletion_name")
    folder = Path(uri) / "_deletions"
    folder.mkdir(exist_ok=True)
    for name in ("²-1-2.arrow", "1-٣-2.bin", "1-2-3.arrow"):
        (folder / name).write_bytes(b"x")
    orphans = {f.path for f in unreferenced_files(lance.dataset(uri), lambda: lance.dataset(uri))}
    assert orphans == {"_deletions/1-2-3.arrow"}


@pytest.mark.parametrize("setting", ["8 days", "soon", "99999999999999 days"])
def test_an_invalid_operator_floor_removes_nothing_and_says_which_setting(warehouse, setting):
    """The engine's own cleanup, in this process, with the floor this process's driver
    settings give it (as the engine reads them at start)."""
    import json

    from lance_compact.runtime import driver_conf
    from lance_compact.errors import CompactionError
    from lance_compact.maintenance.version_cleanup import cleanup
    from lance_compact.runtime.envelope import Envelope

    def cleanup_row(request_json: str) -> dict:  # as the engine parses and serves it
        envelope = Envelope.parse("cleanup", request_json)
        return cleanup(envelope.require_target(), envelope.args, envelope.options)

    t, uri = fresh(warehouse, "bad_floor_" + "".join(c for c in setting if c.isalnum())[:12])
    writer = start_writer(uri)
    writer.age(120 * MINUTES)
    request = json.dumps({"table": t, "uri": uri, "params": {"delete_unverified": True}})
    driver_conf.load([(CLEANUP_FLOOR_KEY, setting), *NO_VERSION_FLOOR.items()])
    try:
        with refused(uri, f"the driver setting {CLEANUP_FLOOR_KEY} expects .* from '0 seconds' to '7 days'"):
            cleanup_row(request)
        row = cleanup_row(json.dumps({"table": t, "uri": uri, "params": {"older_than": "0 seconds"}}))
        assert row  # cleanup without delete_unverified does not read the floor
    finally:
        driver_conf.load([])
    assert_commit_reads_back(writer)
    with pytest.raises(CompactionError, match="below the floor '7 days'"):  # the default again
        cleanup_row(json.dumps({"table": t, "uri": uri,
                                "params": {"delete_unverified": True, "unverified_min_age": "1 hour"}}))


def _stored(uri) -> set[str]:
    from pathlib import Path

    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file()}


def test_with_the_version_check_off_a_dry_run_lists_exactly_what_cleanup_removes(spark, warehouse):
    """The operator's versionMinAge=0s (this module's session) lets cleanup remove versions
    seconds old; the dry run's files are the files the real run then removes."""
    from lance_compact import cleanup

    t, uri = fresh(warehouse, "dry_run_files")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)  # replaced data files to go
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
    before = _stored(uri)
    dry = cleanup(spark, t, older_than="0s", dry_run=True).collect()[0]
    assert dry.dry_run and dry.old_versions >= 3 and dry.data_files_removed >= 1
    assert dry.files_total == len(dry.files) == (dry.old_versions + dry.data_files_removed
                                                 + dry.deletion_files_removed + dry.index_files_removed
                                                 + dry.transaction_files_removed)
    assert dry.files == sorted(dry.files) and all(f in before for f in dry.files), dry.files
    assert any(f.startswith("_versions/") for f in dry.files) and any(f.startswith("data/") for f in dry.files)
    assert _stored(uri) == before  # a dry run removes nothing
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => INTERVAL 0 SECONDS)").collect()[0]
    assert before - _stored(uri) == set(dry.files)
    assert done.files is None and done.files_total == dry.files_total and done.old_versions == dry.old_versions


def test_the_operator_settings_take_every_duration_form(warehouse):
    """The engine's own cleanup in this process with the floors an operator's driver settings
    give it: short forms ('1h', '0s'), the text forms, a bad value refused naming the setting;
    a floor above the shared default raises the default instead of refusing every call."""
    import json

    from lance_compact.errors import CompactionError
    from lance_compact.maintenance.version_cleanup import cleanup
    from lance_compact.runtime.envelope import Envelope

    t, uri = fresh(warehouse, "settings_forms")

    def run(**params) -> dict:
        envelope = Envelope.parse("cleanup", json.dumps({"table": t, "uri": uri, "params": params}))
        return cleanup(envelope.require_target(), envelope.args, envelope.options)

    with engine_settings({VERSION_FLOOR_KEY: "1h"}):
        with refused(uri, f"older_than '30m' is below the version retention floor '1h'.*{VERSION_FLOOR_KEY}"):
            run(older_than="30m", dry_run=True)
        assert run(older_than="2 hours", dry_run=True)["old_versions"] == 0
    with engine_settings({VERSION_FLOOR_KEY: "30 days"}):  # above the default 7 days: the default follows
        assert run(dry_run=True)["old_versions"] == 0
        with refused(uri, "older_than '8 days' is below the version retention floor '30 days'"):
            run(older_than="8 days", dry_run=True)
    with engine_settings({VERSION_FLOOR_KEY: "soon"}):
        with refused(uri, f"the driver setting {VERSION_FLOOR_KEY} expects '<n> days.*got 'soon'.*no version is removed"):
            run(dry_run=True)
    with engine_settings({CLEANUP_FLOOR_KEY: "1h", **NO_VERSION_FLOOR}):
        with pytest.raises(CompactionError, match="unverified_min_age '30m' is below the floor '1h'"):
            run(delete_unverified=True, unverified_min_age="30m")
        assert run(older_than="0s", dry_run=True)["old_versions"] >= 1


def _segment_files(uri) -> dict[str, set[str]]:
    """The table's index segment folders -> their files."""
    from pathlib import Path

    folder = Path(uri) / "_indices"
    return {d.name: {f.name for f in d.iterdir()} for d in folder.iterdir()} if folder.exists() else {}


def _age_segment(uri, uuid, seconds: float, only: str | None = None) -> None:
    import os
    import time
    from pathlib import Path

    then = time.time() - seconds
    for f in (Path(uri) / "_indices" / uuid).iterdir():
        if only is None or f.name == only:
            os.utime(f, (then, then))


def test_orphaned_index_segments_older_than_the_floor_are_removed_whole(spark, warehouse):
    """Segments no version references (an index build whose driver died before its commit):
    removed once their newest file is older than the floor, whole; a younger one (a build in
    flight), one with a single young file, the committed index's and the segment an older
    version still references are kept. Lance's own cleanup (7 days) would keep them all."""
    t, uri = fresh(warehouse, "orphan_segments")
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    old_version = lance.dataset(uri).version
    replaced = {str(s.uuid) for i in lance.dataset(uri).describe_indices() for s in i.segments}
    lance.dataset(uri).create_scalar_index("id", "BTREE", name="id_idx", replace=True)  # the replaced segment: an older version's
    ds = lance.dataset(uri)
    committed = {str(s.uuid) for i in ds.describe_indices() for s in i.segments}
    ids = [f.fragment_id for f in ds.get_fragments()]
    abandoned = str(ds.create_index_uncommitted("id", "BITMAP", name="b1", fragment_ids=ids[:3]).uuid)
    in_flight = str(ds.create_index_uncommitted("id", "BITMAP", name="b2", fragment_ids=ids[3:]).uuid)
    half = str(ds.create_index_uncommitted("id", "BTREE", name="b3", fragment_ids=ids[:2]).uuid)
    for uuid in (abandoned, *replaced, *committed):
        _age_segment(uri, uuid, 120 * MINUTES)
    _age_segment(uri, in_flight, 50 * MINUTES)
    _age_segment(uri, half, 120 * MINUTES)
    _age_segment(uri, half, 10 * MINUTES, only=sorted(_segment_files(uri)[half])[0])  # one file still young
    before = _segment_files(uri)
    assert set(before) == {abandoned, in_flight, half} | replaced | committed and replaced != committed

    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, dry_run => true)").collect()[0]
    gone = {f"_indices/{abandoned}/{name}" for name in before[abandoned]}
    assert dry.index_files_removed == len(gone) and gone <= set(dry.files)
    assert not any(f.startswith("_indices/") and f not in gone for f in dry.files), dry.files
    assert _segment_files(uri) == before  # a dry run removes nothing
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true)").collect()[0]
    assert done.index_files_removed == len(gone)
    after = _segment_files(uri)
    assert set(after) == set(before) - {abandoned} and all(after[u] == before[u] for u in after)
    ds = lance.dataset(uri)
    assert ds.to_table(filter="id < 50", columns=["id"]).sort_by("id") == \
        ds.to_table(filter="id < 50", columns=["id"], use_scalar_index=False).sort_by("id")
    then = lance.dataset(uri, version=old_version)  # the older version's index still reads
    assert {str(s.uuid) for i in then.describe_indices() for s in i.segments} == replaced
    assert then.to_table(filter="id = 7", columns=["id"])["id"].to_pylist() == [7]


def _costs(uri):
    folder = Path(uri) / "_lance_compact" / "costs"
    return sorted(int(p.stem) for p in folder.glob("*.json")) if folder.is_dir() else []


def test_cleanup_removes_the_kept_costs_of_the_versions_it_removed(spark, warehouse):
    """Each maintenance version's cost is a file beside the table (runtime/cost_records.py):
    without this, a table maintained every few minutes kept one a version forever, and
    maintenance_history listed them all on every read."""
    t, uri = fresh(warehouse, "costs_pruned")
    spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 1000)").collect()
    first = _costs(uri)
    lance.write_dataset(batch(9_000_000, 20), uri, mode="append")
    spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 1000)").collect()
    assert len(_costs(uri)) == len(first) + 1, _costs(uri)
    second = _costs(uri)[-1]
    latest = lance.dataset(uri).version
    call = f"CALL lance.cleanup(table => '{t}', older_than => '0s', retain_versions => {latest - second + 1}"
    # a dry run counts the records it would remove among its files and bytes, and removes none
    dry = spark.sql(call + ", dry_run => true)").collect()[0]
    assert [f for f in dry.files if f.startswith("_lance_compact/")] == [f"_lance_compact/costs/{v}.json" for v in first]
    assert _costs(uri) == first + [second]
    r = spark.sql(call + ")").collect()[0]
    assert r.old_versions >= 1 and r.bytes_removed == dry.bytes_removed
    assert _costs(uri) == [second]  # the first compaction's version is gone, and its cost
    row = spark.sql(f"SELECT bytes_read FROM lance.system.maintenance_history WHERE table = 'costs_pruned' "
                    f"AND version = {second}").collect()
    assert row and row[0].bytes_read > 0  # the kept version's cost is still read back


def test_a_kept_cost_that_is_not_a_number_is_left_out(warehouse):
    """A cost record holding JSON's Infinity (a damaged or foreign file) leaves that version's
    cost NULL; it failed the table's whole maintenance_history (OverflowError), as a record
    named with a superscript digit did (ValueError)."""
    from lance_compact.runtime import cost_records

    t, uri = fresh(warehouse, "costs_infinite")
    folder = Path(uri) / "_lance_compact" / "costs"
    folder.mkdir(parents=True)
    (folder / "2.json").write_text('{"step": "compaction", "bytes_read": Infinity}'.ljust(cost_records.SIZE))
    (folder / "3.json").write_text('{"step": "compaction", "bytes_read": 7}'.ljust(cost_records.SIZE))
    (folder / "\u00b2.json").write_text("a name that str.isdigit() takes and int() refuses")
    kept = cost_records.read(uri, None, [2, 3])
    assert list(kept) == [3] and kept[3].bytes_read == 7


def test_a_tagged_old_version_is_kept_and_the_others_removed(spark, warehouse):
    """Lance's cleanup refuses to run at all while an old version carries a tag (its default
    error_if_tagged_old_versions): cleanup and maintain of such a table failed every time,
    as an unexpected error. The tagged version is kept, readable, the others removed."""
    t, uri = fresh(warehouse, "tagged")
    ds = lance.dataset(uri)
    ds.tags.create("release", 1)
    expected = ds.checkout_version(1).to_table()
    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0s', dry_run => true)").collect()[0]
    r = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0s')").collect()[0]
    assert r.old_versions == dry.old_versions == ds.version - 2  # all but the tagged and the newest
    assert [v["version"] for v in lance.dataset(uri).versions()] == [1, ds.version]
    assert lance.dataset(uri, version="release").to_table().equals(expected)
