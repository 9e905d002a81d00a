"""CALL lance.maintain_warehouse: a warehouse of tables in two namespaces -- degraded (one with
a BTREE index and unindexed appends), healthy, opted out, broken -- evaluated from health and
policy; the dry run writes nothing; the real run maintains exactly the due tables, content
exact, worst first then priority, within budgets; the broken table fails alone; PySpark equals
SQL; on S3 too; the long-running service runs two rounds, stops, and its metrics reach a sink."""
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import lance
import pytest

from conftest import ROOT, jobs_described
from oracle import batch, content, degraded_table
from index_checks import index_agrees_with_scan

# Small degraded tables: 20 fragments of 30 rows, deletions (some over the threshold).
SMALL = dict(fragments=20, rows_per_fragment=30)
ARGS = "target_rows_per_fragment => 300, older_than => '7 days'"


def _degraded(path, **extra):
    shutil.rmtree(path, ignore_errors=True)
    return degraded_table(str(path), **{**SMALL, **extra})


@pytest.fixture(scope="module")
def wh(warehouse):
    """wa: degraded (indexed, with unindexed appends), healthy, opted out; wb: degraded with
    priority 5 (as degraded as wa.degraded), broken (unreadable manifest)."""
    paths = {}
    paths["wa.degraded"] = warehouse / "wa" / "degraded.lance"
    ds = _degraded(paths["wa.degraded"])
    ds.create_scalar_index("id", index_type="BTREE")
    lance.write_dataset(batch(50_000, 60), str(paths["wa.degraded"]), mode="append", max_rows_per_file=30)
    paths["wa.healthy"] = warehouse / "wa" / "healthy.lance"
    lance.write_dataset(batch(0, 600), str(paths["wa.healthy"]))
    paths["wa.optout"] = warehouse / "wa" / "optout.lance"
    _degraded(paths["wa.optout"]).update_config({"lance_compact.maintain.enabled": "false"})
    paths["wb.degraded2"] = warehouse / "wb" / "degraded2.lance"
    ds = _degraded(paths["wb.degraded2"])
    ds.create_scalar_index("id", index_type="BTREE")
    lance.write_dataset(batch(50_000, 60), str(paths["wb.degraded2"]), mode="append", max_rows_per_file=30)
    ds = lance.dataset(str(paths["wb.degraded2"]))
    ds.update_config({"lance_compact.maintain.priority": "5"})
    broken = warehouse / "wb" / "broken.lance"
    (broken / "_versions").mkdir(parents=True)
    (broken / "_versions" / "1.manifest").write_bytes(b"not a manifest")
    return paths


def by_table(rows):
    out = {}
    for r in rows:
        out.setdefault(r.table, {})[r.step] = r
    return out


def versions(paths):
    return {t: lance.dataset(str(p)).version for t, p in paths.items()}


def test_dry_run_reports_every_table_and_writes_nothing(spark, wh):
    before = versions(wh)
    rows = spark.sql(f"CALL lance.maintain_warehouse({ARGS}, dry_run => true)").collect()
    assert versions(wh) == before
    t = by_table(rows)
    assert set(t) == {"wa.degraded", "wa.healthy", "wa.optout", "wb.degraded2", "wb.broken"}
    for name in ("wa.degraded", "wb.degraded2"):
        assert [r.step for r in rows if r.table == name] == ["compact", "optimize_indices", "cleanup"]
        assert t[name]["compact"].reason.startswith("due") and not t[name]["compact"].ran
        assert t[name]["optimize_indices"].reason.startswith("due") and "id_idx" in t[name]["optimize_indices"].reason
        assert t[name]["compact"].health_before < 100 and t[name]["compact"].health_after is None
    assert t["wa.healthy"]["all"].reason.startswith("skipped: healthy") and t["wa.healthy"]["all"].health_before == 100
    assert t["wa.optout"]["all"].reason.startswith("skipped: opted out") and "table" in t["wa.optout"]["all"].reason
    assert t["wb.broken"]["all"].error and "broken" in t["wb.broken"]["all"].error and t["wb.broken"]["all"].rank is None
    # Worst first, then priority: the two degraded tables score alike, wb's priority 5 goes first.
    assert t["wb.degraded2"]["compact"].health_before == t["wa.degraded"]["compact"].health_before
    assert t["wb.degraded2"]["compact"].rank == 1 and t["wa.degraded"]["compact"].rank == 2
    assert t["wb.degraded2"]["compact"].priority == 5
    assert [r.table for r in rows][:3] == ["wb.degraded2"] * 3
    assert t["wa.optout"]["all"].rank < t["wa.healthy"]["all"].rank  # degraded, though left alone
    ranked = sorted({(r.rank, r.health_before, -r.priority) for r in rows if r.rank is not None})
    assert [x[0] for x in ranked] == [1, 2, 3, 4] and [x[1:] for x in ranked] == sorted(x[1:] for x in ranked)


