"""Tables through the catalog: DESCRIBE in Spark types, reads equal to pylance's for the same
version (content, types, nulls, vectors), projections and filters, count(*) answered by Lance,
VERSION AS OF, the metadata tables fragments / versions / indices, and writes refused."""
import shutil

import lance
import pytest

from oracle import batch, degraded_table


@pytest.fixture(scope="module")
def table(warehouse):
    path = warehouse / "db" / "reads.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=12, rows_per_fragment=25)
    # a column with nulls and a nested one, appended in a fragment of their own
    extra = batch(10_000, 7)
    lance.write_dataset(extra, str(path), mode="append")
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", index_type="BTREE")
    return "lance.db.reads", path


def spark_rows(df):
    return sorted((tuple(r) for r in df.collect()), key=lambda r: r[0])


def pylance_rows(ds, columns=None, filter=None):
    t = ds.to_table(columns=columns, filter=filter)
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=lambda r: r[0])


def test_describe_shows_spark_types(spark, table):
    name, _ = table
    types = {r.col_name: r.data_type for r in spark.sql(f"DESCRIBE TABLE {name}").collect()
             if r.col_name and not r.col_name.startswith("#")}
    assert types == {"id": "bigint", "category": "string", "payload": "string", "vector": "array<float>"}


def test_reads_equal_pylance(spark, table):
    name, path = table
    ds = lance.dataset(str(path))
    got = spark_rows(spark.table(name))
    want = [tuple(list(v) if isinstance(v, list) else v for v in r) for r in pylance_rows(ds)]
    assert len(got) == ds.count_rows() and [tuple(list(v) if isinstance(v, list) else v for v in r)
                                            for r in got] == want
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == ds.count_rows()
    assert "LocalTableScan [count" in spark.sql(f"SELECT count(*) FROM {name}")._jdf.queryExecution() \
        .executedPlan().toString()  # answered by Lance's count, no rows read


@pytest.mark.parametrize("where,lance_filter", [
    ("id < 40", "id < 40"),
    ("id >= 100 AND category = 'cat-3'", "id >= 100 AND category = 'cat-3'"),
    ("id IN (1, 2, 3, 250) OR id > 10003", "id IN (1, 2, 3, 250) OR id > 10003"),
    ("NOT (id < 290)", "NOT (id < 290)"),
    ("payload LIKE 'event 1%'", "payload LIKE 'event 1%'"),  # not pushed: Spark filters
])
def test_projections_and_filters(spark, table, where, lance_filter):
    name, path = table
    got = spark_rows(spark.sql(f"SELECT id, payload FROM {name} WHERE {where}"))
    assert got == pylance_rows(lance.dataset(str(path)), ["id", "payload"], lance_filter)
    assert got


def test_version_as_of_and_the_metadata_tables(spark, table):
    name, path = table
    before = lance.dataset(str(path))
    r = spark.sql("CALL lance.compact(table => 'db.reads', target_rows_per_fragment => 1000)").collect()[0]
    after = lance.dataset(str(path))
    assert r.new_version == after.version and len(after.get_fragments()) < len(before.get_fragments())
    old = spark_rows(spark.sql(f"SELECT id, payload FROM {name} VERSION AS OF {before.version}"))
    assert old == pylance_rows(lance.dataset(str(path), version=before.version), ["id", "payload"])
    assert spark_rows(spark.sql(f"SELECT id, payload FROM {name}")) == pylance_rows(after, ["id", "payload"])

    frags = spark.sql(f"SELECT * FROM {name}.fragments ORDER BY id").collect()
    assert [f.id for f in frags] == [f.fragment_id for f in after.get_fragments()]
    for row, f in zip(frags, after.get_fragments()):
        m = f.metadata
        assert row.physical_rows == m.physical_rows and row.live_rows == f.count_rows()
        assert row.data_files == [d.path for d in m.files]
    versions = spark.sql(f"SELECT * FROM {name}.versions ORDER BY version").collect()
    assert [v.version for v in versions] == [v["version"] for v in after.versions()]
    last = versions[-1]
    assert last.operation == "Rewrite" and last.version == r.new_version
    assert (last.fragments_removed, last.fragments_added) == (r.fragments_removed, r.fragments_added)
    assert last.rows == after.count_rows() and last.fragments == len(after.get_fragments())
    assert versions[-2].operation == "ReserveFragments"
    ix = spark.sql(f"SELECT * FROM {name}.indices").collect()
    assert [(i.name, i.columns) for i in ix] == [("id_idx", ["id"])]
    covered = {f for x in after.list_indices() if x["name"] == "id_idx" for f in x["fragment_ids"]}
    assert ix[0].unindexed_fragments == sorted({f.fragment_id for f in after.get_fragments()} - covered)


