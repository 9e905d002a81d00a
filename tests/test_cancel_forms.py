"""Cancel is cancel, in every form (issue 24, item 7): each way a client cancels -- the job
group, a job tag, all jobs, an interrupt of the statement's thread (Thrift's cancel, Spark
Connect's interrupt), the UI's kill of a job or of a stage -- stops compact, maintain and
maintain_warehouse alike, whether it lands while a Spark job of the statement runs or while
none does (the driver between its jobs: a commit, a maintenance step). Spark's plain cancels
reach ACTIVE jobs only and say nothing when none is: the statement's cancel watch
(CancelWatch.scala) sees them as Spark is asked, with no job of its own -- while the statement
works on the driver alone no job or task runs, and the UI lists none of it to kill.

A real PySpark session (local[2]) started with two test slow-downs (this process enables test
hooks, as the suite does): every rewrite task sleeps ``TASK_SLEEP_MS`` and the driver pauses
``DRIVER_PAUSE_MS`` before each commit and each maintenance step, with no job running. Every
assertion reads the tables with pylance: the statement fails saying "cancelled" within a bound,
no commit lands after the cancel, no job starts after it, rows exact, the next statement works.
"""
import functools
import os
import threading
import time

import lance
import pytest

from conftest import compact_call, lance_session, wait_for as _wait_for
from oracle import content, degraded_table

wait_for = functools.partial(_wait_for, step=0.05)  # cancels are timed: poll closely

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
TASK_SLEEP_MS = 700
DRIVER_PAUSE_MS = 1500
BOUND_S = 10  # cancel -> failure: a pause (1.5 s), Spark's Python task kill (2 s), the cancel itself


@pytest.fixture(scope="module")
def spark(warehouse):
    session = lance_session("local[2]", "lance-compact-cancel-forms", str(warehouse),
                            {"spark.lance.compact.test.taskSleepMs": str(TASK_SLEEP_MS),
                             "spark.lance.compact.test.driverPauseMs": str(DRIVER_PAUSE_MS)})
    yield session
    session.stop()


class Statement:
    """A CALL on its own thread under a job group and a job tag, as a client sends it."""

    def __init__(self, spark, sql: str, group: str) -> None:
        self.spark, self.sql, self.group, self.tag = spark, sql, group, f"{group}-tag"
        self.error: Exception | None = None
        self.ended: float | None = None
        self.jvm_thread = None
        ready = threading.Event()

        def run() -> None:
            sc = spark.sparkContext
            sc.setJobGroup(self.group, "a statement to cancel", interruptOnCancel=False)
            sc.addJobTag(self.tag)
            spark.addTag(self.tag)  # the session's tag (interruptTag); a job tag of its own in Classic
            self.jvm_thread = spark._jvm.java.lang.Thread.currentThread()
            ready.set()
            try:
                spark.sql(sql).collect()
            except Exception as e:
                self.error = e
            finally:
                self.ended = time.monotonic()
                sc.removeJobTag(self.tag)
                spark.removeTag(self.tag)
                sc.setLocalProperty("spark.jobGroup.id", None)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(30)

    def jobs(self) -> tuple[list[int], list[int]]:
        """(jobs of the statement that run tasks so far, of which running); its progress marks,
        jobs of no stage, left out."""
        tracker = self.spark.sparkContext.statusTracker()
        infos = [tracker.getJobInfo(i) for i in tracker.getJobIdsForGroup(self.group)]  # one read each
        infos = sorted((i for i in infos if i is not None and len(i.stageIds) > 0), key=lambda i: i.jobId)
        return [i.jobId for i in infos], [i.jobId for i in infos if i.status == "RUNNING"]

    def active_jobs(self) -> list[int]:
        """Every running job of the group (what the UI lists as active)."""
        tracker = self.spark.sparkContext.statusTracker()
        return [i for i in tracker.getJobIdsForGroup(self.group)
                if tracker.getJobInfo(i) is not None and tracker.getJobInfo(i).status == "RUNNING"]

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the statement did not end within {timeout} s"


def _kill_jobs(s: Statement) -> None:
    """The UI's kill link of a job: SparkContext.cancelJob(jobId) on each active job listed."""
    sc = s.spark.sparkContext._jsc.sc()
    for job in s.active_jobs():
        sc.cancelJob(job, "killed via the Web UI")


def _kill_stages(s: Statement) -> None:
    """The UI's kill link of a stage: SparkContext.cancelStage on each active stage of the group."""
    sc = s.spark.sparkContext
    tracker = sc.statusTracker()
    for job in s.active_jobs():
        info = tracker.getJobInfo(job)
        for stage in (info.stageIds if info else []):
            sc._jsc.sc().cancelStage(stage, "killed via the Web UI")