def test_budgets_leave_tables_with_a_row_saying_which(spark, wh):
    before = versions(wh)
    t = by_table(spark.sql(f"CALL lance.maintain_warehouse({ARGS}, dry_run => true, max_tables => 1)").collect())
    assert "compact" in t["wb.degraded2"] and "max_tables" in t["wa.degraded"]["all"].reason
    t = by_table(spark.sql(f"CALL lance.maintain_warehouse(namespace => 'wa', {ARGS}, dry_run => true, "
                           "max_total_rewrite_bytes => 1)").collect())
    assert set(t) == {"wa.degraded", "wa.healthy", "wa.optout"}
    assert "max_total_rewrite_bytes" in t["wa.degraded"]["all"].reason and not t["wa.degraded"]["all"].ran
    t = by_table(spark.sql(f"CALL lance.maintain_warehouse({ARGS}, dry_run => true, "
                           "max_duration => '0 seconds')").collect())
    assert "max_duration" in t["wb.degraded2"]["all"].reason and "max_duration" in t["wa.degraded"]["all"].reason
    assert versions(wh) == before


def test_pyspark_equals_sql(spark, wh):
    from lance_compact import maintain_warehouse

    def same(rows):
        return [{k: v for k, v in r.asDict().items() if k != "elapsed_ms"} for r in rows]

    sql = spark.sql("CALL lance.maintain_warehouse(namespace => 'wb', target_rows_per_fragment => 300, "
                    "dry_run => true)").collect()
    api = maintain_warehouse(spark, "wb", target_rows_per_fragment=300, dry_run=True).collect()
    assert same(api) == same(sql) and len(sql) == 4



def test_foreach_batch_helper_runs_the_warehouse_every_n_batches(spark, wh):
    from lance_compact.streaming import with_warehouse_maintenance

    written, rounds = [], []
    run = with_warehouse_maintenance(spark, lambda batch, i: written.append(i), every=2, namespace="wb",
                                     on_result=lambda i, rows: rounds.append((i, rows)),
                                     target_rows_per_fragment=300, dry_run=True)
    for i in range(3):
        run(None, i)
    assert written == [0, 1, 2] and [i for i, _ in rounds] == [0, 2]
    assert {r.table for r in rounds[0][1]} == {"wb.degraded2", "wb.broken"}

def test_the_run_maintains_exactly_the_due_tables(spark, wh):
    before = {t: lance.dataset(str(p)) for t, p in wh.items()}
    expected = {t: content(ds) for t, ds in before.items()}
    earlier = Counter(jobs_described(spark, "lance_compact maintain_warehouse "))
    rows = spark.sql(f"CALL lance.maintain_warehouse({ARGS})").collect()
    t = by_table(rows)
    after = {n: lance.dataset(str(p)) for n, p in wh.items()}
    # the Spark UI lists the run's start and one job of no tasks a maintained table (its first
    # step), not each of its steps
    marks = sorted((Counter(jobs_described(spark, "lance_compact maintain_warehouse ")) - earlier).elements())
    assert marks[0] == "lance_compact maintain_warehouse maintain_warehouse: 0 of 2 due tables done", marks
    assert sorted(m.split("; ", 1)[1] for m in marks[1:]) == ["wa.degraded: compact", "wb.degraded2: compact"], marks
    for name in ("wa.degraded", "wb.degraded2"):
        assert t[name]["compact"].ran and t[name]["optimize_indices"].ran and not t[name]["cleanup"].ran, t[name]
        assert t[name]["compact"].error is None and t[name]["compact"].bytes_rewritten > 0
        assert len(after[name].get_fragments()) < len(before[name].get_fragments())
        assert t[name]["compact"].health_after > t[name]["compact"].health_before
        assert content(after[name]) == expected[name]
        index_agrees_with_scan(after[name])
    for name in ("wa.healthy", "wa.optout"):
        assert after[name].version == before[name].version and not t[name]["all"].ran
    assert t["wb.broken"]["all"].error
    # Nothing is due any more: a second run leaves every table alone.
    again = by_table(spark.sql(f"CALL lance.maintain_warehouse({ARGS})").collect())
    assert all(s["all"].reason.startswith(("skipped", "failed")) for s in again.values()), again
    assert versions({k: v for k, v in wh.items()}) == {n: ds.version for n, ds in after.items()}


def test_a_table_that_fails_fails_alone(spark, warehouse):
    """A task that fails in the shared job fails its table only (its rewritten files removed,
    its version unchanged); the other table of the same job is compacted."""
    good, bad = warehouse / "wf" / "good.lance", warehouse / "wf" / "bad.lance"
    _degraded(good), _degraded(bad)
    v = lance.dataset(str(bad)).version
    expected = content(lance.dataset(str(good)))
    # The data files of one of bad's fragments vanish after planning can see them: its task fails.
    victim = lance.dataset(str(bad)).get_fragments()[3].metadata.files[0].path
    os.remove(bad / "data" / victim)
    t = by_table(spark.sql("CALL lance.maintain_warehouse(namespace => 'wf', target_rows_per_fragment => 300, "
                           "older_than => '7 days')").collect())
    assert t["wf.bad"]["compact"].error and not t["wf.bad"]["compact"].ran
    assert t["wf.bad"]["optimize_indices"].reason.startswith("not run")
    assert lance.dataset(str(bad)).version == v
    assert t["wf.good"]["compact"].ran and content(lance.dataset(str(good))) == expected



