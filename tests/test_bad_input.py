"""Bad input: a clear error naming the problem, and the table's version unchanged."""
import os
import shutil

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
    # a column named in sort_order is a column name (runtime/identifiers.py): printable, at most
    # 255 characters, refused before the table is read or anything logs it (issue 41)
    ("sort_order column with a newline", f"table => '{T}', sort_order => 'id, `x\\nINFO forged`'",
     "table db.victim: sort_order: column 'x\\nINFO forged' is refused: it contains a control character (\\n); "
     "a column name is 1 to 255 printable characters"),
    ("zorder column with a line separator", f"table => '{T}', sort_order => 'zorder(id, `a\\u2028b`)'",
     "column 'a\\u2028b' is refused: it contains a control character (\\u2028)"),
    ("sort_order column with a zero-width space", f"table => '{T}', sort_order => '`id\\u200b`'",
     "column 'id\\u200b' is refused: it contains a character that is not printable (\\u200b, Unicode category Cf)"),
    ("sort_order column of 5,000 characters", f"table => '{T}', sort_order => '{'c' * 5000}'",
     "... (5,000 characters) is refused: it has 5,000 characters, more than 255"),
    ("options key with a newline, twice", f"table => '{T}', options => map('a\\nINFO forged', '1', 'A\\nINFO forged', '2')",
     "option A\\nINFO forged is given twice"),
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
    assert not any(line.startswith("INFO forged") for line in str(e.value).splitlines())
    assert (lance.dataset(str(path)).version, lance.dataset(str(outside)).version) == versions
    assert sorted(os.listdir(warehouse / "db")) == listing


NAMED_COLUMNS = [  # every other parameter that names a column or an index: the same rules, before anything is read
    (f"CALL lance.create_index(table => '{T}', column => 'id\\nINFO forged', index_type => 'BTREE')",
     "table db.victim: create_index: column 'id\\nINFO forged' is refused: it contains a control character"),
    (f"CALL lance.create_index(table => '{T}', column => '{'c' * 300}', index_type => 'BTREE')",
     "is refused: it has 300 characters, more than 255"),
    (f"CALL lance.create_index(table => '{T}', column => '__{'c' * 130}', index_type => 'BTREE')",
     "the default index name (<column>_idx; give one with name =>) '__ccc"),
    (f"CALL lance.optimize_indices(table => '{T}', indices => 'id_idx, x\\ny')",
     "optimize_indices: index name in indices 'x\\ny' is refused: it contains a control character"),
    (f"CALL lance.maintain(table => '{T}', sort_order => '`x\\ny`')", "sort_order: column 'x\\ny' is refused"),
    ("CALL lance.maintain_warehouse(namespace => 'db', sort_order => 'id, `x\\ny`')",
     "maintain_warehouse of namespace db: sort_order: column 'x\\ny' is refused"),
    (f"ALTER TABLE lance.{T} SET TBLPROPERTIES ('lance_compact.cluster_by' = 'zorder(id, `x\\ny`)')",
     "table property lance_compact.cluster_by: column 'x\\ny' is refused: it contains a control character"),
    (f"ALTER TABLE lance.{T} CLUSTER BY (`id\u2028`)",
     "CLUSTER BY: column 'id\\u2028' is refused: it contains a control character (\\u2028)"),
]


@pytest.mark.parametrize("statement,message", NAMED_COLUMNS, ids=[s[:60] for s, _ in NAMED_COLUMNS])
def test_a_bad_column_or_index_name_in_any_parameter_is_refused(spark, victim, statement, message):
    path, _ = victim
    config = lance.dataset(str(path)).config()
    _refused(spark, path, statement, message)
    assert lance.dataset(str(path)).config() == config


def test_unknown_procedure_names_the_valid_ones(spark):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as e:
        spark.sql("CALL lance.compactify(table => 'db.victim')").collect()
    message = str(e.value)
    valid = sorted(r.procedure_name for r in spark.sql("SHOW PROCEDURES IN lance").collect())
    assert {"compact", "plan_compaction", "describe_layout", "cleanup", "maintain"} <= set(valid)
    assert f"catalog lance has no procedure compactify; procedures are {', '.join(valid)}" in message, message


