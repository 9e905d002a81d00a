"""One warehouse boundary, checked on every way in. A table folder that is a symbolic link
out of the warehouse, a namespace folder that is one, and a table whose `_versions`/`data`
folders are links out are refused by SELECT (also VERSION AS OF), DESCRIBE, SHOW TBLPROPERTIES,
the metadata tables, ALTER TABLE, every procedure (by name and by path), and namespace
commands; listings (SHOW TABLES / NAMESPACES, the system tables, maintain_warehouse) leave
them out. Namespaces that would sit inside a table's folders, or hide one, are refused, and so
is any identifier with a control character, before the engine logs it. The outside table's
version and files never change."""
from __future__ import annotations

import os
from pathlib import Path

import lance
import pytest

from conftest import NO_VERSION_FLOOR, lance_session
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
    degraded_table(str(outside / "db" / "ext.lance"), fragments=6, rows_per_fragment=10, appends=2)
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
def spark(places):
    session = lance_session("local[2]", "warehouse-boundary", str(places["wh"]),
                            {"spark.lance.compact.engine.log": str(places["log"]), **NO_VERSION_FLOOR})
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