def _broken(path):
    """A table whose only manifest is garbage: it cannot be evaluated."""
    (path / "_versions").mkdir(parents=True)
    (path / "_versions" / "1.manifest").write_bytes(b"not a manifest")


def _tables_failed(spark) -> int:
    """The driver's maintenance.tables_failed counter (MaintenanceMetrics)."""
    return spark._jvm.io.github.lancecompact.spark.engine.MaintenanceMetrics.registry().counter(
        "tables_failed").getCount()


def test_fail_on_error_maintains_the_others_then_fails_naming_the_failed_table(spark, warehouse):
    """fail_on_error => true: the healthy-but-due table is maintained (its version advances),
    then the statement fails as LANCE_MAINTENANCE_FAILED naming the broken table and why, and
    what was committed; its rows still reach the metrics. Without it (the default) the same
    warehouse gives rows, the broken one's with its error. PySpark takes it too; a dry run
    fails as the run would, saying nothing was committed."""
    from lance_compact import maintain_warehouse

    good = warehouse / "wx" / "good.lance"
    _degraded(good)
    _broken(warehouse / "wx" / "broken.lance")
    expected = content(lance.dataset(str(good)))
    v = lance.dataset(str(good)).version
    failed_before = _tables_failed(spark)
    with pytest.raises(Exception, match="a dry run") as e:
        maintain_warehouse(spark, "wx", target_rows_per_fragment=300, dry_run=True, fail_on_error=True)
    assert "nothing was committed" in str(e.value) and lance.dataset(str(good)).version == v
    with pytest.raises(Exception) as e:
        spark.sql("CALL lance.maintain_warehouse(namespace => 'wx', target_rows_per_fragment => 300, "
                  "older_than => '7 days', fail_on_error => true)").collect()
    after = lance.dataset(str(good))
    assert after.version > v and content(after) == expected  # maintained before the failure
    message = str(e.value)
    assert e.value.getCondition() == "LANCE_MAINTENANCE_FAILED" and e.value.getSqlState() == "38000", message
    assert message.startswith("[LANCE_MAINTENANCE_FAILED] maintain_warehouse of namespace wx (catalog lance): "
                              "1 of 2 tables failed (fail_on_error => true; every other table was maintained as due): "
                              "wx.broken: the table could not be evaluated: table wx.broken: cannot open "), message
    assert "a corrupt or unreadable file" in message
    assert f"Committed for the tables that succeeded: wx.good: compact (version {after.version})" in message
    assert _tables_failed(spark) > failed_before  # the run's rows were recorded all the same
    # the default, as before: rows, the failed table's with its error
    t = by_table(maintain_warehouse(spark, "wx", target_rows_per_fragment=300).collect())
    assert t["wx.broken"]["all"].error and "corrupt" in t["wx.broken"]["all"].error
    assert t["wx.good"]["all"].reason.startswith("skipped: healthy")
    # once every table is fine, fail_on_error changes nothing
    shutil.rmtree(warehouse / "wx" / "broken.lance")
    rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'wx', fail_on_error => true)").collect()
    assert [r.table for r in rows] == ["wx.good"]


def test_fail_on_error_lists_the_first_failed_tables_and_counts_the_rest(spark, warehouse):
    for i in range(12):
        _broken(warehouse / "wz" / f"broken{i:02d}.lance")
    with pytest.raises(Exception) as e:
        spark.sql("CALL lance.maintain_warehouse(namespace => 'wz', fail_on_error => true)").collect()
    message = str(e.value)
    assert "12 of 12 tables failed" in message and "; and 2 more failed tables." in message, message
    assert sum(f"wz.broken{i:02d}: the table could not be evaluated" in message for i in range(12)) == 10
    assert "No other table was changed" in message and len(message) < 12000


def test_on_s3(spark, s3):
    """A warehouse on the S3-compatible server, as a second catalog of the same session: listed
    through Lance's object store, the degraded table maintained with its content exact, the
    healthy one skipped; no credential in any row."""
    from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY
    from lance_compact.api import CATALOG_CLASS

    wh = s3.create_bucket(f"mw-{os.getpid()}-{int(time.time()) % 100000}") + "/wh"
    opts = s3.storage_options
    degraded_table(f"{wh}/s/t.lance", storage_options=opts, **SMALL)
    lance.write_dataset(batch(0, 600), f"{wh}/s/ok.lance", storage_options=opts)
    expected = content(lance.dataset(f"{wh}/s/t.lance", storage_options=opts))
    spark.conf.set("spark.sql.catalog.lances3", CATALOG_CLASS)
    spark.conf.set("spark.sql.catalog.lances3.warehouse", wh)
    for k, v in opts.items():
        spark.conf.set(f"spark.sql.catalog.lances3.storage.{k}", v)
    rows = spark.sql(f"CALL lances3.maintain_warehouse({ARGS})").collect()
    t = by_table(rows)
    assert set(t) == {"s.t", "s.ok"}
    assert t["s.t"]["compact"].ran and t["s.t"]["compact"].error is None, t["s.t"]
    assert t["s.ok"]["all"].reason.startswith("skipped: healthy")
    after = lance.dataset(f"{wh}/s/t.lance", storage_options=opts)
    assert content(after) == expected and len(after.get_fragments()) < SMALL["fragments"]
    text = repr([r.asDict() for r in rows])
    assert ACCESS_KEY_ID not in text and SECRET_ACCESS_KEY not in text

