"""A real standalone cluster whose executors share nothing but the object store: a master and
two one-core workers from the pip-installed Spark, each with its own work directory, on
127.0.0.1; the warehouse on the S3-compatible server; CALL from spark-sql in client mode.
Tasks run on both executors; an executor killed mid-task is replaced and the CALL succeeds; a
clustered compaction (zorder) samples, shuffles and writes on the executors and commits exactly
the same rows; no credential appears in any log of the driver, the engine, the executors or the event log."""
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import lance
import pytest

from conftest import ROOT
from oracle import batch, content, degraded_table
from ports import free_port
from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY


def _stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=20)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:<port> with two one-core workers; yields (url, logs folder)."""
    import pyspark
    spark_home = os.path.dirname(pyspark.__file__)
    # The master's, the workers' and (inherited from a worker) the executors' JVMs compile with
    # C1 only, as the drivers do (SPARK_SUBMIT_OPTS, conftest); the JVM says so in their logs.
    env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"}
    logs = tmp_path_factory.mktemp("cluster")
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    cls = os.path.join(spark_home, "bin", "spark-class")
    procs = [subprocess.Popen(
        [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)], env=env, stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)]
    try:
        for i in (1, 2):
            procs.append(subprocess.Popen(
                [cls, "org.apache.spark.deploy.worker.Worker", url, "--cores", "1", "--memory", "2g",
                 "--host", "127.0.0.1", "--webui-port", str(free_port()), "--work-dir", str(logs / f"work{i}")],
                env=env, stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 90  # both workers registered with the master
        while True:
            try:
                state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2).read())
                if sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (logs / "master.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url, logs
    finally:
        for p in reversed(procs):
            _stop(p)


def rewrite_executors(events: Path, job: str = "rewriting") -> set[str]:
    """Executor ids of successful tasks of the jobs whose description holds ``job`` (the
    rewrite jobs by default), from Spark's event log."""
    stages: set[int] = set()
    executors: set[str] = set()
    for f in events.rglob("*"):
        if not f.is_file() or f.name.endswith(".crc"):
            continue
        for line in f.read_text(errors="replace").splitlines():
            e = json.loads(line)
            if e["Event"] == "SparkListenerJobStart" and \
                    job in (e.get("Properties") or {}).get("spark.job.description", ""):
                stages.update(e["Stage IDs"])
            elif e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages and \
                    e["Task End Reason"]["Reason"] == "Success":
                executors.add(e["Task Info"]["Executor ID"])
    return executors


