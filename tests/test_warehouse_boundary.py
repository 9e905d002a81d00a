"""One warehouse boundary, checked on every way in. A table folder that is a symbolic link
out of the warehouse, a namespace folder that is one, and a table whose `_versions`/`data`
folders are links out are refused by SELECT (also VERSION AS OF), DESCRIBE, SHOW TBLPROPERTIES,
the metadata tables, ALTER TABLE, every procedure (by name and by path), and namespace
commands; listings (SHOW TABLES / NAMESPACES, the system tables, maintain_warehouse) leave
them out. Namespaces that would sit inside a table's folders, or hide one, are refused, and so
is any identifier with a control character, before the engine logs it. Every spelling Lance's
URL parsing reads as another location (`%2e%2e`, `S3://`, ...) is refused on every entry point,
on local disk and on the S3-compatible server under the operator's catalog with keys. The
outside table's version and files never change, and on S3 none of its objects is requested."""
from __future__ import annotations

import os
from pathlib import Path

import lance
import pytest

from conftest import NO_VERSION_FLOOR, lance_session
from lance_compact.api import CATALOG_CLASS
from oracle import degraded_table

OUTSIDE = "is outside the warehouse"
LAYOUT = "a table's or Lance's own folder"
COLLIDES = "collides with Lance's layout"
CONTROL = "contains a control character"


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    base = tmp_path_factory.mktemp("boundary")
    wh, outside = base / "wh", base / "outside"
    degraded_table(str(wh / "db" / "t.lance"), fragments=6, rows_per_fragment=10)
    # an index, so a DROP INDEX that got through would change the table
    degraded_table(str(outside / "db" / "ext.lance"), fragments=6, rows_per_fragment=10,
                   appends=2).create_scalar_index("id", "BTREE")
    # (a) a table folder linking out; (b) a namespace folder linking out; a table whose
    # folders link out
    (wh / "db" / "link.lance").symlink_to(outside / "db" / "ext.lance")
    (wh / "linkns").symlink_to(outside / "db")
    inner = wh / "db" / "inner.lance"
    inner.mkdir()
    for child in os.listdir(outside / "db" / "ext.lance"):
        (inner / child).symlink_to(outside / "db" / "ext.lance" / child)
    return {"wh": wh, "outside": outside, "ext": outside / "db" / "ext.lance", "log": base / "engine.log"}


@pytest.fixture(scope="module")
def lake(s3):
    """The operator's catalog `ops3` over s3://<bucket>/wh (db.t) with keys, and a table beside
    the warehouse in the same bucket, s3://<bucket>/outside/secret.lance (3 versions)."""
    bucket = s3.fresh_bucket("boundary")
    degraded_table(f"{bucket}/wh/db/t.lance", fragments=3, rows_per_fragment=10, storage_options=s3.storage_options)
    degraded_table(f"{bucket}/outside/secret.lance", fragments=4, rows_per_fragment=10, appends=2,
                   storage_options=s3.storage_options)
    conf = {"spark.sql.catalog.ops3": CATALOG_CLASS, "spark.sql.catalog.ops3.warehouse": f"{bucket}/wh",
            **{f"spark.sql.catalog.ops3.storage.{k}": v for k, v in s3.storage_options.items()}}
    return {"bucket": bucket, "name": bucket[len("s3://"):], "conf": conf, "server": s3,
            "secret": f"{bucket}/outside/secret.lance"}


@pytest.fixture(scope="module")
def spark(places, lake):
    session = lance_session("local[2]", "warehouse-boundary", str(places["wh"]),
                            {"spark.lance.compact.engine.log": str(places["log"]), **NO_VERSION_FLOOR, **lake["conf"]})
    yield session
    session.stop()