def _service(wh, *args):
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(wh),
                             "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                             "--param", "target_rows_per_fragment=300", "--param", "older_than=7 days", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=wh)


def test_the_service_runs_rounds_backs_off_stops_and_reports_metrics(tmp_path):
    """Two bounded rounds: the degraded table is maintained in the first and left alone in the
    second (minimum interval), the broken one fails and is backed off; with --param
    fail_on_error=true the service then exits 1 naming it; the metrics reach a CSV sink. A
    second service stops cleanly on SIGTERM between rounds (exit 0)."""
    import json

    wh = tmp_path / "wh"
    _degraded(wh / "ws" / "t.lance")
    expected = content(lance.dataset(str(wh / "ws" / "t.lance")))
    (wh / "ws" / "broken.lance" / "_versions").mkdir(parents=True)
    (wh / "ws" / "broken.lance" / "_versions" / "1.manifest").write_bytes(b"garbage")
    csv = tmp_path / "metrics"
    csv.mkdir()
    sink = "spark.metrics.conf.*.sink.csv"
    bounded = _service(wh, "--rounds", "2", "--every", "1s", "--min-interval", "1h", "--backoff", "1h",
                       "--param", "fail_on_error=true",
                       "--conf", f"{sink}.class=org.apache.spark.metrics.sink.CsvSink",
                       "--conf", f"{sink}.period=1", "--conf", f"{sink}.unit=seconds",
                       "--conf", f"{sink}.directory={csv}")
    other = tmp_path / "other"
    _degraded(other / "ws" / "u.lance")
    endless = _service(other, "--every", "1h")
    try:
        out, err = bounded.communicate(timeout=240)
        # fail_on_error: the rounds go on as always (back-off included), the exit status says a table failed
        assert bounded.returncode == 1, err[-3000:]
        reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        first, second, stopped = reports
        assert first["maintained"] == ["ws.t"] and first["failed"] == ["ws.broken"], first
        assert list(first["errors"]) == ["ws.broken"] and first["errors"]["ws.broken"].startswith("all: "), first
        assert second["maintained"] == [] and second["failed"] == [] and second["errors"] == {}
        assert "maintained" in second["excluded"]["ws.t"] and "backed off" in second["excluded"]["ws.broken"]
        assert stopped == {"stopped": True, "rounds": 2, "signal": False, "failed": ["ws.broken"], "failed_rounds": 0}
        assert content(lance.dataset(str(wh / "ws" / "t.lance"))) == expected

        def last(metric):
            files = list(csv.glob(f"*.driver.plugin.*EnginePlugin.maintenance.{metric}.csv"))
            assert files, (metric, [p.name.split("EnginePlugin.")[-1] for p in csv.iterdir() if ".plugin." in p.name])
            return float(files[0].read_text().strip().splitlines()[-1].split(",")[1])
        assert last("runs") == 2 and last("tables_maintained") == 1 and last("tables_failed") == 1
        assert last("bytes_rewritten") > 0
        assert last("table.ws.t.health") > last("table.ws.t.runs") == 1
        assert last("procedure.maintain_warehouse.calls") == 2  # every procedure's calls, failures, duration
        assert last("procedure.maintain_warehouse.failures") == 0

        # SIGTERM between rounds: the service ends its session and says it stopped.
        deadline = time.monotonic() + 240
        line = ""
        while not line.startswith("{") and time.monotonic() < deadline:
            line = endless.stdout.readline()
        assert json.loads(line)["maintained"] == ["ws.u"]
        endless.send_signal(signal.SIGTERM)
        out, err = endless.communicate(timeout=60)
        assert endless.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1]) == {"stopped": True, "rounds": 1, "signal": True}
    finally:
        for p in (bounded, endless):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_the_service_takes_a_properties_file_as_its_help_says(tmp_path):
    """--properties-file names the warehouse (and would hold the storage keys): no --warehouse."""
    import json

    wh = tmp_path / "wh"
    _degraded(wh / "ws" / "t.lance")
    expected = content(lance.dataset(str(wh / "ws" / "t.lance")))
    props = tmp_path / "service.properties"
    props.write_text(f"spark.sql.catalog.lance.warehouse={wh}\nspark.sql.catalog.lance.maintain.priority=1\n")
    help_text = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "--properties-file" in help_text
    # a properties file already named in the environment (a user's, or this worker's private
    # one from an earlier module): spark-submit reads only the last one named, so the service
    # merges them, its --properties-file winning (it once lost to one here, intermittently)
    # (its last line ends in a backslash, no line end: it must not swallow the service's first line)
    earlier = tmp_path / "earlier.properties"
    earlier.write_text(f"spark.sql.catalog.lance.warehouse={tmp_path / 'elsewhere'}\nspark.app.name=x\\")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_SUBMIT_ARGS": f"--properties-file={earlier} pyspark-shell"}
    p = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--properties-file", str(props),
                        "--master", "local[1]", "--conf", "spark.ui.enabled=false", "--rounds", "1",
                        "--param", "target_rows_per_fragment=300"],
                       capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    first = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("{")))
    assert first.get("maintained") == ["ws.t"], (first, p.stderr[-3000:])
    assert content(lance.dataset(str(wh / "ws" / "t.lance"))) == expected
    missing = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--properties-file",
                              str(tmp_path / "nope.properties")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such readable file" in missing.stderr
    gone = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--properties-file", str(props)],
                          capture_output=True, text=True, timeout=60,
                          env={**env, "PYSPARK_SUBMIT_ARGS": f"--properties-file {tmp_path / 'gone'} pyspark-shell"})
    assert gone.returncode == 2 and "cannot read the properties file " in gone.stderr, gone.stderr[-2000:]
    assert "named in $PYSPARK_SUBMIT_ARGS" in gone.stderr and "Traceback" not in gone.stderr
    folder = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--properties-file",
                             str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
    assert folder.returncode == 2 and f"cannot read the properties file {tmp_path} named in --properties-file" \
        in folder.stderr and "Traceback" not in folder.stderr, folder.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(wh),
                          "--param", "fail_on_error=yes"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--param fail_on_error expects true or false, got 'yes'" in bad.stderr