def test_spark_sql_on_a_cluster_over_the_object_store(cluster, s3, tmp_path):
    url, logs = cluster
    wh = s3.create_bucket(f"cluster-{os.getpid()}") + "/wh"
    uris = {t: f"{wh}/db/{t}.lance" for t in ("spread", "killed", "clustered")}
    before = {t: degraded_table(u, fragments=60, rows_per_fragment=40, storage_options=s3.storage_options)
              for t, u in uris.items()}
    # an index build whose executor is killed mid-segment (retried), a compaction whose executor
    # is killed on every attempt (named as an executor lost, nothing committed)
    deaths = {t: f"{wh}/db/{t}.lance" for t in ("indexed", "lost")}
    deaths_before = {t: degraded_table(u, fragments=6, rows_per_fragment=500, storage_options=s3.storage_options)
                     for t, u in deaths.items()}
    expected = {t: content(ds) for t, ds in before.items()}
    events = tmp_path / "events"
    events.mkdir()
    storage = [a for k, v in s3.storage_options.items()
               for a in ("--conf", f"spark.sql.catalog.lance.storage.{k}={v}")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", wh, "--master", url, *storage,
         "--conf", "spark.executor.memory=1g", "--conf", "spark.task.maxFailures=3",
         "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}",
         "--conf", "spark.eventLog.compress=false",
         "--conf", f"spark.lance.compact.engine.log={tmp_path / 'engine.log'}",
         "--hiveconf", "hive.cli.print.header=true", "-e",
         "CALL lance.compact(table => 'db.spread', target_rows_per_fragment => 300); "
         "CALL lance.compact(table => 'db.killed', target_rows_per_fragment => 300, "
         "options => map('test_fail_task', '0:0:kill_executor')); "
         "CALL lance.compact(table => 'db.clustered', sort_order => 'zorder(category, id)', "
         "target_rows_per_fragment => 600); "
         "CALL lance.create_index(table => 'db.indexed', column => 'id', index_type => 'BTREE', "
         "options => map('rows_per_segment', '1000', 'test_fail_task', '0:0:kill_executor')); "
         "SET spark.sql.files.maxPartitionBytes=20000; "
         "SELECT count(*) AS n, sum(id) AS total FROM lance.db.spread WHERE id >= 0; "
         # the last statement: spark-sql stops at a failed one
         "CALL lance.compact(table => 'db.lost', target_rows_per_fragment => 300, "
         "options => map('test_fail_task', '0:all:kill_executor'));"],
        capture_output=True, text=True, timeout=900, env=env)
    # every statement answered but the last, whose executor was killed on each of its 3 attempts
    lost = [line for line in p.stderr.splitlines() if "[LANCE_WORKER_LOST]" in line]
    assert p.returncode != 0 and lost, p.stderr[-4000:]
    print(f"\nan executor killed on every attempt: {lost[0]}")
    assert ("table db.lost: a compaction task failed all its 3 attempts: the executor running the task was lost"
            in lost[0] and "ExecutorLostFailure" in lost[0] and "nothing was committed" in lost[0]), lost[0]
    for t, uri in deaths.items():
        after = lance.dataset(uri, storage_options=s3.storage_options)
        assert content(after) == content(deaths_before[t]), t
        indices = after.describe_indices()
        if t == "lost":  # nothing half-committed
            assert after.version == deaths_before[t].version and not indices
        else:  # the killed segment task was retried on an executor that lived: one index, exact answers
            assert [i.field_names for i in indices] == [["id"]], indices
            for f in ("id = 7", "id < 30", "id >= 2990"):
                assert after.to_table(filter=f, columns=["id"]).sort_by("id") == \
                    after.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f
    header, *rows = [line.split("\t") for line in p.stdout.strip().splitlines() if line.strip()]
    results = [dict(zip(header, r)) for r in rows if r != header and len(r) == len(header) and r[0] in
               ("db.spread", "db.killed", "db.clustered")]  # the compactions' rows (create_index has its own)
    counted = rows[rows.index(["n", "total"]) + 1]
    assert len(results) == 3 and all(r["tasks_failed"] == "0" for r in results)
    assert [r["commits"] for r in results[:2]] == ["1", "1"]
    clustered = results[2]  # the Rewrite, then its clustering record
    assert clustered["sort_order"] == "zorder(category, id)" and clustered["commits"] == "2", clustered
    for t, uri in uris.items():
        after = lance.dataset(uri, storage_options=s3.storage_options)
        assert content(after) == expected[t], t
        assert len(after.get_fragments()) < len(before[t].get_fragments())
    # the catalog's read: every group of fragments on an executor, both executors reading
    spread = expected["spread"]["id"].to_pylist()
    assert counted == [str(len(spread)), str(sum(spread))]
    assert len(rewrite_executors(events, "FROM lance.db.spread")) >= 2
    # the clustering's sample and sort-and-write jobs ran on executors (which of the two takes
    # their few short tasks is the scheduler's choice: both, or one, were seen)
    clustering = (rewrite_executors(events, "lance.compact db.clustered: sampling")
                  | rewrite_executors(events, "lance.compact db.clustered: clustering"))
    assert clustering and "driver" not in clustering, clustering
    # tasks ran on both executors, and the killed one was replaced by a third
    assert len(rewrite_executors(events)) >= 2, rewrite_executors(events)
    executor_dirs = [d for w in ("work1", "work2") for app in (logs / w).iterdir() for d in app.iterdir()]
    assert len(executor_dirs) >= 3, executor_dirs
    # no credential anywhere: driver output, engine log, event log, master/worker/executor logs
    texts = {"spark-sql output": p.stdout + p.stderr}
    for f in list(tmp_path.rglob("*")) + list(logs.rglob("*")):
        if f.is_file() and f.suffix != ".jar":
            texts[str(f)] = f.read_text(errors="replace")
    assert any("stderr" in k for k in texts) and "served compact" in texts[str(tmp_path / "engine.log")]
    for where, text in texts.items():
        for planted in (ACCESS_KEY_ID, SECRET_ACCESS_KEY):
            assert planted not in text, f"a planted credential appeared in {where}"


