"""The warehouse at scale, on a small warehouse of ten tables in two namespaces: the system
tables read every table side by side and agree with pylance; filters on namespace, table and
version are pushed down (the engine log names the tables it opened) and change no answer;
maintain_warehouse's max_duration counts from the call's start, starts no step once spent,
and says which tables it left."""
import re
import shutil
import tempfile
import time
from pathlib import Path

import lance
import pytest

from oracle import batch, degraded_table

ENGINE_LOG = Path(tempfile.mkdtemp(prefix="scale-engine-")) / "engine.log"
# Each maintenance step of this module's driver pauses 400 ms first (a test-only slow-down),
# so a short max_duration leaves some tables unstarted however fast the machine is.
SPARK_CONF = {"spark.lance.compact.engine.log": str(ENGINE_LOG),
              "spark.lance.compact.test.driverPauseMs": "400"}
NAMES = [("ns0", f"t{i}") for i in range(6)] + [("ns1", f"t{i}") for i in range(4)]


@pytest.fixture(scope="module")
def tables(warehouse):
    paths = {}
    for i, (ns, t) in enumerate(NAMES):
        path = warehouse / ns / f"{t}.lance"
        shutil.rmtree(path, ignore_errors=True)
        if i % 3 == 2:  # a healthy one: one fragment
            lance.write_dataset(batch(0, 300), str(path))
        else:
            degraded_table(str(path), fragments=8 + i, rows_per_fragment=30, seed=i)
        lance.write_dataset(batch(10_000, 20), str(path), mode="append")  # one more version
        paths[(ns, t)] = path
    return paths


def _opened(kind: str, since: int) -> list[str]:
    """The tables the engine said it opened for ``kind`` after byte ``since`` of its log."""
    text = ENGINE_LOG.read_text()[since:]
    lines = re.findall(rf"system table {kind}: opening (\d+) of (\d+) listed tables(?: \((.*)\))?", text)
    assert lines, text[-2000:]
    return sorted(x for x in lines[-1][2].split(", ") if x)


def _listed(what: str, since: int) -> int:
    """How many namespaces the catalog listed for the last ``what`` ('system table
    table_health' or 'maintain_warehouse') after byte ``since`` of the engine's log."""
    text = ENGINE_LOG.read_text()[since:]
    counts = re.findall(rf"{what}: [^\n]*; the catalog listed (\d+) namespaces", text)
    assert counts, text[-2000:]
    return int(counts[-1])


def _log_size() -> int:
    return ENGINE_LOG.stat().st_size if ENGINE_LOG.exists() else 0


def test_health_of_every_table_agrees_with_pylance(spark, tables):
    rows = {(r.namespace, r.table): r for r in spark.sql("SELECT * FROM lance.system.table_health").collect()}
    assert set(tables) <= set(rows)
    for key, path in tables.items():
        ds = lance.dataset(str(path))
        r = rows[key]
        assert r.error is None, r.error
        assert (r.version, r.fragments, r.rows) == (ds.version, len(ds.get_fragments()), ds.count_rows())
        assert (r.health_score == 100) == (not r.due)


STABLE = "namespace, `table`, version, fragments, `rows`, health_score, due, small_fragments"


def test_health_filters_are_pushed_down_and_change_no_answer(spark, tables):
    everything = spark.sql(f"SELECT {STABLE} FROM lance.system.table_health").collect()
    expected = sorted(r for r in everything if r.namespace == "ns0" and r.table in ("t1", "t2"))
    since = _log_size()
    query = f"SELECT {STABLE} FROM lance.system.table_health WHERE namespace = 'ns0' AND `table` IN ('t1', 't2')"
    got = sorted(spark.sql(query).collect())
    assert got == expected and len(got) == 2
    assert _opened("table_health", since) == ["ns0.t1", "ns0.t2"]
    # a filter the engine does not read (OR) is applied by Spark after the scan: still the same
    since = _log_size()
    got = sorted(spark.sql(f"SELECT {STABLE} FROM lance.system.table_health "
                           "WHERE namespace = 'ns0' AND (`table` = 't1' OR `table` = 't2')").collect())
    assert got == expected
    assert _opened("table_health", since) == [f"ns0.t{i}" for i in range(6)]