# Durations and times as Spark types, and the version-retention check. This module's session
# keeps the operator's default version floor (spark.lance.compact.cleanup.versionMinAge,
# 7 days): its tables' versions are seconds old, so every form below that is accepted removes
# nothing, and one below the floor is refused.
from datetime import datetime, timedelta, timezone  # noqa: E402

from conftest import VERSION_FLOOR_KEY, refused  # noqa: E402

# set as an operator would: a JVM started by an earlier module of the same run keeps that
# module's settings as defaults (spark-submit's --conf become system properties)
SPARK_CONF = {VERSION_FLOOR_KEY: "7 days"}


@pytest.fixture(scope="module")
def young(warehouse):
    """rt.t: a degraded table whose versions are all seconds old (compaction is due)."""
    path = warehouse / "rt" / "t.lance"
    _degraded(path)
    return "rt.t", path


def _cleanup_reason(spark, t, value) -> str:
    """maintain's dry run with older_than => ``value`` (SQL): its cleanup row's reason, which
    names older_than as the engine read it."""
    rows = spark.sql(f"CALL lance.maintain(table => '{t}', older_than => {value}, dry_run => true)").collect()
    return {r.step: r for r in rows}["cleanup"].reason


def test_older_than_takes_intervals_timestamps_and_short_forms(spark, young):
    t, path = young
    version = lance.dataset(str(path)).version
    past = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=8)
    spark.sql("SET spark.sql.session.timeZone=UTC")
    forms = {"INTERVAL 8 DAYS": "8 days", "INTERVAL '192' HOUR": "8 days", "INTERVAL 1 MONTH": "1 months",
             "INTERVAL '1-2' YEAR TO MONTH": "14 months", "INTERVAL '8 00:00:30' DAY TO SECOND": "691230 seconds",
             f"TIMESTAMP '{past:%Y-%m-%d %H:%M:%S}'": past.isoformat().replace("+00:00", "Z"),
             f"TIMESTAMP_NTZ '{past:%Y-%m-%d %H:%M:%S}'": past.isoformat().replace("+00:00", "Z"),
             "'8d'": "8d", "'192h'": "192h", "'8 days'": "8 days", "'1 week 1 day'": "1 week 1 day",
             f"'{past.isoformat()}'": past.isoformat()}
    for value, read in forms.items():
        assert f"older than {read}" in _cleanup_reason(spark, t, value), value
    # TIMESTAMP_NTZ is a wall-clock time: read in the session's time zone, as Spark casts one
    spark.sql("SET spark.sql.session.timeZone=America/New_York")
    try:
        ntz = _cleanup_reason(spark, t, f"TIMESTAMP_NTZ '{past:%Y-%m-%d %H:%M:%S}'")
    finally:
        spark.sql("SET spark.sql.session.timeZone=UTC")
    from zoneinfo import ZoneInfo

    instant = past.replace(tzinfo=ZoneInfo("America/New_York")).astimezone(timezone.utc)
    assert "older than " + instant.isoformat().replace("+00:00", "Z") in ntz, ntz
    for sql in (f"CALL lance.cleanup(table => '{t}', older_than => INTERVAL 8 DAYS, dry_run => true)",
                f"CALL lance.cleanup(table => '{t}', older_than => TIMESTAMP '{past:%Y-%m-%d %H:%M:%S}')",
                f"CALL lance.cleanup(table => '{t}', older_than => '8d', retain_versions => 1)",
                "CALL lance.maintain_warehouse(namespace => 'rt', older_than => INTERVAL 8 DAYS, "
                "max_duration => INTERVAL 10 MINUTES, dry_run => true)",
                "CALL lance.maintain_warehouse(namespace => 'rt', older_than => '8d', max_duration => '10m', "
                "dry_run => true)"):
        row = spark.sql(sql).collect()[0]
        assert "old_versions" not in row.asDict() or row.old_versions == 0, sql
    assert lance.dataset(str(path)).version == version