# form -> (how, text the failure says)
FORMS = {
    "job group": (lambda s: s.spark.sparkContext.cancelJobGroup(s.group), "job group"),
    "job tag": (lambda s: s.spark.sparkContext.cancelJobsWithTag(s.tag), "job tag"),
    "all jobs": (lambda s: s.spark.sparkContext.cancelAllJobs(), "all jobs"),
    "interrupt": (lambda s: s.jvm_thread.interrupt(), "the statement was interrupted"),
    # Spark Classic's SparkSession.interruptAll (its reason reads "cancellation of all jobs").
    # (Classic's interruptTag finds only the tags the CALLING thread added: a tag added on the
    # statement's thread cannot be interrupted from another one, for any query.)
    "session interruptAll": (lambda s: s.spark.interruptAll(), "all jobs"),
    "UI job kill": (_kill_jobs, "Web UI"),
    "UI stage kill": (_kill_stages, "Web UI"),
}

FRAGMENTS = 24  # 40 rows each: 3-4 rewrite tasks at a target of 300 rows


def _tables(warehouse, request, names: list[str]) -> tuple[str, list]:
    import hashlib

    ns = "c" + hashlib.sha1(request.node.name.encode()).hexdigest()[:10]
    paths = []
    for n in names:
        path = warehouse / ns / f"{n}.lance"
        degraded_table(str(path), fragments=FRAGMENTS)
        paths.append(path)
    return ns, paths


def _sql(kind: str, ns: str) -> str:
    if kind == "compact":
        return f"CALL lance.compact(table => '{ns}.t0', target_rows_per_fragment => 300)"
    if kind == "maintain":
        return f"CALL lance.maintain(table => '{ns}.t0', target_rows_per_fragment => 300)"
    if kind == "create_index":  # a test option: built by Spark tasks (they sleep), not in the engine
        return (f"CALL lance.create_index(table => '{ns}.t0', column => 'id', index_type => 'BTREE', "
                f"options => map('test_task_sleep_ms', 'all:{TASK_SLEEP_MS}'))")
    return (f"CALL lance.maintain_warehouse(namespace => '{ns}', target_rows_per_fragment => 300, "
            "parallelism => 3)")


RESULTS: dict[tuple[str, str, str], float] = {}


PHASES = ["during a job", "while no job runs"]
KINDS = ["compact", "maintain", "maintain_warehouse", "create_index"]


def _cases() -> list[tuple[str, str, str]]:
    """Every form in both phases, the statement kind rotating so that every (kind, phase) and
    every (form, phase) pair is tried: 14 cases. ``LANCE_COMPACT_CANCEL_MATRIX=full`` runs all
    56 (form x kind x phase); the closing figures were measured so."""
    if os.environ.get("LANCE_COMPACT_CANCEL_MATRIX") == "full":
        return [(f, k, p) for f in FORMS for k in KINDS for p in PHASES]
    return [(f, KINDS[(i + j) % len(KINDS)], p)
            for i, f in enumerate(FORMS) for j, p in enumerate(PHASES)]


@pytest.mark.parametrize("form,kind,phase", _cases())
def test_every_cancel_stops_every_statement(spark, warehouse, request, form, kind, phase):
    names = ["t0", "t1", "t2"] if kind == "maintain_warehouse" else ["t0"]
    ns, paths = _tables(warehouse, request, names)
    before = {p: lance.dataset(str(p)) for p in paths}
    group = f"g-{abs(hash(request.node.name)) % 10**8}"
    s = Statement(spark, _sql(kind, ns), group)
    if phase == "during a job":  # a rewrite job of the statement runs, its tasks asleep
        wait_for(lambda: s.jobs()[1])
        time.sleep(0.2)
    else:  # its rewrite job ended; the driver pauses before the commit, no job of it runs
        wait_for(lambda: s.jobs()[0] and not s.jobs()[1])
        time.sleep(0.3)
        assert not s.jobs()[1]
        # nothing holds a slot meanwhile: no job or task of it (or of anything else) runs
        assert not s.active_jobs() and not spark.sparkContext.statusTracker().getActiveStageIds()
        if form.startswith("UI"):
            # the UI lists no job of the statement now: there is nothing of it to kill, and it
            # commits as it would have (its jobs are killed in the other phase)
            s.join(60)
            assert s.error is None, s.error
            assert all(lance.dataset(str(p)).version > before[p].version for p in paths[:1])
            for p in paths:
                assert content(lance.dataset(str(p))) == content(before[p])
            return
    versions = {p: lance.dataset(str(p)).version for p in paths}
    jobs_at_cancel = s.jobs()[0]
    how, says = FORMS[form]
    cancelled_at = time.monotonic()
    how(s)
    s.join(60)
    seconds = s.ended - cancelled_at
    RESULTS[(form, kind, phase)] = seconds
    print(f"\n{form} cancel of {kind} {phase} -> statement failed in {seconds:.2f} s")
    message = str(s.error)
    assert s.error is not None and "cancelled" in message and says in message, message
    assert seconds < BOUND_S
    time.sleep(1)
    after = {p: lance.dataset(str(p)) for p in paths}
    assert {p: a.version for p, a in after.items()} == versions, "a commit landed after the cancel"
    assert s.jobs()[0] == jobs_at_cancel, "a job started after the cancel"
    for p in paths:
        assert content(after[p]) == content(before[p])
    # what it says was committed before is what was
    if kind in ("compact", "create_index"):
        assert "nothing was committed" in message, message
    elif kind == "maintain":
        assert "no earlier step changed the table" in message, message
    else:
        assert "no table was changed" in message, message
    assert all(v == before[p].version for p, v in versions.items())
    if kind == "create_index":
        assert not after[paths[0]].describe_indices()
    # no watch of it is left running, and the next statement works
    wait_for(lambda: not s.active_jobs(), timeout=10)
    r = compact_call(spark, f"{ns}.t0")
    assert r.commits == 1 and content(lance.dataset(str(paths[0]))) == content(before[paths[0]])


