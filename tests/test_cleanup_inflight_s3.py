"""Cleanup never destroys a write in flight on S3 (moto's server). A store's modification times
cannot be set, so the writer's files are seconds old; the operator's floor is lowered to one
hour in this session's static configuration, so that cleanup's own removal of unreferenced
files (ages read from the store, not Lance's delete_unverified) is what runs and spares them.
After every form of cleanup the writer commits and a full scan gives exactly its rows."""
from __future__ import annotations

import lance
import pytest

from conftest import CLEANUP_FLOOR_KEY, NO_VERSION_FLOOR, lance_session
from inflight_writer import CLEANUP_FORMS, assert_commit_reads_back, run_form, start_writer, table_with_history

SPARK_MASTER = "local[2]"


@pytest.fixture(scope="module")
def wh(s3):
    return s3.fresh_bucket("inflight") + "/wh"


@pytest.fixture(scope="module")
def spark(s3, wh):
    session = lance_session(SPARK_MASTER, "lance-compact-cleanup-s3-tests", wh, {CLEANUP_FLOOR_KEY: "1 hour", **NO_VERSION_FLOOR},
                            storage_options=s3.storage_options)
    yield session
    session.stop()


def fresh(s3, wh, name):
    uri = f"{wh}/db/{name}.lance"
    table_with_history(uri, s3.storage_options)
    return f"db.{name}", uri


@pytest.mark.parametrize("form", list(CLEANUP_FORMS))
def test_a_write_in_flight_survives_every_cleanup_on_s3(spark, s3, wh, form):
    t, uri = fresh(s3, wh, f"young_{form}")
    writer = start_writer(uri, s3.storage_options)
    run_form(spark, form, t, writer)
    assert_commit_reads_back(writer)


def test_sql_cannot_go_below_the_floor_on_s3(spark, s3, wh):
    t, uri = fresh(s3, wh, "below_floor")
    writer = start_writer(uri, s3.storage_options)
    version = lance.dataset(uri, storage_options=s3.storage_options).version
    with pytest.raises(Exception, match=f"'0 seconds' is below the floor '1 hour'.*{CLEANUP_FLOOR_KEY}"):
        spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', delete_unverified => true, "
                  "unverified_min_age => '0 seconds')").collect()
    assert lance.dataset(uri, storage_options=s3.storage_options).version == version
    assert writer.still_stored() == writer.files
    assert_commit_reads_back(writer)
