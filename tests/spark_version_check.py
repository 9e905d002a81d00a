"""One Spark version's check, run by bin/check-spark-versions with that version's venv Python
and the one jar ($LANCE_COMPACT_JAR): the jar loads, and on a small degraded table
plan_compaction, CALL lance.compact (content exact, fewer fragments), describe_layout, a
SELECT read on the executors,
SHOW NAMESPACES, SHOW PROCEDURES (from 4.1) and CREATE INDEX / DROP INDEX answer through
PySpark; then CALL through
that version's own spark-sql. Writes {"version", "checks": {name: [ok, seconds, detail]}} to
--out after every step (ok is null for a check that does not apply to this version), so a
run cut short still tells how far it got. Each step has a time limit."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEP_TIMEOUT = 240      # one PySpark step (the first one starts the JVM and the engine)
SPARK_SQL_TIMEOUT = 300
TABLE = "db.t"
COMPACT = f"CALL lance.compact(table => '{TABLE}', target_rows_per_fragment => 300)"


class StepTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise StepTimeout(f"no answer within {STEP_TIMEOUT}s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    import lance
    import pyspark
    from pyspark.sql import SparkSession

    from oracle import content, degraded_table
    from lance_compact import configure_spark_with_lance_compact
    from lance_compact.api import CATALOG_CLASS, PLUGIN_CLASS, jar_path

    version = pyspark.__version__
    minor = tuple(int(x) for x in version.split(".")[:2])
    checks: dict[str, list] = {}
    work = Path(tempfile.mkdtemp(prefix=f"spark-{version}-check-"))
    wh = work / "wh"
    (wh / "db").mkdir(parents=True)
    path = wh / "db" / "t.lance"
    jar = jar_path()
    signal.signal(signal.SIGALRM, _alarm)

    def record(name, ok, secs, detail) -> None:
        checks[name] = [ok, round(secs, 1), detail]
        args.out.write_text(json.dumps({"version": version, "checks": checks}))
        print(f"[{version}] {name}: {'n/a' if ok is None else 'ok' if ok else 'FAIL'} "
              f"{secs:.1f}s {detail}", file=sys.stderr, flush=True)

    def check(name: str, fn, timeout: int = STEP_TIMEOUT) -> bool:
        """Runs fn; it returns a detail string, or (None, detail) when the check does not apply."""
        clock = time.monotonic()
        signal.alarm(timeout)
        try:
            detail = fn()
            ok = True
            if isinstance(detail, tuple):
                ok, detail = detail
        except BaseException as e:  # reported in the matrix, with the exception's first line
            ok, detail = False, f"{type(e).__name__}: " + (str(e).strip().splitlines() or [""])[0][:400]
        finally:
            signal.alarm(0)
        record(name, ok, time.monotonic() - clock, detail or "")
        return ok is not False

    before = degraded_table(str(path), fragments=30, rows_per_fragment=20)
    expected = content(before)
    fragments_before = len(before.get_fragments())
    spark = None

    def jar_loads():
        nonlocal spark
        builder = (SparkSession.builder.master("local[2]").appName(f"spark-{version}-check")
                   .config("spark.ui.enabled", "true").config("spark.ui.port", "0")  # the Lance tab's check
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "2"))
        # Also starts the engine plugin (a class of the jar) with the session.
        spark = configure_spark_with_lance_compact(builder, warehouse=str(wh)).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        assert spark.version == version, f"session runs Spark {spark.version}, not {version}"
        loader = spark._jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        for cls in (CATALOG_CLASS, PLUGIN_CLASS):
            loader.loadClass(cls)
        plugins = spark.sparkContext.getConf().get("spark.plugins", "")
        assert PLUGIN_CLASS in plugins, plugins
        return f"Spark {spark.version}, {Path(jar).name} ({os.path.getsize(jar)} bytes)"

    def plan():
        rows = spark.sql(f"CALL lance.plan_compaction(table => '{TABLE}', "
                         "target_rows_per_fragment => 300)").collect()
        assert rows, "no tasks planned on a degraded table"
        assert lance.dataset(str(path)).version == before.version, "the dry run wrote"
        return f"{len(rows)} tasks planned, nothing written"

    def call():
        r = spark.sql(COMPACT).collect()[0]
        after = lance.dataset(str(path))
        assert content(after) == expected, "the table's rows changed"
        n = len(after.get_fragments())
        assert n < fragments_before, f"still {n} fragments"
        assert r.new_version == after.version, (r.new_version, after.version)
        return f"{fragments_before} -> {n} fragments, rows exact, version {r.read_version} -> {r.new_version}"

    def layout():
        r = spark.sql(f"CALL lance.describe_layout(table => '{TABLE}')").collect()[0]
        n = len(lance.dataset(str(path)).get_fragments())
        assert r.fragments == n, (r.fragments, n)
        return f"{r.fragments} fragments"

    def select():
        df = spark.sql(f"SELECT id FROM lance.{TABLE} WHERE id >= 0")
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "(Python)" in plan, f"not read on the executors: {plan[:300]}"
        got = sorted(r.id for r in df.collect())
        assert got == sorted(lance.dataset(str(path)).to_table(columns=["id"])["id"].to_pylist())
        return f"{len(got)} rows in {df.rdd.getNumPartitions()} partitions"

    def tab():
        """The Lance tab's pages on this Spark (its header and handler are reached by reflection,
        their signatures differ across 4.x) and the history server's plugin class."""
        import urllib.request
        spark.sql("SELECT * FROM lance.system.table_health").collect()
        ui = spark.sparkContext.uiWebUrl
        pages = {p: urllib.request.urlopen(f"{ui}/lance/{p}", timeout=30).read().decode()
                 for p in ("", "running/", "history/", "table/?name=lance.db.t")}
        assert 'id="lance-warehouse"' in pages[""] and "db.t" in pages[""], pages[""][:300]
        assert "compact" in pages["history/"] and "describe_layout" in pages["history/"]
        assert "lance-table-facts" in pages["table/?name=lance.db.t"]
        # the history server finds the plugin as Spark does: a service of the jar, made by its loader
        jvm = spark._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        service = jvm.java.lang.Class.forName("org.apache.spark.status.AppHistoryServerPlugin", True, loader)
        found, it = [], jvm.java.util.ServiceLoader.load(service, loader).iterator()
        while it.hasNext():
            found.append(it.next().getClass().getName())
        assert "org.apache.spark.ui.LanceCompactHistoryPlugin" in found, found
        return f"{len(pages)} pages, history server plugin found"

    def observer():
        """The cancel watch's observer of Spark's scheduler (CancelWatch.scala) is installed by
        the engine's bridge, and Spark's jobs and cancels go through it as before."""
        jsc = spark.sparkContext._jsc.sc()
        assert spark._jvm.org.apache.spark.scheduler.LanceCompactCancelEvents.installed(jsc), \
            "not installed: cancels sent while a statement runs no job reach it only at its next job"
        spark.sparkContext.cancelJobGroup("no-such-group")
        assert spark.sparkContext.parallelize(range(10), 2).sum() == 45
        return "installed; jobs and cancels pass through"

    def namespaces():
        names = [r[0] for r in spark.sql("SHOW NAMESPACES IN lance").collect()]
        assert "db" in names, names
        return ", ".join(names)

    def procedures():
        try:
            rows = spark.sql("SHOW PROCEDURES IN lance").collect()
        except Exception as e:
            if minor < (4, 1):  # the statement came with Spark 4.1
                first = (str(e).strip().splitlines() or [""])[0]
                return None, f"Spark {version} has no SHOW PROCEDURES ({type(e).__name__}: {first[:160]})"
            raise
        names = {r.asDict().get("procedure_name", r[-1]) for r in rows}
        for p in ("compact", "plan_compaction", "describe_layout"):
            assert p in names, names
        return f"{len(names)} procedures"

    def indices():
        """CREATE INDEX / DROP INDEX parse and plan to the table's SupportsIndex on this version
        (Spark's CreateIndex, DropIndex); the index answers a filter as a full scan does."""
        spark.sql(f"CREATE INDEX id_idx ON lance.{TABLE} USING BTREE (id)").collect()
        ds = lance.dataset(str(path))
        f = "id < 100"
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), "the index is not used"
        assert ds.to_table(filter=f).sort_by("id") == ds.to_table(filter=f, use_scalar_index=False).sort_by("id")
        spark.sql(f"CREATE INDEX IF NOT EXISTS id_idx ON lance.{TABLE} USING BTREE (id)").collect()
        listed = [(r.name, r.segments) for r in spark.sql(f"SELECT * FROM lance.{TABLE}.indices").collect()]
        assert listed == [("id_idx", 1)], listed
        spark.sql(f"DROP INDEX IF EXISTS nope ON lance.{TABLE}").collect()
        spark.sql(f"DROP INDEX id_idx ON lance.{TABLE}").collect()
        assert lance.dataset(str(path)).list_indices() == [], "not dropped"
        return "CREATE INDEX [IF NOT EXISTS], the indices table, DROP INDEX [IF EXISTS]"

    def clustering():
        """A clustering compaction (a z-order, keys with nulls: Arrow's sort, which changed its
        sort-key form at pyarrow 25), then a CLUSTER BY table's maintain, on this version's
        Spark and this venv's pyarrow."""
        import pyarrow as pa

        cpath = wh / "db" / "c.lance"
        n = 2_000
        rows = pa.table({"a": pa.array([None if i % 17 == 0 else i % 50 for i in range(n)], pa.int64()),
                         "b": pa.array([None if i % 23 == 0 else (i * 7) % 90 for i in range(n)], pa.int64()),
                         "id": pa.array(range(n), pa.int64())})
        for i in range(10):
            lance.write_dataset(rows.slice(i * 200, 200), str(cpath), mode="create" if i == 0 else "append")
        want = sorted(lance.dataset(str(cpath)).to_table()["id"].to_pylist())
        r = spark.sql("CALL lance.compact(table => 'db.c', sort_order => 'zorder(a, b)')").collect()[0]
        assert r.strategy == "clustering", r
        assert sorted(lance.dataset(str(cpath)).to_table()["id"].to_pylist()) == want, "rows changed"
        spark.sql("ALTER TABLE lance.db.c CLUSTER BY (b, a)").collect()
        lance.write_dataset(rows.slice(0, 50), str(cpath), mode="append")
        spark.sql("CALL lance.maintain(table => 'db.c')").collect()
        got = lance.dataset(str(cpath)).to_table()["id"].to_pylist()
        assert sorted(got) == sorted(want + list(range(50))), "rows changed by maintain"
        return f"zorder(a, b) and CLUSTER BY (b, a) + maintain on pyarrow {pa.__version__}, rows exact"

    def hints():
        """The parser's hints for statements typed by habit (a proxy of this version's parser
        interface: 4.3 added a method), and every other statement parsed as before."""
        try:
            spark.sql(f"OPTIMIZE lance.{TABLE} ZORDER BY (id)").collect()
        except Exception as e:  # noqa: BLE001 - the message is the check
            assert "CALL lance.compact(" in " ".join(str(e).split()), str(e)[:300]
        else:
            raise AssertionError("OPTIMIZE parsed")
        assert spark.sql("SELECT 1 AS one").collect()[0]["one"] == 1
        return "OPTIMIZE ... ZORDER BY names CALL lance.compact"

    if check("jar loads", jar_loads):
        check("plan_compaction", plan)
        check("CALL via PySpark", call)
        check("cancel observer", observer)
        check("describe_layout", layout)
        check("Lance tab", tab)
        check("SELECT", select)
        check("SHOW NAMESPACES", namespaces)
        check("SHOW PROCEDURES", procedures)
        check("CREATE/DROP INDEX", indices)
        check("clustering", clustering)
        check("SQL hints", hints)
    if spark is not None:
        signal.alarm(60)
        try:
            spark.stop()
        except BaseException:
            pass
        signal.alarm(0)

    def guard():
        """SharedServerGuard on this version: a guarded session resolves the reviewed built-ins,
        refuses reflection and USING jdbc by name, and names the version's built-ins the list
        does not review (refused until they are)."""
        builder = (SparkSession.builder.master("local[1]").appName(f"spark-{version}-guard")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.extensions", "io.github.lancecompact.spark.SharedServerGuard"))
        guarded = configure_spark_with_lance_compact(builder, warehouse=str(wh)).getOrCreate()
        guarded.sparkContext.setLogLevel("ERROR")
        try:
            for q in ("SELECT reflect('java.lang.System', 'getProperty', 'java.home')",
                      "CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:memory:x;create=true', "
                      "dbtable 'SYS.SYSTABLES')"):
                try:
                    guarded.sql(q).collect()
                except Exception as e:  # noqa: BLE001 - the refusal is the check
                    assert "SharedServerGuard" in str(e), str(e)[:300]
                else:
                    raise AssertionError(f"not refused: {q}")
            assert guarded.sql("SELECT upper('ok') AS v").collect()[0]["v"] == "OK"
            assert guarded.sql(f"SELECT count(*) AS n FROM lance.{TABLE}").collect()[0]["n"] > 0
            refused = list(guarded._jvm.io.github.lancecompact.spark.SharedServerGuard.refusedFunctions())
            unreviewed = sorted(set(refused) - {"reflect", "java_method", "try_reflect", "from_avro", "to_avro",
                                                "schema_of_avro", "from_protobuf", "to_protobuf",
                                                "python_worker_logs"})
            return f"{len(refused)} built-ins refused; not yet reviewed: {', '.join(unreviewed) or 'none'}"
        finally:
            guarded.stop()
            guarded._jvm.io.github.lancecompact.spark.SharedServerGuard.restoreFunctions()
            guarded._jvm.java.lang.System.clearProperty("spark.sql.extensions")

    check("SharedServerGuard", guard)

    def spark_sql():
        """The version's own spark-sql with the jar and the catalog, as a plain Spark user runs
        it (no plugin: the engine starts on the first statement naming the catalog)."""
        shutil.rmtree(path)
        fresh = degraded_table(str(path), fragments=30, rows_per_fragment=20)
        home = Path(pyspark.__file__).parent
        python = sys.executable
        cmd = [str(home / "bin" / "spark-sql"), "--master", "local[2]", "--jars", jar,
               "--conf", f"spark.sql.catalog.lance={CATALOG_CLASS}",
               "--conf", f"spark.sql.catalog.lance.warehouse={wh}",
               "--conf", f"spark.sql.execution.pyspark.python={python}",
               "--conf", "spark.ui.enabled=false",
               "-e", COMPACT]
        env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": python,
               "SPARK_LOCAL_IP": "127.0.0.1"}
        # cwd: spark-sql's Hive metastore (metastore_db/, derby.log) lands in the scratch folder.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=work, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            stdout, stderr = p.communicate(timeout=SPARK_SQL_TIMEOUT)
        except BaseException:  # its timeout or ours: end spark-sql with its children
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
        if p.returncode != 0:
            lines = [l for l in stderr.splitlines() if "Exception" in l or "Error" in l]
            raise RuntimeError(f"spark-sql exit {p.returncode}: "
                               + ((lines or stderr.strip().splitlines() or ["no output"])[0])[:400])
        row = [l for l in stdout.splitlines() if l.startswith(TABLE + "\t")]
        assert row, f"no result row in spark-sql's output: {stdout[-300:]!r}"
        after = lance.dataset(str(path))
        assert content(after) == content(fresh), "the table's rows changed"
        n = len(after.get_fragments())
        assert n < len(fresh.get_fragments()), f"still {n} fragments"
        return f"{len(fresh.get_fragments())} -> {n} fragments, rows exact"

    # subprocess's own timeout bounds it (the alarm a little later, as a backstop).
    check("CALL via spark-sql", spark_sql, timeout=SPARK_SQL_TIMEOUT + 30)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(c[0] is not False for c in checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