def test_history_filters_on_tables_and_versions(spark, tables):
    everything = spark.sql("SELECT * FROM lance.system.maintenance_history").collect()
    for where, keep in [
        ("namespace = 'ns1' AND `table` = 't1' AND version >= 2 AND version < 4",
         lambda r: r.namespace == "ns1" and r.table == "t1" and 2 <= r.version < 4),
        ("`table` IN ('t0', 't3') AND version > 1", lambda r: r.table in ("t0", "t3") and r.version > 1),
        ("namespace = 'ns0' AND version = 1", lambda r: r.namespace == "ns0" and r.version == 1),
        ("namespace = 'nope'", lambda r: False),
    ]:
        since = _log_size()
        got = spark.sql(f"SELECT * FROM lance.system.maintenance_history WHERE {where}").collect()
        expected = [r for r in everything if keep(r)]
        assert sorted(got) == sorted(expected), where
        opened = _opened("maintenance_history", since)
        assert set(opened) == {f"{r.namespace}.{r.table}" for r in expected}, (where, opened)
    assert any(r.version >= 2 for r in everything if r.namespace == "ns1" and r.table == "t1")


def test_max_duration_counts_from_the_call_and_leaves_tables_unstarted(spark, tables):
    before = {k: lance.dataset(str(p)).version for k, p in tables.items()}
    clock = time.monotonic()
    rows = spark.sql("CALL lance.maintain_warehouse(target_rows_per_fragment => 300, older_than => '7 days', "
                     "parallelism => 1, max_duration => '2 seconds')").collect()
    took = time.monotonic() - clock
    by = {}
    for r in rows:
        by.setdefault(r.table, []).append(r)
    ran = {t for t, rs in by.items() if any(r.ran for r in rs)}
    left = {t for t, rs in by.items() if any("max_duration budget (2 s) was spent" in (r.reason or "") for r in rs)}
    assert ran, rows
    assert left - ran, rows
    for t in left:
        for r in by[t]:
            if r.step == "all":
                assert re.search(r"spent after \d+ of \d+ (due )?tables", r.reason) and "not " in r.reason, r.reason
    # the budget plus what was in flight: at most one table's steps (parallelism 1), each
    # paused 400 ms and compacting a few small fragments
    assert took < 2 + 20, took
    for t in set(by) - ran:
        ns, name = t.split(".")
        assert lance.dataset(str(tables[(ns, name)])).version == before[(ns, name)]


def test_a_namespace_filter_lists_only_that_namespace(spark, tables):
    """table_health WHERE namespace = 'ns0' and maintain_warehouse(namespace => 'ns0') list
    the warehouse's root and ns0 (or ns0 alone), not every namespace: the catalog says how many
    it listed in the request and the engine's log shows it."""
    since = _log_size()
    everything = spark.sql(f"SELECT {STABLE} FROM lance.system.table_health").collect()
    namespaces = {r.namespace for r in everything}
    assert {"ns0", "ns1"} <= namespaces
    assert _listed("system table table_health", since) >= 3  # the root, ns0, ns1 (and db, ...)
    since = _log_size()
    got = spark.sql(f"SELECT {STABLE} FROM lance.system.table_health WHERE namespace = 'ns0'").collect()
    assert sorted(got) == sorted(r for r in everything if r.namespace == "ns0") and len(got) == 6
    assert _listed("system table table_health", since) == 2  # the root and ns0 (was every namespace)
    assert len(_opened("table_health", since)) == 6
    since = _log_size()
    rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'ns0', dry_run => true)").collect()
    assert {r.table.split(".")[0] for r in rows} == {"ns0"}
    assert _listed("maintain_warehouse", since) == 1  # ns0 only (was every namespace)
    since = _log_size()
    assert spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'nope'").collect() == []
    assert _listed("system table table_health", since) == 1  # the root only


def test_dry_run_reports_the_health_decisions(spark, tables):
    # the catalog's policy (no call arguments), as table_health evaluates it
    rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'ns0', dry_run => true)").collect()
    health = {r.table: r for r in spark.sql(
        "SELECT * FROM lance.system.table_health WHERE namespace = 'ns0'").collect()}
    assert {r.table for r in rows} == {f"ns0.t{i}" for i in range(6)}
    for r in rows:
        assert not r.ran
        h = health[r.table.split(".", 1)[1]]
        assert r.health_before == h.health_score
        if r.step == "all":
            assert not h.due and r.reason.startswith("skipped: healthy")
            continue
        assert r.version == h.version
        assert r.reason.startswith("due") == (r.step in h.due), (r, h.due)


