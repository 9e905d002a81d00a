"""Cleanup never destroys a write in flight, whatever a SQL user passes (local tables; the same
on S3 in test_cleanup_inflight_s3.py). The operator's floor is left at its default (Lance's 7
days) here. A writer's data and deletion files, written and aged hours (and days) old but not
committed, survive every form of cleanup; the writer commits afterwards and a full scan gives
exactly its rows. Durations that would make Lance panic or overflow are refused, the version
unchanged, and the engine answers the next statement."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import lance
import pytest

from conftest import CLEANUP_FLOOR_KEY, NO_VERSION_FLOOR, refused
from inflight_writer import CLEANUP_FORMS, assert_commit_reads_back, run_form, start_writer, table_with_history

HOURS = 3600
SPARK_CONF = NO_VERSION_FLOOR  # the operator's: versions seconds old may go (the unverified floor stays 7 days)

@pytest.fixture
def table(warehouse, request):
    name = "inflight_" + request.node.callspec.id.replace("-", "_")
    uri = str(warehouse / "db" / f"{name}.lance")
    table_with_history(uri)
    return f"db.{name}", uri


@pytest.mark.parametrize("age", [2 * HOURS, 6 * 24 * HOURS + 23 * HOURS], ids=["2h", "6d23h"])
@pytest.mark.parametrize("form", list(CLEANUP_FORMS))
def test_a_write_in_flight_survives_every_cleanup(spark, table, form, age):
    t, uri = table
    writer = start_writer(uri)
    writer.age(age)
    run_form(spark, form, t, writer)
    assert_commit_reads_back(writer)


@pytest.mark.parametrize("min_age", ["0 seconds", "1 seconds", "1 hour", "6 days", "timestamp"])
def test_sql_cannot_go_below_the_floor(spark, warehouse, min_age):
    """unverified_min_age below the operator's floor (7 days here) is refused, naming the floor
    and the setting that moves it; the writer's files are untouched."""
    name = f"below_floor_{min_age.replace(' ', '_')}"
    if min_age == "timestamp":  # a moment an hour ago
        min_age = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    uri = str(warehouse / "db" / f"{name}.lance")
    table_with_history(uri)
    writer = start_writer(uri)
    writer.age(2 * HOURS)
    with refused(uri, f"unverified_min_age .* is below the floor '7 days'.*{CLEANUP_FLOOR_KEY}"):
        spark.sql(f"CALL lance.cleanup(table => 'db.{name}', delete_unverified => true, "
                  f"unverified_min_age => '{min_age}')").collect()
    assert writer.still_stored() == writer.files
    # the dry run is refused the same way
    with refused(uri, "is below the floor"):
        spark.sql(f"CALL lance.cleanup(table => 'db.{name}', dry_run => true, delete_unverified => true, "
                  f"unverified_min_age => '{min_age}')").collect()
    assert_commit_reads_back(writer)


def test_set_in_a_session_does_not_lower_the_floor(spark, warehouse):
    """The floor is the driver's static setting, read when the engine starts: SQL SET of the
    same key changes nothing (refused below 7 days, and a 2-hour-old write survives)."""
    uri = str(warehouse / "db" / "set_floor.lance")
    table_with_history(uri)
    writer = start_writer(uri)
    writer.age(2 * HOURS)
    try:
        spark.sql(f"SET {CLEANUP_FLOOR_KEY}=0 seconds").collect()
    except Exception:  # a Spark that refuses to SET it is as good
        pass
    try:
        with refused(uri, "is below the floor '7 days'"):
            spark.sql("CALL lance.cleanup(table => 'db.set_floor', older_than => '0 seconds', "
                      "delete_unverified => true, unverified_min_age => '0 seconds')").collect()
        r = spark.sql("CALL lance.cleanup(table => 'db.set_floor', older_than => '0 seconds', "
                      "delete_unverified => true)").collect()[0]
        assert r.data_files_removed == 0 and r.deletion_files_removed == 0
    finally:
        spark.sql(f"RESET {CLEANUP_FLOOR_KEY}").collect()
    assert_commit_reads_back(writer)


BOUNDS = [
    ("cleanup", "older_than => '100000000 days', dry_run => true", r"older_than must be at most '36500 days'"),
    ("cleanup", "older_than => '100000000 days'", r"older_than must be at most '36500 days'"),
    ("cleanup", "older_than => '36501 days'", r"older_than must be at most '36500 days'"),
    ("cleanup", "older_than => '" + "9" * 400 + " seconds'", r"older_than must be at most '36500 days'"),
    ("cleanup", "older_than => '9999-12-31T00:00:00'", r"older_than '9999-12-31T00:00:00' is in the future"),
    ("cleanup", "older_than => '2999-01-01', dry_run => true", r"is in the future"),
    ("cleanup", "older_than => '0001-01-01'", r"older_than '0001-01-01' is more than '36500 days'"),
    ("cleanup", "older_than => '1000-01-01T00:00:00+14:00'", r"is more than '36500 days'"),
    ("cleanup", "delete_unverified => true, unverified_min_age => '100000000 days'",
     r"unverified_min_age must be at most '36500 days'"),
    ("cleanup", "delete_unverified => true, unverified_min_age => '8 days'", r"unverified_min_age must be at most 7 days"),
    ("cleanup", "delete_unverified => true, unverified_min_age => '2999-01-01'", r"unverified_min_age .* is in the future"),
    ("cleanup", "unverified_min_age => 'soon'", r"unverified_min_age expects"),
    ("maintain", "older_than => '100000000 days'", r"older_than must be at most '36500 days'"),
    ("maintain", "older_than => '2999-01-01', dry_run => true", r"is in the future"),
    ("maintain_warehouse", "older_than => '100000000 days'", r"older_than must be at most '36500 days'"),
    ("maintain_warehouse", "max_duration => '100000000 days'", r"max_duration must be at most '36500 days'"),
    ("maintain_warehouse", "max_duration => '" + "9" * 5000 + " seconds'", r"max_duration must be at most"),
]


@pytest.mark.parametrize("procedure,args,message", BOUNDS, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(BOUNDS)])
def test_durations_beyond_the_bounds_are_refused(spark, warehouse, procedure, args, message):
    uri = warehouse / "db" / "bounds.lance"
    if not uri.exists():
        table_with_history(str(uri))
    target = "" if procedure == "maintain_warehouse" else "table => 'db.bounds', "
    with refused(uri, message):
        spark.sql(f"CALL lance.{procedure}({target}{args})").collect()
    # the engine still answers, and the table reads
    assert spark.sql("CALL lance.cleanup(table => 'db.bounds', dry_run => true)").collect()[0].version \
        == lance.dataset(str(uri)).version
    assert lance.dataset(str(uri)).count_rows() == 120