def snapshot(path: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """The table's version and every file under it (size, mtime)."""
    files = {}
    for root, _, names in os.walk(path):
        for n in names:
            st = os.stat(os.path.join(root, n))
            files[os.path.relpath(os.path.join(root, n), path)] = (st.st_size, st.st_mtime_ns)
    return lance.dataset(str(path)).version, files


# The ways to a table: {} is the table's identifier, {path} its path in the warehouse.
TABLE_STATEMENTS = [
    "SELECT * FROM lance.{}",
    "SELECT count(*) FROM lance.{}",
    "SELECT * FROM lance.{} VERSION AS OF 1",
    "DESCRIBE TABLE lance.{}",
    "SHOW TBLPROPERTIES lance.{}",
    "SELECT * FROM lance.{}.fragments",
    "SELECT * FROM lance.{}.versions",
    "SELECT * FROM lance.{}.indices",
    "ALTER TABLE lance.{} SET TBLPROPERTIES ('lance_compact.maintain.priority'='3')",
    "ALTER TABLE lance.{} UNSET TBLPROPERTIES ('lance_compact.maintain.priority')",
    "CALL lance.compact(table => '{}', target_rows_per_fragment => 100)",
    "CALL lance.plan_compaction(table => '{}')",
    "CALL lance.describe_layout(table => '{}')",
    "CALL lance.cleanup(table => '{}', older_than => '0 seconds')",
    "CALL lance.optimize_indices(table => '{}')",
    "CALL lance.maintain(table => '{}', older_than => '0 seconds')",
    "CALL lance.system.compact(table => '{}', target_rows_per_fragment => 100)",
    "CALL lance.compact(table => '{path}', target_rows_per_fragment => 100)",
    "CALL lance.cleanup(table => '{path}', older_than => '0 seconds')",
    "CALL lance.maintain(table => 'lance.{}', older_than => '0 seconds')",
    "DROP INDEX id_idx ON lance.{}",
    "DROP INDEX IF EXISTS id_idx ON lance.{}",
    "CREATE INDEX IF NOT EXISTS cat_idx ON lance.{} USING BITMAP (category)",
    "CALL lance.drop_index(table => '{}', name => 'id_idx')",
    "CALL lance.drop_index(table => '{path}', name => 'id_idx')",
]
LINKED = {"table_link": ("db.link", "db/link.lance"), "namespace_link": ("linkns.ext", "linkns/ext.lance"),
          "folders_link": ("db.inner", "db/inner.lance")}


@pytest.mark.parametrize("kind", sorted(LINKED))
@pytest.mark.parametrize("statement", TABLE_STATEMENTS)
def test_every_way_to_a_linked_table_is_refused(spark, places, kind, statement):
    ident, rel = LINKED[kind]
    before = snapshot(places["ext"])
    sql = statement.replace("{path}", str(places["wh"] / rel)).replace("{}", ident)
    with pytest.raises(Exception) as e:
        spark.sql(sql).collect()
    assert OUTSIDE in str(e.value), (sql, str(e.value)[:2000])
    assert snapshot(places["ext"]) == before


def test_listings_leave_linked_tables_and_namespaces_out(spark, places):
    before = snapshot(places["ext"])
    assert [r.tableName for r in spark.sql("SHOW TABLES IN lance.db").collect()] == ["t"]
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN lance").collect()] == ["db"]
    for kind in ("table_health", "maintenance_history"):
        tables = {(r.namespace, r.table) for r in spark.sql(f"SELECT * FROM lance.system.{kind}").collect()}
        assert tables == {("db", "t")}, (kind, tables)
    for args in ("namespace => 'db', older_than => '0 seconds'", "older_than => '0 seconds'"):
        rows = spark.sql(f"CALL lance.maintain_warehouse({args})").collect()
        assert {r.table for r in rows} <= {"db.t"}, rows
    assert snapshot(places["ext"]) == before


@pytest.mark.parametrize("statement", [
    "SHOW TABLES IN lance.linkns",
    "SHOW NAMESPACES IN lance.linkns",
    "DESCRIBE NAMESPACE lance.linkns",
    "CREATE NAMESPACE lance.linkns.sub",
    "DROP NAMESPACE lance.linkns",
    "CALL lance.maintain_warehouse(namespace => 'linkns', older_than => '0 seconds')",
    "SELECT * FROM lance.system.table_health WHERE namespace = 'linkns'",
])
def test_namespace_commands_on_a_linked_namespace(spark, places, statement):
    before = snapshot(places["ext"])
    listing_before = sorted(os.listdir(places["outside"] / "db"))
    if "table_health" in statement:  # a listing: left out, not refused
        assert spark.sql(statement).collect() == []
    else:
        with pytest.raises(Exception) as e:
            spark.sql(statement).collect()
        assert OUTSIDE in str(e.value), (statement, str(e.value)[:2000])
    assert snapshot(places["ext"]) == before
    assert sorted(os.listdir(places["outside"] / "db")) == listing_before and (places["wh"] / "linkns").is_symlink()


@pytest.mark.parametrize("name,message", [
    ("db.`t.lance`", COLLIDES), ("db.`t.lance`.`_versions`", COLLIDES), ("`_versions`", COLLIDES),
    ("db.`_indices`", COLLIDES), ("`x.lance`", COLLIDES), ("`.hidden`", COLLIDES),
    ("`a\nb`", CONTROL), ("`tab\there`", CONTROL), ("`del\x7f`", CONTROL),
])
def test_create_namespace_refuses_layout_names_and_control_characters(spark, places, name, message):
    table = places["wh"] / "db" / "t.lance"
    before = snapshot(table)
    folders = sorted(p for p in places["wh"].rglob("*") if p.is_dir())
    with pytest.raises(Exception) as e:
        spark.sql(f"CREATE NAMESPACE lance.{name}")
    assert message in str(e.value), str(e.value)[:2000]
    assert sorted(p for p in places["wh"].rglob("*") if p.is_dir()) == folders
    assert snapshot(table) == before
    assert spark.sql("SELECT count(*) FROM lance.db.t").collect()[0][0] == lance.dataset(str(table)).count_rows()


@pytest.mark.parametrize("statement", [
    "SHOW TABLES IN lance.db.`t.lance`",
    "DROP NAMESPACE lance.db.`t.lance`.`_versions`",
    "DROP NAMESPACE lance.db.`t.lance` CASCADE",
    "DESCRIBE NAMESPACE lance.db.`t.lance`",
    "SELECT * FROM lance.db.`t.lance`.`_versions`",
])
def test_a_tables_folders_are_no_namespace(spark, places, statement):
    table = places["wh"] / "db" / "t.lance"
    before = snapshot(table)
    with pytest.raises(Exception) as e:
        spark.sql(statement).collect()
    assert LAYOUT in str(e.value), (statement, str(e.value)[:2000])
    assert snapshot(table) == before


@pytest.mark.parametrize("statement", [
    "SELECT * FROM lance.db.`t\nINFO forged line`",
    "SELECT * FROM lance.`db\r\nINFO forged line`.t",
    "ALTER TABLE lance.db.`t\nINFO forged line` SET TBLPROPERTIES ('lance_compact.maintain.priority'='3')",
    "SHOW TABLES IN lance.`db\nINFO forged line`",
    "CALL lance.compact(table => 'db.t\nINFO forged line')",
    "CALL lance.describe_layout(table => 'db -- x\nINFO forged line.t')",
    "CALL lance.maintain(table => '{wh}/db/t.lance\nINFO forged line')",
    "CALL lance.maintain_warehouse(namespace => 'db\nINFO forged line')",
    "CALL lance.`compact\nINFO forged line`(table => 'db.t')",
])
def test_control_characters_are_refused_before_anything_logs_them(spark, places, statement):
    table = places["wh"] / "db" / "t.lance"
    before = snapshot(table)
    with pytest.raises(Exception) as e:
        spark.sql(statement.replace("{wh}", str(places["wh"]))).collect()
    assert CONTROL in str(e.value), (statement, str(e.value)[:2000])
    assert "\\n" in str(e.value) and "\nINFO forged line" not in str(e.value)
    assert snapshot(table) == before
    log = places["log"].read_text() if places["log"].exists() else ""
    assert "forged line" not in log


# ---- spellings Lance reads as another location (pylance 14.0.2, ../shared/NOTES.md) ----

REFUSED = ("is outside the warehouse", "is refused", "escapes the warehouse", LAYOUT)
# On local disk a plain path is read literally: '%2e%2e' there is a folder of that name, which
# does not exist (Lance decodes only file:// URLs, which the catalog decodes once itself).
LITERAL = ("does not exist", "cannot be found", "SCHEMA_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND")
# A name (namespace part) that reaches `outside` from the warehouse when decoded.
NAME_SPELLINGS = ["`%2e%2e`", "`%2E%2E`", "`.%2e`", "`%2e.`", "`%252e%252e`", "`..%2foutside`.x", "`..\\outside`.x"]


def path_spellings(root: str, rel: str, scheme: str = "", bucket: str = "") -> list[str]:
    """Each way of writing ``<root>/../<rel>`` that some parser reads as that (root: the warehouse)."""
    out = [f"{root}/{e}/{rel}" for e in ("%2e%2e", "%2E%2E", ".%2e", "%2e.", "%252e%252e")]
    out += [f"{root}/..%2f{rel}", f"{root}//../{rel}", f"{root}/./../{rel}", root + "\\..\\" + rel.replace("/", "\\"),
            f"{root}/db/t.lance?/../../{rel}", f"{root}/db#/../../{rel}"]
    if scheme:  # an object store: the scheme's and the bucket's case
        out += [f"{scheme.upper()}://{bucket}/{rel}", f"{scheme.upper()}://{bucket}/wh/%2e%2e/{rel}",
                f"{scheme}://{bucket.upper()}/{rel}"]
    else:  # a local warehouse: the same as file: URIs, which Lance decodes
        out += [f"file://{root}/%2e%2e/{rel}", f"FILE://{root}/%2E%2E/{rel}", f"file://{root}/.%2e/{rel}",
                f"file:{root}/%2e%2e/{rel}"]
    return out


def literal(text: str) -> str:
    """``text`` as the inside of a SQL string literal (Spark unescapes backslashes there)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def by_name(catalog: str, name: str, create: bool = True) -> list[str]:
    """Every statement that takes a table or namespace by identifier (name: a spelled
    namespace, then the rest), and namespace commands on the spelled namespace."""
    ident, ns = f"{catalog}.{name}", name.rsplit(".", 1)[0]
    return [f"SELECT * FROM {ident}", f"SELECT count(*) FROM {ident} VERSION AS OF 1",
            f"DESCRIBE TABLE {ident}", f"SELECT * FROM {ident}.versions",
            f"ALTER TABLE {ident} SET TBLPROPERTIES ('lance_compact.maintain.priority'='3')",
            f"CALL {catalog}.describe_layout(table => '{literal(name)}')",
            f"CALL {catalog}.cleanup(table => '{literal(name)}', older_than => '0 seconds')",
            f"SHOW TABLES IN {catalog}.{ns}", f"SHOW NAMESPACES IN {catalog}.{ns}",
            f"DROP NAMESPACE {catalog}.{ns}", f"DESCRIBE NAMESPACE {catalog}.{ns}",
            f"CALL {catalog}.maintain_warehouse(namespace => '{literal(ns)}', older_than => '0 seconds')",
            ] + ([f"CREATE NAMESPACE {catalog}.{ns}", f"CREATE NAMESPACE {catalog}.{ns}.made"] if create else [])


def by_path(catalog: str, path: str) -> list[str]:
    """Every procedure, given the table as a path."""
    calls = ("compact(table => '{}', target_rows_per_fragment => 100)", "plan_compaction(table => '{}')",
             "describe_layout(table => '{}')", "cleanup(table => '{}', older_than => '0 seconds')",
             "optimize_indices(table => '{}')", "maintain(table => '{}', older_than => '0 seconds')",
             "system.compact(table => '{}')")
    return [f"CALL {catalog}." + c.replace("{}", literal(path)) for c in calls]


def s3_state(lake) -> tuple[int, dict[str, tuple[int, str]]]:
    """The outside table's version and every object of the bucket outside the warehouse."""
    import boto3

    server = lake["server"]
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=server.storage_options["aws_access_key_id"],
                          aws_secret_access_key=server.storage_options["aws_secret_access_key"])
    objects = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=lake["name"]):
        for o in page.get("Contents", []):
            if not o["Key"].startswith("wh/"):
                objects[o["Key"]] = (o["Size"], o["ETag"])
    return lance.dataset(lake["secret"], storage_options=server.storage_options).version, objects