def test_pyspark_helpers_take_timedelta_and_datetime(spark, young):
    from lance_compact import cleanup, maintain, maintain_warehouse

    t, path = young
    version = lance.dataset(str(path)).version
    past = datetime.now(timezone.utc) - timedelta(days=9)
    assert cleanup(spark, t, older_than=timedelta(days=8), dry_run=True).collect()[0].old_versions == 0
    rows = maintain(spark, t, older_than=past, dry_run=True).collect()
    assert "older than " + past.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") in rows[-1].reason
    assert maintain_warehouse(spark, "rt", max_duration=timedelta(minutes=10), older_than="8d",
                              dry_run=True).collect()
    with refused(path, f"older_than '1 days' is below the version retention floor '7 days'.*{VERSION_FLOOR_KEY}"):
        cleanup(spark, t, older_than=timedelta(days=1)).collect()
    assert lance.dataset(str(path)).version == version


@pytest.mark.parametrize("call", [
    "CALL lance.cleanup(table => '{t}', older_than => '0 seconds')",
    "CALL lance.cleanup(table => '{t}', older_than => INTERVAL 1 DAY, dry_run => true)",
    "CALL lance.cleanup(table => '{t}', older_than => current_timestamp() - INTERVAL 6 DAYS)",
    "CALL lance.maintain(table => '{t}', older_than => '6d', target_rows_per_fragment => 300)",
    "CALL lance.maintain_warehouse(namespace => 'rt', older_than => INTERVAL 1 HOUR)",
])
def test_the_retention_check_refuses_below_the_floor_and_changes_nothing(spark, young, call):
    """As Delta refuses a VACUUM under 168 hours: nothing runs, not even maintain's compaction
    (due on this table), and the error names the setting and its value."""
    t, path = young
    files = sorted(p for p in path.rglob("*") if p.is_file())
    with refused(path, f"is below the version retention floor '7 days'.*{VERSION_FLOOR_KEY}.*'0s' turns"):
        spark.sql(call.format(t=t)).collect()
    assert sorted(p for p in path.rglob("*") if p.is_file()) == files


def test_a_policy_below_the_floor_is_refused_where_it_is_set_and_where_it_is_read(spark, young, warehouse):
    t, path = young
    with refused(path, f"lance_compact.maintain.older_than '1 hour' is below the version retention floor "
                       f"'7 days'.*{VERSION_FLOOR_KEY}"):
        spark.sql(f"ALTER TABLE lance.{t} SET TBLPROPERTIES ('lance_compact.maintain.older_than' = '1 hour')")
    spark.sql(f"ALTER TABLE lance.{t} SET TBLPROPERTIES ('lance_compact.maintain.older_than' = '8d')")
    # written by a writer that does not check (pylance here): maintain_warehouse leaves the table alone
    other = warehouse / "rt" / "policy.lance"
    _degraded(other).update_config({"lance_compact.maintain.older_than": "1 hour"})
    version = lance.dataset(str(other)).version
    rows = by_table(spark.sql("CALL lance.maintain_warehouse(namespace => 'rt')").collect())
    assert VERSION_FLOOR_KEY in rows["rt.policy"]["all"].error and not rows["rt.policy"]["all"].ran
    assert lance.dataset(str(other)).version == version
    spark.sql(f"ALTER TABLE lance.{t} UNSET TBLPROPERTIES ('lance_compact.maintain.older_than')")


@pytest.mark.parametrize("call,message", [
    ("CALL lance.cleanup(table => '{t}', older_than => 'soon')",
     r"table rt.t: older_than expects '<n> days\|hours.*'7d'.*INTERVAL.*TIMESTAMP.*got 'soon'"),
    ("CALL lance.cleanup(table => '{t}', older_than => 7)",
     r"parameter older_than expects a duration or a moment: an INTERVAL.*got a value of type INT"),
    ("CALL lance.maintain(table => '{t}', older_than => INTERVAL -8 DAYS)", r"older_than must not be negative"),
    ("CALL lance.maintain_warehouse(max_duration => TIMESTAMP '2026-01-01 00:00:00')",
     r"parameter max_duration expects a duration: an INTERVAL.*got a value of type TIMESTAMP"),
    ("CALL lance.maintain_warehouse(max_duration => '10 parsecs')",
     r"maintain_warehouse: max_duration expects '<n> days.*got '10 parsecs'"),
])
def test_bad_durations_are_refused_naming_the_parameter(spark, young, call, message):
    t, path = young
    with refused(path, message):
        spark.sql(call.format(t=t)).collect()