def test_aggregates_of_the_fragments_table_are_answered_by_the_engine(spark, warehouse):
    """count(*), count, sum, min, max (and avg, which Spark splits into sum and count) of the
    fragments table's numeric columns, with no filter or grouping, are pushed to its scan: the
    engine answers one row from the fragments' arrays instead of a row per fragment. The answers
    equal those Spark computes from the rows, also for a table of no fragment; a filter, a
    grouping or another column is not pushed and still answered right."""
    path = warehouse / "db" / "aggs.lance"
    ds = degraded_table(str(path), fragments=12, rows_per_fragment=30)
    frags = ds.get_fragments()
    live = [f.count_rows() for f in frags]
    pushed = ("SELECT count(*), sum(live_rows), min(id), max(id), count(id), sum(deleted_rows), "
              "max(physical_rows), avg(live_rows) FROM lance.db.aggs.fragments")
    plan = spark.sql(f"EXPLAIN {pushed}").collect()[0][0]
    assert "agg0" in plan, plan  # the scan's output is the engine's partial aggregates
    [r] = spark.sql(pushed).collect()
    physical = [f.metadata.physical_rows for f in frags]
    assert list(r) == [len(frags), sum(live), min(f.fragment_id for f in frags), max(f.fragment_id for f in frags),
                       len(frags), sum(physical) - sum(live), max(physical), sum(live) / len(live)]
    rows = spark.sql("SELECT * FROM lance.db.aggs.fragments").collect()
    assert sum(x.deleted_rows for x in rows) == sum(physical) - sum(live) and len(rows) == len(frags)
    for query, expected in (
            ("SELECT count(*) FROM lance.db.aggs.fragments WHERE deleted_rows > 0",
             sum(1 for x in rows if x.deleted_rows > 0)),
            ("SELECT count(deletion_file) FROM lance.db.aggs.fragments", sum(1 for x in rows if x.deletion_file)),
            ("SELECT max(n) FROM (SELECT live_rows, count(*) AS n FROM lance.db.aggs.fragments GROUP BY live_rows)",
             max(sum(1 for x in rows if x.live_rows == v) for v in {x.live_rows for x in rows}))):
        assert "agg0" not in spark.sql(f"EXPLAIN {query}").collect()[0][0], query
        assert spark.sql(query).collect()[0][0] == expected, query
    empty = warehouse / "db" / "aggs_empty.lance"
    shutil.rmtree(empty, ignore_errors=True)
    lance.write_dataset(batch(0, 10), str(empty)).delete("true")
    assert len(lance.dataset(str(empty)).get_fragments()) == 0
    [e] = spark.sql("SELECT count(*), sum(live_rows), min(id), avg(live_rows) FROM lance.db.aggs_empty.fragments").collect()
    assert list(e) == [0, None, None, None]


@pytest.mark.parametrize("statement,message", [
    ("INSERT INTO {t} SELECT * FROM {t} LIMIT 1", "does not insert into tables"),
    ("DELETE FROM {t} WHERE id = 1", "does not update, delete from or merge into tables"),
    ("UPDATE {t} SET payload = 'x' WHERE id = 1", "does not update, delete from or merge into tables"),
    ("CREATE TABLE lance.db.created (a INT)", "does not create tables"),
])
def test_writes_are_refused(spark, table, statement, message):
    name, path = table
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=message) as e:
        spark.sql(statement.format(t=name)).collect()
    assert "lance-spark" in str(e.value)
    assert lance.dataset(str(path)).version == version


def test_unknown_things(spark, table):
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("SELECT * FROM lance.db.reads.nope").collect()
    with pytest.raises(Exception, match="version 999 does not exist"):
        spark.sql("SELECT * FROM lance.db.reads VERSION AS OF 999").collect()


