"""The workload whose JVM's classes become the tests' class-data archive
(class_archive_for_tests.py): the statements most modules run, once each, on a small table.
Not collected with the suite (its name does not start with ``test_``); bin/test runs it first."""
from oracle import degraded_table


def test_warm_up(spark, warehouse):
    degraded_table(str(warehouse / "db" / "warm.lance"), fragments=12, rows_per_fragment=20)
    for statement in [
        "SHOW TABLES IN lance.db",
        "SELECT count(*), sum(id) FROM lance.db.warm",
        "CALL lance.plan_compaction(table => 'db.warm', target_rows_per_fragment => 100)",
        "CALL lance.describe_layout(table => 'db.warm')",
        "SELECT * FROM lance.system.table_health",
        "CALL lance.compact(table => 'db.warm', target_rows_per_fragment => 100)",
        "CREATE INDEX warm_id ON lance.db.warm USING BTREE (id)",
        "CALL lance.optimize_indices(table => 'db.warm')",
        "CALL lance.maintain(table => 'db.warm', dry_run => true)",
        "SELECT * FROM lance.db.warm.versions",
        "SELECT * FROM lance.db.warm.fragments",
    ]:
        spark.sql(statement).collect()