def test_max_duration_counts_from_the_jvm_start_when_it_sends_one(tables):
    """The JVM sends when the call started (before it listed the tables): a budget already
    spent by then evaluates and starts nothing, and every row says so; a start that is not
    plausible (in the future) is ignored."""
    import json

    from lance_compact.maintenance.warehouse_maintenance import maintain_warehouse
    from lance_compact.runtime.envelope import Envelope

    listed = [{"namespace": ns, "table": t, "uri": str(p)} for (ns, t), p in sorted(tables.items())]
    before = {k: lance.dataset(str(p)).version for k, p in tables.items()}
    request = {"tables": listed, "params": {"max_duration": "5 seconds", "dry_run": True,
                                            "target_rows_per_fragment": 300},
               "started_at_ms": int(time.time() * 1000) - 6_000}
    clock = time.monotonic()
    out = maintain_warehouse(Envelope.parse("maintain_warehouse", json.dumps(request)), run_packed=None)
    assert time.monotonic() - clock < 3
    assert len(out) == len(listed)
    for t in out:
        assert [r["step"] for r in t.rows] == ["all"] and t.health is None
        assert t.rows[0]["reason"] == ("left: the max_duration budget (5 s) was spent after 0 of "
                                       f"{len(listed)} tables were evaluated; not evaluated, not started")
    request["started_at_ms"] = int(time.time() * 1000) + 60_000  # a clock ahead: the receipt counts
    out = maintain_warehouse(Envelope.parse("maintain_warehouse", json.dumps(request)), run_packed=None)
    assert all(t.health is not None for t in out)
    assert any(r["step"] == "compact" and r["reason"].startswith("due") for t in out for r in t.rows)
    assert {k: lance.dataset(str(p)).version for k, p in tables.items()} == before


def test_on_s3_health_agrees_and_filters_read_only_what_is_asked(spark, s3):
    """The same on the S3-compatible server (a second catalog of the session): every table's
    health agrees with pylance; the filtered health and history equal the unfiltered ones
    filtered, and only the tables asked for are opened."""
    import os

    from lance_compact.api import CATALOG_CLASS

    wh = s3.create_bucket(f"scale-{os.getpid()}-{int(time.time()) % 100000}") + "/wh"
    opts = s3.storage_options
    uris = {}
    for i, (ns, t) in enumerate([("a", "t0"), ("a", "t1"), ("a", "t2"), ("b", "t0"), ("b", "t1")]):
        uris[(ns, t)] = f"{wh}/{ns}/{t}.lance"
        degraded_table(uris[(ns, t)], fragments=6 + i, rows_per_fragment=20, seed=i, storage_options=opts)
    spark.conf.set("spark.sql.catalog.scales3", CATALOG_CLASS)
    spark.conf.set("spark.sql.catalog.scales3.warehouse", wh)
    for k, v in opts.items():
        spark.conf.set(f"spark.sql.catalog.scales3.storage.{k}", v)
    rows = {(r.namespace, r.table): r for r in spark.sql("SELECT * FROM scales3.system.table_health").collect()}
    assert set(rows) == set(uris)
    for key, uri in uris.items():
        ds = lance.dataset(uri, storage_options=opts)
        r = rows[key]
        assert r.error is None and (r.version, r.fragments, r.rows) == (ds.version, len(ds.get_fragments()),
                                                                         ds.count_rows())
    everything = spark.sql(f"SELECT {STABLE} FROM scales3.system.table_health").collect()
    since = _log_size()
    got = spark.sql(f"SELECT {STABLE} FROM scales3.system.table_health "
                    "WHERE namespace = 'b' AND `table` IN ('t1', 'zz')").collect()
    assert got == [r for r in everything if r.namespace == "b" and r.table == "t1"]
    assert _opened("table_health", since) == ["b.t1"]
    assert _listed("system table table_health", since) == 2  # the root and b, not a
    since = _log_size()
    rows = spark.sql("CALL scales3.maintain_warehouse(namespace => 'b', dry_run => true)").collect()
    assert {r.table for r in rows} == {"b.t0", "b.t1"} and not [r for r in rows if r.ran]
    assert _listed("maintain_warehouse", since) == 1
    history = spark.sql("SELECT * FROM scales3.system.maintenance_history").collect()
    since = _log_size()
    got = spark.sql("SELECT * FROM scales3.system.maintenance_history "
                    "WHERE `table` = 't0' AND version <= 2").collect()
    assert sorted(got) == sorted(r for r in history if r.table == "t0" and r.version <= 2) and got
    assert _opened("maintenance_history", since) == ["a.t0", "b.t0"]


# Times or measures the machine: run alone, not beside other modules (bin/test).
pytestmark = pytest.mark.serial