def test_reads_run_on_executors_a_partition_per_group_of_fragments(spark, warehouse):
    """Each group of fragments (up to spark.sql.files.maxPartitionBytes of data files) is one
    partition read on an executor; all of them read the version the query loaded."""
    path = warehouse / "db" / "spread.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=20, rows_per_fragment=30)
    fragment_bytes = [sum(d.file_size_bytes for d in f.metadata.files) for f in ds.get_fragments()]
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(fragment_bytes) * 3))
    try:
        df = spark.table("lance.db.spread")
        assert "(Python)" in df._jdf.queryExecution().executedPlan().toString()
        groups = df.rdd.getNumPartitions()
        assert len(fragment_bytes) // 3 <= groups <= len(fragment_bytes) // 2 + 1
        # rows appended after the DataFrame was made are not in it: one snapshot per query
        lance.write_dataset(batch(50_000, 40), str(path), mode="append")
        assert sorted(r.id for r in df.select("id").collect()) == \
            sorted(ds.to_table(columns=["id"])["id"].to_pylist())
        assert spark.table("lance.db.spread").count() == ds.count_rows() + 40
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_lance_types_read_as_spark_types(spark, warehouse):
    """Unsigned, large, view-less, dictionary, nested, fixed-size and timestamp columns arrive
    with the values pylance reads, in the types DESCRIBE shows."""
    import datetime
    import decimal

    import pyarrow as pa

    path = warehouse / "db" / "typed.lance"
    shutil.rmtree(path, ignore_errors=True)
    n = 6
    t = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "u8": pa.array([0, 255, None, 7, 8, 9], pa.uint8()),
        "u32": pa.array([0, 2**32 - 1, 5, None, 1, 2], pa.uint32()),
        "u64": pa.array([0, 2**64 - 1, 5, 6, None, 1], pa.uint64()),
        "f16": pa.array([0.5, None, 1.5, 2.0, 3.0, 4.0], pa.float16()),
        "big_text": pa.array(["a", None, "ccc", "", "é", "f"], pa.large_string()),
        "fixed_bin": pa.array([b"ab", b"cd", None, b"ef", b"gh", b"ij"], pa.binary(2)),
        "day": pa.array([datetime.date(2026, 1, d + 1) for d in range(n)], pa.date32()),
        "ts_ns": pa.array([datetime.datetime(2026, 1, 1, 0, 0, d) for d in range(n)], pa.timestamp("ns")),
        "dict": pa.array(["x", "y", "x", None, "y", "x"]).dictionary_encode(),
        "nested": pa.array([{"a": i, "b": [i, i + 1]} if i != 2 else None for i in range(n)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array([float(i) for i in range(n * 3)], pa.float32()), 3),
        "ints": pa.array([[1, 2], [], None, [3], [4, None], [5]], pa.large_list(pa.int32())),
    })
    lance.write_dataset(t, str(path), max_rows_per_file=2)
    types = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE lance.db.typed").collect()
             if r.col_name and not r.col_name.startswith("#")}
    assert types["u8"] == "smallint" and types["u64"] == "decimal(20,0)" and types["vec"] == "array<float>"
    assert types["ts_ns"] == "timestamp_ntz" and types["nested"] == "struct<a:bigint,b:array<bigint>>"
    df = spark.table("lance.db.typed")
    assert df.rdd.getNumPartitions() >= 1 and "(Python)" in df._jdf.queryExecution().executedPlan().toString()
    got = {r.id: r.asDict(recursive=True) for r in df.collect()}
    want = lance.dataset(str(path)).to_table().to_pylist()
    assert len(got) == n
    for w in want:
        g = got[w["id"]]
        assert g["u8"] == w["u8"] and g["u32"] == w["u32"] and g["big_text"] == w["big_text"]
        assert g["u64"] == (decimal.Decimal(w["u64"]) if w["u64"] is not None else None)
        assert g["f16"] == (float(w["f16"]) if w["f16"] is not None else None)
        assert g["fixed_bin"] == (bytearray(w["fixed_bin"]) if w["fixed_bin"] is not None else None)
        assert g["day"] == w["day"] and g["ts_ns"] == w["ts_ns"] and g["dict"] == w["dict"]
        assert g["nested"] == w["nested"] and g["vec"] == w["vec"] and g["ints"] == w["ints"]