def test_a_normal_run_leaves_no_failed_job_and_no_watch(spark, warehouse, request):
    """An uncancelled CALL runs its own jobs only (no cancel watch job, CancelWatch.scala), and
    each of them succeeded."""
    ns, paths = _tables(warehouse, request, ["t0"])
    sc = spark.sparkContext
    sc.setJobGroup("normal-run", "uncancelled")
    try:
        compact_call(spark, f"{ns}.t0")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup("normal-run")
    assert jobs, "the statement ran no Spark job"
    stages = [tracker.getStageInfo(st) for j in jobs for st in tracker.getJobInfo(j).stageIds]
    # the former watch was a job of its own, submitted from CancelWatch.scala
    assert stages and not any(st is not None and "CancelWatch" in st.name for st in stages), stages
    wait_for(lambda: all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in jobs), timeout=10)


def test_a_second_signal_stops_the_maintenance_service_round(tmp_path):
    """The service in a round (3 tables, one at a time, slowed as above): SIGTERM then SIGTERM
    again as the first table's compaction commits. The round stops within a bound, nothing
    commits after the second signal, rows exact, and the process exits."""
    import json
    import signal
    import subprocess
    import sys

    from conftest import ROOT

    wh = tmp_path / "wh"
    paths = [wh / "ws" / f"t{i}.lance" for i in range(3)]
    for p in paths:
        degraded_table(str(p), fragments=FRAGMENTS)
    before = {p: lance.dataset(str(p)) for p in paths}
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
           "LANCE_COMPACT_TEST_TASK_SLEEP_MS": str(TASK_SLEEP_MS),
           "LANCE_COMPACT_TEST_DRIVER_PAUSE_MS": str(DRIVER_PAUSE_MS)}
    service = subprocess.Popen(
        [sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(wh),
         "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--every", "1h",
         "--param", "target_rows_per_fragment=300", "--param", "parallelism=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        wait_for(lambda: any(lance.dataset(str(p)).version != before[p].version for p in paths), timeout=180)
        service.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        versions = {p: lance.dataset(str(p)).version for p in paths}
        signalled = time.monotonic()
        service.send_signal(signal.SIGTERM)
        lines = []
        while True:
            line = service.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith('{"stopped"'):
                stopped = time.monotonic() - signalled
        service.wait(timeout=60)
        exited = time.monotonic() - signalled
        print(f"\nservice: second SIGTERM -> round stopped and reported in {stopped:.2f} s, "
              f"process exited in {exited:.2f} s")
        reports = [json.loads(x) for x in lines if x.startswith("{")]
        assert "cancelled" in reports[0].get("error", ""), reports
        assert reports[-1]["stopped"] is True and reports[-1]["signal"] is True
        assert stopped < BOUND_S and service.returncode == 0
        assert {p: lance.dataset(str(p)).version for p in paths} == versions, "a commit landed after the cancel"
        for p in paths:
            assert content(lance.dataset(str(p))) == content(before[p])
    finally:
        if service.poll() is None:
            service.kill()
            service.wait(timeout=30)


@pytest.mark.parametrize("form", ["job group", "job tag", "all jobs"])
def test_a_cancel_as_the_statement_starts_is_not_lost(spark, warehouse, request, form):
    """A cancel sent once Spark has begun the statement (its parse, its analysis) but before the
    engine watches it -- no job of it yet, and a session's first statement spends seconds there --
    is remembered by the pool's watch (CancelWatch.scala, ``since``): the statement is cancelled
    before it reaches a worker, nothing is committed. (Before, it ran and committed.)"""
    ns, paths = _tables(warehouse, request, ["t0"])
    before = lance.dataset(str(paths[0]))
    s = Statement(spark, _sql("compact", ns), f"g-start-{form.replace(' ', '-')}")

    def begun() -> bool:  # the statement's thread is inside Spark's parse or analysis
        frames = [str(f) for f in s.jvm_thread.getStackTrace()]
        return any("QueryPlanningTracker.measurePhase" in f for f in frames) or not s.thread.is_alive()

    wait_for(begun, timeout=30, step=0.002)
    FORMS[form][0](s)
    s.join(60)
    message = str(s.error)
    assert s.error is not None and "[LANCE_CANCELLED]" in message and "nothing" in message, message
    time.sleep(1)
    after = lance.dataset(str(paths[0]))
    assert after.version == before.version, message
    assert content(after) == content(before)