def refused_everywhere(spark, statements: list[str], literal_ok: bool) -> list[str]:
    """The statements that were not refused with a clear message (with what they said)."""
    wrong = []
    for sql in statements:
        try:
            rows = spark.sql(sql).collect()
            wrong.append(f"{sql}\n  -> answered {rows[:3]}")
        except Exception as e:
            text = str(e)
            if not any(m in text for m in REFUSED + (LITERAL if literal_ok else ())):
                wrong.append(f"{sql}\n  -> {text[:600]}")
    return wrong


@pytest.mark.parametrize("spelling", NAME_SPELLINGS)
def test_spelled_names_on_s3_reach_nothing_outside(spark, lake, spelling):
    """``SELECT * FROM ops3.`%2e%2e`.outside.secret`` returned the rows of a table beside the
    warehouse; now every entry point refuses each spelling before Lance sees it, and the
    outside table's objects are not even requested."""
    name = f"{spelling}.outside.secret" if spelling.endswith("`") else spelling.replace(".x", ".secret")
    before = s3_state(lake)
    log = lake["server"].log
    mark = log.stat().st_size
    wrong = refused_everywhere(spark, by_name("ops3", name), literal_ok=False)
    requested = [line for line in log.read_text(errors="replace")[mark:].splitlines()
                 if f"/{lake['name']}/outside" in line or f"prefix=outside" in line]
    assert wrong == [], "\n".join(wrong)
    assert requested == [], requested[:5]
    assert s3_state(lake) == before