def test_driver_reads_when_asked_and_their_cap(spark, warehouse, table):
    """spark.sql.catalog.<name>.distributed_reads=false reads on the driver through the
    engine, refusing reads over read_max_rows."""
    from lance_compact.api import CATALOG_CLASS

    name, path = table
    spark.conf.set("spark.sql.catalog.lance_driver", CATALOG_CLASS)
    spark.conf.set("spark.sql.catalog.lance_driver.warehouse", str(warehouse))
    spark.conf.set("spark.sql.catalog.lance_driver.distributed_reads", "false")
    spark.conf.set("spark.sql.catalog.lance_driver.read_max_rows", "50")
    df = spark.sql("SELECT id, payload FROM lance_driver.db.reads WHERE id < 40")
    assert "(Python)" not in df._jdf.queryExecution().executedPlan().toString()
    assert spark_rows(df) == pylance_rows(lance.dataset(str(path)), ["id", "payload"], "id < 40")
    with pytest.raises(Exception, match="more than spark.sql.catalog.<name>.read_max_rows = 50"):
        spark.sql("SELECT * FROM lance_driver.db.reads").collect()


def _samples():
    """Three values (one null) of every example Arrow type of the type map, by type."""
    import datetime
    import decimal

    import pyarrow as pa

    ints = [1, None, 7]
    samples = {
        pa.bool_(): [True, None, False], pa.uint64(): [2**64 - 1, None, 0],
        pa.decimal128(12, 3): [decimal.Decimal("1.250"), None, decimal.Decimal("-3.000")],
        pa.date32(): [datetime.date(2026, 1, 1), None, datetime.date(2026, 2, 3)],
        pa.large_list(pa.int32()): [[1, 2], None, []],
        pa.list_(pa.float32(), 3): [[1.0, 2.0, 3.0], None, [4.0, 5.0, 6.0]],
        pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64())), ("t", pa.timestamp("us")), ("d", pa.date32()),
                   ("m", pa.decimal128(5, 2))]):
            [{"a": 1, "b": [1], "t": datetime.datetime(2026, 1, 1, 0, 0, 1), "d": datetime.date(2026, 1, 2),
              "m": decimal.Decimal("1.50")}, None, {"a": 2, "b": [], "t": None, "d": None, "m": None}],
        pa.map_(pa.string(), pa.int64()): [[("k", 1)], None, []],
        pa.dictionary(pa.int32(), pa.string()): ["x", None, "y"],
    }
    for t in (pa.int8(), pa.int16(), pa.uint8(), pa.int32(), pa.uint16(), pa.int64(), pa.uint32()):
        samples[t] = ints
    for t in (pa.float16(), pa.float32(), pa.float64()):
        samples[t] = [0.5, None, 1.5]
    for t in (pa.string(), pa.large_string()):
        samples[t] = ["a", None, "é"]
    for t in (pa.binary(), pa.large_binary(), pa.binary(2)):
        samples[t] = [b"ab", None, b"cd"]
    for t in (pa.timestamp("ns"), pa.timestamp("us", "UTC"), pa.timestamp("ns", "America/New_York")):
        samples[t] = [datetime.datetime(2026, 1, 1, 0, 0, 1), None, datetime.datetime(2026, 3, 1, 12, 0)]
    return samples


def test_every_type_of_the_type_map_reads_on_the_driver_and_the_executors(spark, warehouse):
    """Every Arrow type the one type map (spark_types.RULES) knows gets the Spark type the map
    names, and reads the same through the engine's JSON rows (Scala JsonRows, the driver
    path) as through the distributed reads: the JVM accepts every type the map produces."""
    import numpy as np
    import pyarrow as pa

    from lance_compact.api import CATALOG_CLASS
    from lance_compact.runtime.spark_types import RULES, schema_ddl

    samples = _samples()
    examples = [t for _, _, ts in RULES for t in ts]
    assert [t for t in examples if t not in samples] == []  # a new rule needs a sample here
    examples.append(pa.timestamp("ns", "America/New_York"))  # an instant in another zone, read as UTC
    columns = {"id": pa.array([0, 1, 2], pa.int64())}
    columns.update({f"c{i}": pa.array([np.float16(v) if v is not None else None for v in samples[t]], t)
                    if pa.types.is_float16(t) else pa.array(samples[t], t) for i, t in enumerate(examples)})
    path = warehouse / "db" / "all_types.lance"
    shutil.rmtree(path, ignore_errors=True)
    table = pa.table(columns)
    lance.write_dataset(table, str(path))
    want = spark.createDataFrame([], schema_ddl(lance.dataset(str(path)).schema)).schema
    spark.conf.set("spark.sql.catalog.lance_driver", CATALOG_CLASS)
    spark.conf.set("spark.sql.catalog.lance_driver.warehouse", str(warehouse))
    spark.conf.set("spark.sql.catalog.lance_driver.distributed_reads", "false")
    by_executors = spark.table("lance.db.all_types")
    on_driver = spark.table("lance_driver.db.all_types")
    assert "(Python)" not in on_driver._jdf.queryExecution().executedPlan().toString()
    for df in (by_executors, on_driver):
        assert [f.dataType.simpleString() for f in df.schema] == [f.dataType.simpleString() for f in want]
    assert spark_rows(on_driver) == spark_rows(by_executors)
    assert sum(v is None for v in spark_rows(on_driver)[1]) == len(examples)  # the nulls arrive