def test_the_python_options_mapping_takes_text_as_sqls_map_does(spark, victim):
    """``options={...}`` in Python is SQL's ``options => map(...)``: a value written as text is
    read by the key's type (before, a named parameter's text was refused as a STRING)."""
    from lance_compact import compact, plan_compaction
    path, _ = victim
    version = lance.dataset(str(path)).version
    plan = plan_compaction(spark, T, strategy="io_bounded",
                           options={"max_rewrite_bytes": "10737418240", "target_rows_per_fragment": "100000"})
    assert plan.collect(), "no task planned"
    with pytest.raises(Exception, match="option target_rows_per_fragment must be >= 1, got 0"):
        compact(spark, T, options={"target_rows_per_fragment": "0"}).collect()
    assert lance.dataset(str(path)).version == version


def test_the_table_still_compacts_after_all_that(spark, victim):
    path, _ = victim
    version = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.compact(table => '{T}')").collect()[0]
    assert r.read_version == version and r.new_version > version


# Bounds on what a run may make the cluster do (compaction/bounds.py, parameters.json "bounds"):
# 20 fragments of 15 rows, a fifth of each deleted (every fragment over Lance's deletion
# threshold): a target of 1 row would write a fragment per row and a clustering run would plan a
# partition per row.
BOUNDED = "bnd.t"


@pytest.fixture
def bounded(warehouse):
    import shutil

    import pyarrow as pa

    path = warehouse / "bnd" / "t.lance"
    shutil.rmtree(path, ignore_errors=True)
    for i in range(20):
        ids = list(range(i * 15, i * 15 + 15))
        lance.write_dataset(pa.table({"id": pa.array(ids, pa.int64()), "tenant": pa.array([x % 7 for x in ids], pa.int64())}),
                            str(path), mode="append" if i else "create")
    lance.dataset(str(path)).delete("id % 5 = 0")
    return path


def _refused(spark, path, statement: str, *texts: str) -> None:
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception) as e:
        spark.sql(statement).collect()
    for text in texts:
        assert text in str(e.value), str(e.value)[:2000]
    assert lance.dataset(str(path)).version == version


@pytest.mark.parametrize("statement, bound", [
    (f"CALL lance.compact(table => '{BOUNDED}', sort_order => 'tenant', target_rows_per_fragment => 1)",
     "max_cluster_partitions"),
    (f"CALL lance.plan_compaction(table => '{BOUNDED}', sort_order => 'tenant', target_rows_per_fragment => 1)",
     "max_cluster_partitions"),
    (f"CALL lance.compact(table => '{BOUNDED}', target_rows_per_fragment => 1)", "max_fragments_written"),
    (f"CALL lance.plan_compaction(table => '{BOUNDED}', target_rows_per_fragment => 1)", "max_fragments_written"),
    (f"CALL lance.maintain(table => '{BOUNDED}', sort_order => 'tenant', target_rows_per_fragment => 1, "
     "min_small_fragments => 1)", "max_cluster_partitions"),
    (f"CALL lance.maintain(table => '{BOUNDED}', target_rows_per_fragment => 1, min_small_fragments => 1)",
     "max_fragments_written"),
])
def test_a_run_over_a_bound_is_refused_by_its_name_before_it_runs(spark, bounded, statement, bound):
    _refused(spark, bounded, statement, f"refused by the bound {bound}", "target_rows_per_fragment 1 ",
             "nothing ran and the table is unchanged")
    assert lance.dataset(str(bounded)).count_rows() == 240


def test_the_bounds_leave_a_sensible_target_alone(spark, bounded):
    """The same table with a target of 4 rows (67 partitions, under the floor of 100): it runs."""
    r = spark.sql(f"CALL lance.compact(table => '{BOUNDED}', sort_order => 'tenant', "
                  "target_rows_per_fragment => 4)").collect()[0]
    assert r.new_version > r.read_version and lance.dataset(str(bounded)).count_rows() == 240