@pytest.mark.parametrize("index", range(len(path_spellings("s3://b/wh", "x", "s3", "b"))))
def test_spelled_paths_on_s3_reach_nothing_outside(spark, lake, index):
    """``CALL ops3.cleanup(table => 's3://<bucket>/wh/%2E%2E/outside/secret.lance')`` removed the
    outside table's versions; every procedure now refuses every spelling of that path."""
    path = path_spellings(f"{lake['bucket']}/wh", "outside/secret.lance", "s3", lake["name"])[index]
    before = s3_state(lake)
    log = lake["server"].log
    mark = log.stat().st_size
    wrong = refused_everywhere(spark, by_path("ops3", path), literal_ok=False)
    requested = [line for line in log.read_text(errors="replace")[mark:].splitlines()
                 if f"/{lake['name']}/outside" in line or "prefix=outside" in line]
    assert wrong == [], "\n".join(wrong)
    assert requested == [], requested[:5]
    assert s3_state(lake) == before


@pytest.mark.parametrize("index", range(len(path_spellings("/wh", "x"))))
def test_spelled_paths_and_names_on_local_disk_reach_nothing_outside(spark, places, index):
    """The same on a local warehouse: plain paths are read literally (a folder named '%2e%2e'
    does not exist); file: URIs are decoded once by the catalog and then checked."""
    wh = str(places["wh"])
    path = path_spellings(wh, "outside/db/ext.lance")[index]
    before = snapshot(places["ext"])
    statements = by_path("lance", path)
    if index < len(NAME_SPELLINGS):  # a namespace named '%2e%2e' is a literal folder here: not created
        spelling = NAME_SPELLINGS[index]
        name = f"{spelling}.outside.db.ext" if spelling.endswith("`") else spelling.replace(".x", ".db.ext")
        statements += by_name("lance", name, create=False)
    wrong = refused_everywhere(spark, statements, literal_ok=True)
    assert wrong == [], "\n".join(wrong)
    assert snapshot(places["ext"]) == before
    assert sorted(os.listdir(places["wh"])) == sorted(["db", "linkns"])