def test_the_service_flags_take_every_form_and_its_rounds_the_floor(spark, young):
    from lance_compact.maintenance_service import Service, parse_args

    for value, seconds in (("10m", 600), ("10 minutes", 600), ("1 hour", 3600), ("90", 90), ("1d", 86400)):
        assert parse_args(["--every", value, "--backoff", value]).every == seconds
    bad = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--every", "soon"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "argument --every: expects '<n> days" in bad.stderr, bad.stderr
    t, path = young
    version = lance.dataset(str(path)).version
    service = Service(spark, "rt", {"older_than": "1 hour"}, every=1, min_interval=0, backoff=1, max_backoff=1)
    with pytest.raises(Exception, match=f"older_than '1 hour' is below the version retention floor.*{VERSION_FLOOR_KEY}"):
        service.round(1)
    assert lance.dataset(str(path)).version == version


def test_set_in_a_session_does_not_turn_the_retention_check_off(spark, young):
    """The floor is the driver's static setting, read when the engine starts: SET changes nothing."""
    t, path = young
    try:
        spark.sql(f"SET {VERSION_FLOOR_KEY}=0s").collect()
    except Exception:  # a Spark that refuses to SET it is as good
        pass
    try:
        with refused(path, f"below the version retention floor '7 days'.*{VERSION_FLOOR_KEY}"):
            spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds')").collect()
    finally:
        spark.sql(f"RESET {VERSION_FLOOR_KEY}").collect()


def test_the_service_forgets_a_table_that_is_gone(spark, warehouse):
    """What the service keeps between rounds is of the warehouse's tables now: a dropped table's
    state goes with it (weeks of running must not keep every table that ever existed)."""
    import pyarrow as pa

    from lance_compact.maintenance_service import Service

    for name in ("kept", "dropped"):
        lance.write_dataset(pa.table({"id": pa.array(range(20), pa.int64())}), str(warehouse / "svcgone" / f"{name}.lance"))
    service = Service(spark, "svcgone", {}, every=1, min_interval=0, backoff=1, max_backoff=1)
    service.round(1)
    assert set(service.tables) == {"svcgone.kept", "svcgone.dropped"}, service.tables
    shutil.rmtree(warehouse / "svcgone" / "dropped.lance")
    service.round(2)
    assert set(service.tables) == {"svcgone.kept"}, service.tables


def test_a_calendar_interval_is_taken_too(spark, young):
    """With Spark's legacy intervals on, an INTERVAL literal is a CALENDAR INTERVAL: taken as well."""
    t, path = young
    spark.sql("SET spark.sql.legacy.interval.enabled=true")
    try:
        assert "older than 8 days" in _cleanup_reason(spark, t, "INTERVAL 8 DAYS")
        assert "older than 1 months 12 hours" in _cleanup_reason(spark, t, "INTERVAL 1 MONTH 12 HOURS")
        with refused(path, f"older_than '1 days' is below the version retention floor.*{VERSION_FLOOR_KEY}"):
            spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => INTERVAL 1 DAY)").collect()
    finally:
        spark.sql("RESET spark.sql.legacy.interval.enabled")


