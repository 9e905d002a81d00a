"""Bad input: a clear error naming the problem, and the table's version unchanged."""
import os

import lance
import pytest

from oracle import degraded_table

T = "db.victim"

CASES = [
    # (id, CALL arguments, text the error must contain)
    ("unknown table", "table => 'db.nope'", "db.nope cannot be found"),
    ("unknown namespace", "table => 'nons.victim'", "`nons` cannot be found"),
    ("no namespace", "table => 'victim'", "needs a namespace: write <namespace>.<table>"),
    ("not a lance dataset", "table => '{wh}/db/plain'", "is not a Lance dataset"),
    ("dotdot identifier", "table => 'db.`..`'", "escapes the warehouse of catalog lance"),
    ("dotdot path", "table => '{wh}/db/../db/victim.lance'", "'..' segments are not allowed"),
    ("absolute path outside", "table => '/tmp'", "is outside the warehouse"),
    ("symlink out of the warehouse", "table => '{wh}/db/link.lance'", "is outside the warehouse"),
    ("symlinked identifier", "table => 'db.link'", "is outside the warehouse"),
    ("unknown option", f"table => '{T}', options => map('target_rows', '5')",
     "unknown options map key 'target_rows'; valid options are: batch_size"),
    ("option twice", f"table => '{T}', target_rows_per_fragment => 5, "
     "options => map('target_rows_per_fragment', '6')", "is given twice"),
    ("wrong type", f"table => '{T}', target_rows_per_fragment => 'many'",
     "parameter target_rows_per_fragment expects an integer (BIGINT), got a value of type STRING"),
    ("fraction for integer", f"table => '{T}', target_rows_per_fragment => 1.5",
     "parameter target_rows_per_fragment expects an integer (BIGINT)"),
    ("wrong type in map", f"table => '{T}', options => map('num_threads', 'two')",
     "option num_threads expects an integer, got 'two'"),
    ("wrong boolean", f"table => '{T}', defer_index_remap => 'yes please'",
     "parameter defer_index_remap expects true or false"),
    ("zero target", f"table => '{T}', target_rows_per_fragment => 0",
     "option target_rows_per_fragment must be >= 1, got 0"),
    ("negative target", f"table => '{T}', target_rows_per_fragment => -5",
     "option target_rows_per_fragment must be >= 1, got -5"),
    ("threshold above 1", f"table => '{T}', materialize_deletions_threshold => 1.01",
     "option materialize_deletions_threshold must be <= 1"),
    ("threshold below 0", f"table => '{T}', materialize_deletions_threshold => -0.5",
     "option materialize_deletions_threshold must be >= 0"),
    ("unknown compaction mode", f"table => '{T}', compaction_mode => 'fastest'",
     "option compaction_mode must be one of reencode, try_binary_copy, force_binary_copy"),
    ("unknown strategy", f"table => '{T}', strategy => 'greedy'",
     "unknown strategy 'greedy'; valid strategies are: default"),
    ("unknown parameter", f"table => '{T}', target => 5", "UNRECOGNIZED_PARAMETER_NAME"),
    ("missing table", "target_rows_per_fragment => 5", "parameter named `table` is required"),
    # A CALL binds only the parameters it passes (CompactionArguments.given); arguments Spark
    # refuses bind the whole list, so these are Spark's own errors, as they were.
    ("named twice", f"table => '{T}', target_rows_per_fragment => 5, target_rows_per_fragment => 6",
     "DUPLICATE_ROUTINE_PARAMETER_ASSIGNMENT"),
    ("positional and named", f"'{T}', table => '{T}'", "DUPLICATE_ROUTINE_PARAMETER_ASSIGNMENT"),
    ("positional after named", f"table => '{T}', 5", "UNEXPECTED_POSITIONAL_ARGUMENT"),
]


@pytest.fixture(scope="module")
def victim(warehouse, tmp_path_factory):
    path = warehouse / "db" / "victim.lance"
    degraded_table(str(path))
    (warehouse / "db" / "plain").mkdir()
    (warehouse / "db" / "plain" / "data.txt").write_text("not lance")
    outside = tmp_path_factory.mktemp("outside") / "real.lance"
    degraded_table(str(outside))
    os.symlink(outside, warehouse / "db" / "link.lance")
    return path, outside


@pytest.mark.parametrize("case,args,message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_clearly_and_changes_nothing(spark, warehouse, victim, case, args, message):
    path, outside = victim
    versions = (lance.dataset(str(path)).version, lance.dataset(str(outside)).version)
    listing = sorted(os.listdir(warehouse / "db"))
    with pytest.raises(Exception) as e:
        spark.sql(f"CALL lance.compact({args.format(wh=warehouse)})").collect()
    assert message in str(e.value), str(e.value)[:2000]
    assert (lance.dataset(str(path)).version, lance.dataset(str(outside)).version) == versions
    assert sorted(os.listdir(warehouse / "db")) == listing


def test_unknown_procedure_names_the_valid_ones(spark):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as e:
        spark.sql("CALL lance.compactify(table => 'db.victim')").collect()
    message = str(e.value)
    valid = sorted(r.procedure_name for r in spark.sql("SHOW PROCEDURES IN lance").collect())
    assert {"compact", "plan_compaction", "describe_layout", "cleanup", "maintain"} <= set(valid)
    assert f"catalog lance has no procedure compactify; procedures are {', '.join(valid)}" in message, message


def test_the_table_still_compacts_after_all_that(spark, victim):
    path, _ = victim
    version = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.compact(table => '{T}')").collect()[0]
    assert r.read_version == version and r.new_version > version