def test_spellings_inside_the_warehouse_reach_lance_in_normal_form(spark, lake):
    """``S3://``, doubled slashes and '.' segments that stay inside are written the one way
    Lance reads as written (what the result names is what was opened)."""
    for path in (f"S3://{lake['name']}/wh/db/t.lance", f"{lake['bucket']}/wh//db/./t.lance/"):
        row = spark.sql(f"CALL ops3.describe_layout(table => '{path}')").collect()[0]
        assert row.rows > 0  # Lance itself refuses '//' in an S3 URL: it got the normal form
    with pytest.raises(Exception) as e:
        spark.sql("CREATE NAMESPACE ops3.`50%2fx`").collect()
    assert "namespace '50%2fx' is refused in catalog ops3: it holds the percent-escape '%2f'" in str(e.value)


def test_listings_leave_out_folders_whose_names_lance_would_decode(spark, lake):
    """A folder literally named '%2e%2e' in the warehouse (written by someone else) names no
    namespace: SHOW NAMESPACES, the system tables and maintain_warehouse leave it out."""
    import boto3

    server = lake["server"]
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=server.storage_options["aws_access_key_id"],
                          aws_secret_access_key=server.storage_options["aws_secret_access_key"])
    client.put_object(Bucket=lake["name"], Key="wh/%2e%2e/outside/secret.lance/_versions/1.manifest", Body=b"")
    try:
        before = s3_state(lake)
        assert [r[0] for r in spark.sql("SHOW NAMESPACES IN ops3").collect()] == ["db"]
        health = {(r.namespace, r.table) for r in spark.sql("SELECT * FROM ops3.system.table_health").collect()}
        assert health == {("db", "t")}, health
        rows = spark.sql("CALL ops3.maintain_warehouse(older_than => '0 seconds', dry_run => true)").collect()
        assert {r.table for r in rows} <= {"db.t"}, rows
        assert s3_state(lake) == before
    finally:
        client.delete_object(Bucket=lake["name"], Key="wh/%2e%2e/outside/secret.lance/_versions/1.manifest")