@pytest.mark.parametrize("argument, message", [
    ("options => map('num_threads', '100000')", "option num_threads must be <= 1024"),
    ("options => map('batch_size', '1')", "option batch_size must be >= 16"),
    ("max_bytes_per_file => 1", "option max_bytes_per_file must be >= 1048576"),
    ("options => map('binary_copy_read_batch_bytes', '1')", "option binary_copy_read_batch_bytes must be >= 65536"),
    ("partial_progress => true, max_commits => 1000000", "option max_commits must be <= 1000"),
    ("max_retries => 1000000", "option max_retries must be <= 100"),
])
def test_numbers_a_user_could_make_huge_or_tiny_have_a_range(spark, bounded, argument, message):
    _refused(spark, bounded, f"CALL lance.compact(table => '{BOUNDED}', {argument})", message)


@pytest.mark.parametrize("prop, sort_order, bound", [
    ("lance_compact.maintain.target_rows_per_fragment", "tenant", "max_cluster_partitions"),
    ("lance_compact.maintain.target_rows_per_fragment", None, "max_fragments_written"),
    ("lance.compaction.target_rows_per_fragment", "tenant", "max_cluster_partitions"),
    ("lance.compaction.target_rows_per_fragment", None, "max_fragments_written"),
])
def test_a_bound_holds_when_the_value_is_a_table_property(spark, bounded, prop, sort_order, bound):
    """The operator's own maintain / maintain_warehouse run over a table whose property asks for
    one row per fragment: that table is refused by the bound's name, saying which property; its
    version stays what the ALTER left."""
    spark.sql(f"ALTER TABLE lance.{BOUNDED} SET TBLPROPERTIES ('{prop}' = '1', "
              "'lance_compact.maintain.min_small_fragments' = '1')")
    order = f", sort_order => '{sort_order}'" if sort_order else ""
    _refused(spark, bounded, f"CALL lance.maintain(table => '{BOUNDED}'{order})",
             f"refused by the bound {bound}", f"target_rows_per_fragment 1 (the table property {prop})")
    version = lance.dataset(str(bounded)).version
    rows = spark.sql(f"CALL lance.maintain_warehouse(namespace => 'bnd'{order})").collect()
    errors = [r.error for r in rows if r.error]
    assert len(errors) == 1 and f"refused by the bound {bound}" in errors[0], rows
    assert f"target_rows_per_fragment 1 (the table property {prop})" in errors[0], errors[0]
    assert lance.dataset(str(bounded)).version == version
    if prop.startswith("lance.compaction."):  # Lance's own key also reaches a plain CALL
        _refused(spark, bounded, f"CALL lance.compact(table => '{BOUNDED}'{order})",
                 f"refused by the bound {bound}", f"target_rows_per_fragment 1 (the table property {prop})")


# ---- what kind of failure: an error condition and SQLSTATE for each (docs/failures-and-cancellation.md)

KINDS = [
    # (kind, the options map of the CALL (None: no table), condition, SQLSTATE)
    ("bad input", {"target_row_per_fragment": "5"}, "LANCE_INVALID_ARGUMENT", "22023"),
    ("not a table", None, "LANCE_TABLE_NOT_FOUND", "42P01"),
    ("an empty _versions folder", "empty", "LANCE_TABLE_NOT_FOUND", "42P01"),
    ("concurrent writer", {"test_before_commit": "writers.restore_previous"}, "LANCE_CONCURRENT_WRITE", "40001"),
    ("storage full", {"test_fail_task": "0:all:enospc"}, "LANCE_STORAGE_ERROR", "58030"),
    ("corrupt file", {}, "LANCE_CORRUPT_FILE", "XX001"),
]