def test_column_names_with_back_quotes_and_spaces(spark, warehouse):
    """Names Lance takes: a space, a back-quote in a nested field. A top-level column whose name
    holds a back-quote Lance 14.0.2 can create but never read, filter or rewrite (the other
    columns it still reads): DESCRIBE still shows it (the schema DDL doubles the back-quote), and
    reads and compaction say what is wrong and how to rename it, with the version unchanged."""
    import pyarrow as pa

    path = warehouse / "db" / "quoted.lance"
    shutil.rmtree(path, ignore_errors=True)
    t = pa.table({"a b": pa.array(range(8), pa.int64()), "nest": pa.array([{"x`y": i} for i in range(8)])})
    lance.write_dataset(t, str(path), max_rows_per_file=2)
    types = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE lance.db.quoted").collect()
             if r.col_name and not r.col_name.startswith("#")}
    assert types == {"a b": "bigint", "nest": "struct<x`y:bigint>"}
    got = spark.sql("SELECT `a b` AS s, nest.`x``y` AS n FROM lance.db.quoted WHERE `a b` >= 5").collect()
    assert sorted((r.s, r.n) for r in got) == [(i, i) for i in range(5, 8)]
    row = spark.sql("CALL lance.compact(table => 'db.quoted', sort_order => '`a b` DESC')").collect()[0]
    assert row.new_version == 3 and row.fragments_removed == 4
    assert lance.dataset(str(path)).to_table(columns=["a b"])["a b"].to_pylist() == list(range(7, -1, -1))

    bad = warehouse / "db" / "backquoted.lance"
    shutil.rmtree(bad, ignore_errors=True)
    lance.write_dataset(pa.table({"we`ird": pa.array(range(4), pa.int64()), "ok": pa.array(range(4))}),
                        str(bad), max_rows_per_file=1)
    types = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE lance.db.backquoted").collect()
             if r.col_name and not r.col_name.startswith("#")}
    assert types == {"we`ird": "bigint", "ok": "bigint"}
    fix = "rename the column with pylance: dataset.alter_columns({'path': '`we``ird`'"
    assert sorted(r.ok for r in spark.sql("SELECT ok FROM lance.db.backquoted WHERE ok > 1").collect()) == [2, 3]
    for statement in ("SELECT * FROM lance.db.backquoted", "SELECT `we``ird` FROM lance.db.backquoted",
                      "CALL lance.compact(table => 'db.backquoted')"):
        with pytest.raises(Exception) as e:
            spark.sql(statement).collect()
        assert "column named 'we`ird', with a back-quote" in str(e.value) and fix in str(e.value), statement
    assert lance.dataset(str(bad)).version == 1


def test_a_column_spark_has_no_type_for_is_named_with_its_table():
    """A Lance column of a type Spark has none for (a duration, a time of day) makes the table
    unreadable through the catalog: the error names the table and the column (it named only
    the Arrow type) and says that Lance's maintenance of it works."""
    import pyarrow as pa

    from lance_compact.errors import CompactionError
    from lance_compact.runtime.spark_types import schema_ddl

    schema = pa.schema([("id", pa.int64()), ("took", pa.duration("us"))])
    with pytest.raises(CompactionError, match=r"table db\.t: column 'took': Arrow type duration\[us\] has no "
                                              r"Spark type here, so Spark cannot read the table"):
        schema_ddl(schema, "db.t")