def test_a_cancel_while_no_job_runs_stops_a_call_on_the_cluster(cluster, tmp_path):
    """PySpark on the cluster with ONE one-core executor (spark.cores.max 1): a plain
    cancelJobGroup sent while the driver pauses before the commit (no job of the statement
    runs; test hook) stops the statement, though no job or task of it runs then (the cancel
    watch observes the cancel itself, CancelWatch.scala; it once held the executor's core): the
    CALL fails saying so, nothing is committed, and the next CALL works. Then every procedure
    that runs jobs answers on that one core: a clustering compaction, maintain of a CLUSTER BY
    table, ALTER TABLE ... CLUSTER BY then maintain_warehouse."""
    import threading

    from conftest import compact_call, lance_session

    url, _ = cluster
    wh = tmp_path / "wh"
    path = wh / "db" / "t.lance"
    before = degraded_table(str(path), fragments=24, rows_per_fragment=40)
    expected = content(before)
    spark = lance_session(url, "lance-compact-cluster-cancel", str(wh),
                          {"spark.executor.memory": "1g", "spark.executor.cores": "1",
                           "spark.cores.max": "1",
                           "spark.lance.compact.test.driverPauseMs": "3000"})
    try:
        sc = spark.sparkContext
        tracker = sc.statusTracker()
        outcome = {}

        def run():
            sc.setJobGroup("cluster-cancel", "to cancel")
            try:
                spark.sql("CALL lance.compact(table => 'db.t', target_rows_per_fragment => 300)").collect()
            except Exception as e:
                outcome["error"] = str(e)
            finally:
                outcome["ended"] = time.monotonic()
                sc.setLocalProperty("spark.jobGroup.id", None)

        t = threading.Thread(target=run, daemon=True)
        t.start()

        def real(status=None):
            return [j for j in tracker.getJobIdsForGroup("cluster-cancel")  # jobs that run tasks
                    if tracker.getJobInfo(j) is not None and len(tracker.getJobInfo(j).stageIds) > 0
                    and (status is None or tracker.getJobInfo(j).status == status)]
        deadline = time.monotonic() + 180
        while not (real("SUCCEEDED") and not real("RUNNING")):  # rewritten; the driver pauses before the commit
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        assert not real("RUNNING") and not tracker.getActiveStageIds(), "a task held the core while the driver paused"
        cancelled_at = time.monotonic()
        sc.cancelJobGroup("cluster-cancel")
        t.join(60)
        assert not t.is_alive()
        print(f"\ncluster: job group cancel while no job runs -> failed in {outcome['ended'] - cancelled_at:.2f} s")
        assert "cancelled" in outcome.get("error", "") and "job group cluster-cancel" in outcome["error"], outcome
        assert "nothing was committed" in outcome["error"]
        assert lance.dataset(str(path)).version == before.version
        r = compact_call(spark, "db.t")
        assert r.commits == 1 and content(lance.dataset(str(path))) == expected
        _every_job_procedure_answers(spark, wh, "one core")
    finally:
        spark.stop()