# ---- versions and name lengths ----

@pytest.mark.parametrize("clause,message", [
    ("VERSION AS OF '-1'", "VERSION AS OF '-1' is not a version of the table"),
    ("VERSION AS OF '0'", "VERSION AS OF '0' is not a version of the table"),
    ("VERSION AS OF '99999999999999999999'", "is not a version of the table"),
    ("VERSION AS OF 9223372036854775807", "version 9223372036854775807 does not exist (the table is at version"),
    ("VERSION AS OF 424242", "version 424242 does not exist (the table is at version"),
    ("TIMESTAMP AS OF '1970-01-01 00:00:00'", "TIMESTAMP AS OF 1970-01-01T00:00:00Z is not supported"),
    ("TIMESTAMP AS OF '2999-01-01 00:00:00'", "TIMESTAMP AS OF 2999-01-01T00:00:00Z is not supported"),
])
def test_versions_a_table_cannot_have_are_refused_naming_table_and_version(spark, places, clause, message):
    spark.sql("SET spark.sql.session.timeZone=UTC")
    with pytest.raises(Exception) as e:
        spark.sql(f"SELECT * FROM lance.db.t {clause}").collect()
    text = str(e.value)
    assert message in text and "lance.db.t" in text, text[:2000]


@pytest.mark.parametrize("statement,limit", [
    ("CREATE NAMESPACE lance.{n300}", "at most 255 bytes"),
    ("CREATE NAMESPACE ops3.{n300}", "at most 255 bytes"),
    ("SHOW TABLES IN lance.{n300}", "at most 255 bytes"),
    ("SELECT * FROM lance.db.{n300}", "249 for a table name"),
    ("SELECT * FROM ops3.db.{n300}", "249 for a table name"),
    ("CALL lance.compact(table => 'db.{n300}')", "249 for a table name"),
    ("CALL lance.describe_layout(table => '{n300}.t')", "at most 255 bytes"),
])
def test_names_longer_than_the_limit_are_refused_naming_it(spark, places, statement, limit):
    folders = sorted(p for p in places["wh"].rglob("*") if p.is_dir())
    with pytest.raises(Exception) as e:
        spark.sql(statement.replace("{n300}", "n" * 300)).collect()
    text = str(e.value)
    assert limit in text and "is too long" in text and "o45.sql" not in text and "Py4J" not in text, text[:2000]
    assert sorted(p for p in places["wh"].rglob("*") if p.is_dir()) == folders