def test_former_names_are_taken_everywhere_with_the_same_result(spark, warehouse):
    """max_bytes, the former name of three budgets, still works for one release wherever it did --
    compact's options map (io_bounded), maintain's parameter, the table property, maintain_warehouse's
    parameter, the PySpark functions (with a FutureWarning) and the service -- and gives what the
    new name gives: two identical tables, one maintained by each name, stay identical."""
    import warnings

    from lance_compact import compact, maintain_warehouse
    from lance_compact.maintenance_service import Service

    def same(rows):
        return [{k: v for k, v in r.asDict().items() if k not in ("elapsed_ms", "table")} for r in rows]

    paths = {n: warehouse / "former" / f"{n}.lance" for n in ("old", "new")}

    def fresh():  # both tables as degraded as at first (the same versions too)
        for p in paths.values():
            _degraded(p)

    try:
        fresh()
        one = max(sum(d.file_size_bytes for d in f.metadata.files)
                  for f in lance.dataset(str(paths["old"])).get_fragments())
        budget = one * 4
        # compact, io_bounded: the options map, then PySpark's keyword
        by = {n: spark.sql(f"CALL lance.compact(table => 'former.{n}', target_rows_per_fragment => 60, "
                           f"strategy => 'io_bounded', options => map('{key}', '{budget}'))").collect()
              for n, key in (("old", "max_bytes"), ("new", "max_rewrite_bytes"))}
        assert same(by["old"]) == same(by["new"]) and by["old"][0].tasks > 0 and by["old"][0].tasks_left > 0, by
        fresh()
        with pytest.warns(FutureWarning, match="max_bytes is deprecated, it is the former name of max_rewrite_bytes"):
            old = compact(spark, "former.old", strategy="io_bounded", target_rows_per_fragment=60,
                          max_bytes=budget).collect()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the new name warns of nothing
            new = compact(spark, "former.new", strategy="io_bounded", target_rows_per_fragment=60,
                          max_rewrite_bytes=budget).collect()
        assert same(old) == same(new) and old[0].tasks > 0 and old[0].tasks_left > 0
        fresh()
        # maintain: the parameter, then the table property (SET under the former name writes the new one)
        by = {n: spark.sql(f"CALL lance.maintain(table => 'former.{n}', target_rows_per_fragment => 60, "
                           f"{key} => {budget})").collect()
              for n, key in (("old", "max_bytes"), ("new", "max_rewrite_bytes"))}
        assert same(by["old"]) == same(by["new"]) and "tasks left for later" in by["old"][0].outcome, by
        with pytest.raises(Exception, match="maintain parameter max_rewrite_bytes is given twice"):
            spark.sql(f"CALL lance.maintain(table => 'former.old', max_bytes => 1, max_rewrite_bytes => 1)").collect()
        fresh()
        for n, key in (("old", "max_bytes"), ("new", "max_rewrite_bytes")):
            spark.sql(f"ALTER TABLE lance.former.{n} SET TBLPROPERTIES ('lance_compact.maintain.{key}' = '{budget}')")
        for n in paths:
            shown = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES lance.former.{n}").collect()}
            assert shown.get("lance_compact.maintain.max_rewrite_bytes") == str(budget), shown
            assert "lance_compact.maintain.max_bytes" not in shown
        by = {n: spark.sql(f"CALL lance.maintain(table => 'former.{n}', target_rows_per_fragment => 60)").collect()
              for n in paths}
        assert same(by["old"]) == same(by["new"]) and "tasks left for later" in by["old"][0].outcome, by
        assert len(lance.dataset(str(paths["old"])).get_fragments()) == \
            len(lance.dataset(str(paths["new"])).get_fragments())
        # maintain_warehouse: SQL, PySpark, the service's --param
        args = "namespace => 'former', target_rows_per_fragment => 30, dry_run => true"
        old = spark.sql(f"CALL lance.maintain_warehouse({args}, max_bytes => 1)").collect()
        new = spark.sql(f"CALL lance.maintain_warehouse({args}, max_total_rewrite_bytes => 1)").collect()
        assert same(old) == same(new) and "max_total_rewrite_bytes budget" in old[0].reason, old
        with pytest.warns(FutureWarning, match="former name of max_total_rewrite_bytes"):
            api = maintain_warehouse(spark, "former", target_rows_per_fragment=30, dry_run=True, max_bytes=1).collect()
        assert same(api) == same(new)
        reports = [Service(spark, "former", {"target_rows_per_fragment": 30, "dry_run": True, key: 1}, every=1,
                           min_interval=0, backoff=1, max_backoff=1).round(1)
                   for key in ("max_bytes", "max_total_rewrite_bytes")]
        assert [{k: v for k, v in r.items() if k != "seconds"} for r in reports] == \
            [{"round": 1, "maintained": [], "failed": [], "errors": {}, "excluded": {}, "tables": 2}] * 2
    finally:
        for p in paths.values():
            shutil.rmtree(p, ignore_errors=True)


def test_the_service_state_file_carries_min_interval_and_back_off_across_runs(spark, warehouse, tmp_path):
    """--state: what one run remembers (a table maintained, another failing) holds in the next
    run, as a scheduler's --rounds 1 runs are separate processes; a file that is not the
    service's state is refused before anything runs, and not overwritten."""
    import json

    from lance_compact.maintenance_service import Service, read_state

    _degraded(warehouse / "svcstate" / "due.lance")
    broken = warehouse / "svcstate" / "broken.lance"
    (broken / "_versions").mkdir(parents=True)
    (broken / "_versions" / "1.manifest").write_bytes(b"not a manifest")
    state = tmp_path / "state.json"

    def one_run():
        return Service(spark, "svcstate", {}, every=1, min_interval=3600, backoff=600, max_backoff=3600,
                       state=str(state)).round(1)

    first = one_run()
    assert first["maintained"] == ["svcstate.due"] and first["failed"] == ["svcstate.broken"], first
    kept = read_state(str(state))
    assert kept["svcstate.due"].maintained_at is not None and kept["svcstate.broken"].failures == 1, kept
    version = lance.dataset(str(warehouse / "svcstate" / "due.lance")).version
    _degraded(warehouse / "svcstate" / "due2.lance")  # due now, never maintained: not held back
    second = one_run()
    assert set(second["excluded"]) == {"svcstate.due", "svcstate.broken"}, second
    assert second["excluded"]["svcstate.due"].startswith("maintained ") and \
        "backed off" in second["excluded"]["svcstate.broken"], second
    assert second["maintained"] == ["svcstate.due2"], second
    assert lance.dataset(str(warehouse / "svcstate" / "due.lance")).version == version
    # the back-off's count goes on from the file (the broken table was excluded: not failed again)
    assert read_state(str(state))["svcstate.broken"].failures == 1

    other = tmp_path / "not-state.json"
    other.write_text('{"something": "else"}')
    with pytest.raises(ValueError, match=f"--state {other}: not a state file of this service"):
        Service(spark, "svcstate", {}, every=1, min_interval=0, backoff=1, max_backoff=1, state=str(other))
    p = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(warehouse),
                        "--state", str(other), "--rounds", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and f"--state {other}: not a state file of this service" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "SparkSession" not in p.stderr
    assert json.loads(other.read_text()) == {"something": "else"}
    p = subprocess.run([sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(warehouse),
                        "--state", str(tmp_path / "no-such-folder" / "state.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "its folder is not writable (or does not exist)" in p.stderr, p.stderr