def _every_job_procedure_answers(spark, wh, where: str, bound: float = 120) -> None:
    """A clustering compaction, maintain of a CLUSTER BY table and ALTER TABLE ... CLUSTER BY
    then maintain_warehouse each answer within ``bound`` s (their own thread: a hang fails the
    test instead of hanging it), rows exact; then index builds on the executors (a vector index:
    a sampling job, a build job; a BTREE) and their upkeep after an append answer too, and the
    indices answer as a scan."""
    import threading

    paths = {n: wh / "sl" / f"{n}.lance" for n in ("sorted", "kept", "wh")}
    before = {n: content(degraded_table(str(p), fragments=16, rows_per_fragment=40)) for n, p in paths.items()}
    indexed = wh / "ix" / "t.lance"
    degraded_table(str(indexed), fragments=8, rows_per_fragment=500)
    spark.sql("ALTER TABLE lance.sl.kept CLUSTER BY (category)").collect()
    spark.sql("ALTER TABLE lance.sl.wh CLUSTER BY (category)").collect()
    for sql in ("CALL lance.compact(table => 'sl.sorted', target_rows_per_fragment => 300, sort_order => 'category')",
                "CALL lance.maintain(table => 'sl.kept', target_rows_per_fragment => 300)",
                "CALL lance.maintain_warehouse(namespace => 'sl', target_rows_per_fragment => 300)",
                "CALL lance.create_index(table => 'ix.t', column => 'vector', index_type => 'IVF_FLAT', "
                "options => map('num_partitions', '4', 'rows_per_segment', '1000'))",
                "CALL lance.create_index(table => 'ix.t', column => 'id', index_type => 'BTREE', "
                "options => map('rows_per_segment', '1000'))",
                "CALL lance.optimize_indices(table => 'ix.t')"):
        if "optimize_indices" in sql:  # an append for the upkeep to index (Spark SQL does not insert here)
            lance.write_dataset(batch(100_000, 50), str(indexed), mode="append")
        out = {}
        def run(statement=sql):
            try:
                out["rows"] = spark.sql(statement).collect()
            except Exception as e:  # noqa: BLE001 - said below
                out["error"] = str(e)[:3000]

        t = threading.Thread(target=run, daemon=True)
        started = time.monotonic()
        t.start()
        t.join(bound)
        if t.is_alive():
            spark.sparkContext.cancelAllJobs()
            pytest.fail(f"{where}: no answer within {bound} s: {sql}")
        print(f"\n{where}: {time.monotonic() - started:.2f} s: {sql}")
        assert out.get("rows"), f"{sql}: {out.get('error')}"
    for n, p in paths.items():
        ds = lance.dataset(str(p))
        assert content(ds) == before[n] and len(ds.get_fragments()) < 16, n
    ds = lance.dataset(str(indexed))
    for index in ("vector_idx", "id_idx"):
        stats = ds.stats.index_stats(index)
        assert stats["num_unindexed_fragments"] == 0 and stats["num_indexed_fragments"] == 9, (index, stats)
    for f in ("id = 7", "id >= 100040", "id < 120"):
        assert ds.to_table(filter=f, columns=["id"]).sort_by("id") == \
            ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f
    q = ds.to_table(filter="id = 5", columns=["vector"])["vector"][0].values.to_numpy()
    assert ds.to_table(nearest={"column": "vector", "q": q, "k": 1, "nprobes": 4}, columns=["id"])["id"][0].as_py() == 5


def test_every_procedure_answers_under_dynamic_allocation_from_zero_executors(cluster, tmp_path):
    """Dynamic allocation with no executor at the start (minExecutors 0, shuffle tracking): the
    statements' own jobs ask for executors, and every procedure that runs jobs answers (the
    former watch job also asked for one, to hold its core)."""
    from conftest import lance_session

    url, _ = cluster
    wh = tmp_path / "wh"
    spark = lance_session(url, "lance-compact-cluster-dynamic", str(wh),
                          {"spark.executor.memory": "1g", "spark.executor.cores": "1",
                           "spark.dynamicAllocation.enabled": "true",
                           "spark.dynamicAllocation.minExecutors": "0",
                           "spark.dynamicAllocation.initialExecutors": "0",
                           "spark.dynamicAllocation.maxExecutors": "2",
                           "spark.dynamicAllocation.shuffleTracking.enabled": "true",
                           "spark.dynamicAllocation.executorIdleTimeout": "5s"})
    try:
        # the driver alone (its block manager is listed as an executor): none before any job
        assert len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) == 1
        _every_job_procedure_answers(spark, wh, "dynamic allocation from zero")
    finally:
        spark.stop()
