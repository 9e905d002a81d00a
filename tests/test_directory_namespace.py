"""Warehouses laid out by a Lance directory namespace, as lance-spark's `impl=dir` catalog
writes them: namespaces and tables in the root's `__manifest` (lance-spark's default), or
`<root>/<t>.lance` in the virtual namespace `default` (`single_level_ns=true`). Our catalog,
set with the same `impl`/`root`/`single_level_ns` settings, lists, compacts and reads them
under the same identifiers, and Lance's own namespace finds them where they were after."""
import io

import lance
import pyarrow as pa
import pytest
from lance import namespace as lance_ns

from oracle import batch, content, degraded_table
from lance_compact.api import CATALOG_CLASS


def _catalog(spark, name, root, single_level):
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.impl", "dir")
    spark.conf.set(f"spark.sql.catalog.{name}.root", str(root))
    spark.conf.set(f"spark.sql.catalog.{name}.single_level_ns", str(single_level).lower())


@pytest.fixture(scope="module")
def manifest_root(tmp_path_factory, spark):
    """lance-spark's default layout, made by Lance's own DirectoryNamespace: namespace db,
    table db.events (many small fragments, some deletions)."""
    root = tmp_path_factory.mktemp("lance_spark_dir")
    ns = lance_ns.DirectoryNamespace(root=str(root))
    ns.create_namespace(lance_ns.CreateNamespaceRequest(id=["db"]))
    first = batch(0, 20)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, first.schema) as w:
        w.write_table(first)
    location = ns.create_table(lance_ns.CreateTableRequest(id=["db", "events"]), sink.getvalue()).location
    for i in range(1, 15):
        lance.write_dataset(batch(i * 20, 20), location, mode="append")
    lance.dataset(location).delete("id % 7 = 0")
    _catalog(spark, "lsdir", root, False)
    return root, location


@pytest.fixture(scope="module")
def flat_root(tmp_path_factory, spark):
    root = tmp_path_factory.mktemp("lance_spark_flat")
    degraded_table(str(root / "flat.lance"), fragments=12, rows_per_fragment=20)
    _catalog(spark, "lsflat", root, True)
    return root


def test_manifest_layout_lists_compacts_and_reads(spark, manifest_root):
    root, location = manifest_root
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN lsdir").collect()] == ["db"]
    assert [r.tableName for r in spark.sql("SHOW TABLES IN lsdir.db").collect()] == ["events"]
    before = lance.dataset(location)
    want = content(before)
    r = spark.sql("CALL lsdir.compact(table => 'db.events', target_rows_per_fragment => 1000)").collect()[0]
    after = lance.dataset(location)
    assert r.fragments_removed == len(before.get_fragments()) and r.fragments_added == 1
    assert after.version == r.new_version and content(after) == want
    assert spark.sql("SELECT count(*) FROM lsdir.db.events").collect()[0][0] == after.count_rows()
    assert sorted(x.id for x in spark.sql("SELECT id FROM lsdir.db.events").collect()) == \
        sorted(after.to_table(columns=["id"])["id"].to_pylist())
    assert spark.sql("SELECT count(*) FROM lsdir.db.events.fragments").collect()[0][0] == 1
    layout = spark.sql("CALL lsdir.describe_layout(table => 'db.events')").collect()[0]
    assert layout.fragments == 1 and layout.version == after.version
    # Lance (and so lance-spark) still finds the table where it was
    ns = lance_ns.DirectoryNamespace(root=str(root))
    assert ns.describe_table(lance_ns.DescribeTableRequest(id=["db", "events"])).location == location


def test_manifest_layout_namespaces_and_errors(spark, manifest_root):
    root, location = manifest_root
    spark.sql("CREATE NAMESPACE lsdir.staging")
    ns = lance_ns.DirectoryNamespace(root=str(root))
    assert sorted(ns.list_namespaces(lance_ns.ListNamespacesRequest(id=[])).namespaces) == ["db", "staging"]
    spark.sql("DROP NAMESPACE lsdir.staging")
    assert ns.list_namespaces(lance_ns.ListNamespacesRequest(id=[])).namespaces == ["db"]
    version = lance.dataset(location).version
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND|cannot be found"):
        spark.sql("CALL lsdir.compact(table => 'db.nope')").collect()
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND|cannot be found"):
        spark.sql("SELECT * FROM lsdir.nope.events").collect()
    with pytest.raises(Exception, match="outside the warehouse"):
        spark.sql("CALL lsdir.compact(table => '/tmp/elsewhere/t.lance')").collect()
    with pytest.raises(Exception, match="does not create tables"):
        spark.sql("CREATE TABLE lsdir.db.created (a INT)").collect()
    assert lance.dataset(location).version == version


def test_single_level_layout_is_the_default_namespace(spark, flat_root):
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN lsflat").collect()] == ["default"]
    assert [r.tableName for r in spark.sql("SHOW TABLES IN lsflat.default").collect()] == ["flat"]
    path = flat_root / "flat.lance"
    want = content(lance.dataset(str(path)))
    r = spark.sql("CALL lsflat.compact(table => 'default.flat', target_rows_per_fragment => 1000)").collect()[0]
    assert r.fragments_added >= 1 and content(lance.dataset(str(path))) == want
    assert spark.sql("SELECT count(*) FROM lsflat.default.flat").collect()[0][0] == len(want)
    with pytest.raises(Exception, match="namespaces cannot be created"):
        spark.sql("CREATE NAMESPACE lsflat.other").collect()
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND|cannot be found"):
        spark.sql("SHOW TABLES IN lsflat.other").collect()


def test_an_unknown_impl_is_refused(spark, tmp_path):
    # impl=rest, glue, hive2 and hive3 are tests/test_rest_catalog.py's; iceberg is not served
    spark.conf.set("spark.sql.catalog.lsiceberg", CATALOG_CLASS)
    spark.conf.set("spark.sql.catalog.lsiceberg.impl", "iceberg")
    with pytest.raises(Exception, match="impl 'iceberg' is not supported; impl=dir .*impl=rest .*impl=glue .*impl=hive2"):
        spark.sql("SHOW NAMESPACES IN lsiceberg").collect()


def test_system_tables_cover_directory_namespaces(spark, manifest_root, flat_root):
    for catalog, expected in (("lsdir", ("db", "events")), ("lsflat", ("default", "flat"))):
        rows = spark.sql(f"SELECT namespace, `table`, error, health_score FROM {catalog}.system.table_health").collect()
        assert [tuple(r)[:3] for r in rows] == [(*expected, None)] and 0 <= rows[0].health_score <= 100
        versions = spark.sql(f"SELECT count(*) FROM {catalog}.system.maintenance_history").collect()[0][0]
        assert versions == spark.sql(f"SELECT count(*) FROM {catalog}.{'.'.join(expected)}.versions").collect()[0][0]