@pytest.mark.parametrize("how", ["sql", "pyspark"])
@pytest.mark.parametrize("kind,options,condition,state", KINDS, ids=[k[0] for k in KINDS])
def test_each_kind_of_failure_has_its_error_condition(spark, warehouse, victim, kind, options, condition, state, how):
    """SQL (spark.sql) and PySpark (compact()) both see the condition and SQLSTATE, and the
    message names it first, as Spark's own errors do."""
    from pyspark.errors import AnalysisException

    from lance_compact import compact

    name = f"kind_{condition.lower()}_{how}"
    path = warehouse / "db" / f"{name}.lance"
    table = f"{warehouse}/db/plain" if options is None else f"db.{name}"
    if options == "empty":  # a folder named as a table, its _versions empty: no table there
        shutil.rmtree(path, ignore_errors=True)
        (path / "_versions").mkdir(parents=True)
        table, options = str(path), None
    elif options is not None:
        degraded_table(str(path), fragments=8, rows_per_fragment=40)
    if kind == "corrupt file":  # a data file cut short
        data = sorted((path / "data").iterdir())[0]
        data.write_bytes(data.read_bytes()[:64])
    with pytest.raises(AnalysisException) as e:
        if how == "sql":
            pairs = ", ".join(f"'{k}', '{v}'" for k, v in (options or {}).items())
            spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300"
                      + (f", options => map({pairs})" if pairs else "") + ")").collect()
        else:
            compact(spark, table, target_rows_per_fragment=300, options=options or None).collect()
    assert (e.value.getCondition(), e.value.getSqlState()) == (condition, state), str(e.value)[:2000]
    assert str(e.value).startswith(f"[{condition}] "), str(e.value)[:500]
    if kind == "bad input":
        assert "'target_row_per_fragment' (did you mean 'target_rows_per_fragment'?)" in str(e.value)


def test_a_table_property_written_around_alter_table_is_checked_before_a_run(spark, bounded):
    """ALTER TABLE checks a lance.compaction.* value against the option's range; one written by
    pylance directly (or before the range existed) is checked when a run reads it."""
    lance.dataset(str(bounded)).update_config({"lance.compaction.num_threads": "100000"})
    for statement in (f"CALL lance.compact(table => '{BOUNDED}')",
                      f"CALL lance.compact(table => '{BOUNDED}', sort_order => 'tenant')"):
        _refused(spark, bounded, statement, "table property lance.compaction.num_threads must be <= 1024",
                 "nothing ran and the table is unchanged")


@pytest.mark.parametrize("statement, ours", [
    (f"OPTIMIZE lance.{T} ZORDER BY (id, v)", f"CALL lance.compact(table => '{T}', sort_order => 'zorder(id, v)')"),
    (f"OPTIMIZE lance.{T}", f"CALL lance.compact(table => '{T}')"),
    (f"OPTIMIZE lance.{T} WITH (target_rows_per_fragment = 1000)", f"CALL lance.compact(table => '{T}')"),
    (f"VACUUM lance.{T} RETAIN 168 HOURS", f"CALL lance.cleanup(table => '{T}', older_than => '168 hours')"),
    (f"DESCRIBE HISTORY lance.{T}", f"SELECT * FROM lance.{T}.versions"),
    (f"CALL lance.system.rewrite_data_files(table => '{T}')", "CALL lance.compact("),
    (f"CALL lance.system.expire_snapshots(table => '{T}')", "CALL lance.cleanup("),
    (f"CALL lance.system.remove_orphan_files(table => '{T}')", "delete_unverified => true"),
])
def test_statements_typed_by_habit_name_ours(spark, victim, statement, ours):
    """Delta's, Iceberg's and lance-spark's statements fail naming the statement of ours that does
    the same (issue 43: they failed with bare parse errors), and change nothing."""
    path = victim[0]
    before = lance.dataset(str(path)).version
    with pytest.raises(Exception) as e:
        spark.sql(statement).collect()
    assert ours in " ".join(str(e.value).split()), str(e.value)
    assert lance.dataset(str(path)).version == before
    # everything else parses as Spark parses it
    assert spark.sql(f"SELECT count(*) AS n FROM lance.{T}").collect()[0]["n"] > 0