# ---- the engine's own check, on the location it opens (no Spark needed) ----

@pytest.mark.parametrize("scheme,bucket", [("s3", "opbucket"), ("gs", "opbucket"), ("az", "opcontainer")])
def test_the_engine_refuses_what_the_boundary_did_not_see(scheme, bucket):
    """Every request's locations are checked again in the engine: spelled so Lance would read
    another location, or outside the warehouse the request carries, they are refused before
    anything opens them; the normal form inside passes."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime.envelope import Envelope
    from lance_compact.runtime.tables import dataset

    root = f"{scheme}://{bucket}/wh"
    inside = f"{root}/db/t.lance"
    assert Envelope.parse("layout", {"table": "c.db.t", "uri": inside, "warehouse": root}).target.uri == inside
    for uri in path_spellings(root, "outside/secret.lance", scheme, bucket) + [
            f"{root}/db/./t.lance", f"{root}//db/t.lance", f"{scheme}://{bucket}/outside/secret.lance",
            f"{scheme}://{bucket}/wha/t.lance", f"{scheme}://other/wh/db/t.lance", "/local/wh/db/t.lance"]:
        for request in ({"table": "c.db.t", "uri": uri, "warehouse": root},
                        {"tables": [{"namespace": "db", "table": "t", "uri": uri}], "warehouse": root},
                        {"root": uri, "warehouse": root, "op": "list_tables"}):
            with pytest.raises(CompactionError) as e:
                Envelope.parse("layout", request)
            assert "is refused" in e.value.message or "is outside the warehouse" in e.value.message, (uri, e.value)
        if any(c in uri for c in "%?#\\") or "/./" in uri or "//" in uri.partition("://")[2] or uri[:2].isupper():
            with pytest.raises(CompactionError, match="is refused"):
                dataset(uri)  # refused before Lance parses it


def test_the_engine_checks_local_locations_by_their_real_path(places):
    from lance_compact.errors import CompactionError
    from lance_compact.runtime.envelope import Envelope

    wh = str(places["wh"])
    assert Envelope.parse("layout", {"uri": f"{wh}/db/t.lance", "warehouse": wh}).target is not None
    for uri in (f"{wh}/db/link.lance", f"{wh}/../outside/db/ext.lance", str(places["ext"]),
                f"file://{wh}/%2e%2e/outside/db/ext.lance"):
        with pytest.raises(CompactionError) as e:
            Envelope.parse("layout", {"uri": uri, "warehouse": wh})
        assert "is refused" in e.value.message or "is outside the warehouse" in e.value.message, (uri, e.value)
