"""Chaos, bounded in time: the spark-sql driver JVM (bin/lance-spark-sql) SIGKILLed at random
moments of a CALL lance.compact, with and without partial progress, writers appending and
deleting between rounds; and two spark-sql applications compacting one table at once.

Afterwards no row is lost or duplicated, no process of a killed application is left behind
(found by session: the JVM's engine and Python workers are re-parented when it dies), and
cleanup leaves no orphan and no missing file.

    LANCE_COMPACT_CHAOS_ROUNDS=10 LANCE_COMPACT_CHAOS_SEED=7 pytest tests/test_chaos.py

3 rounds by default (CI); the seed (default 19) fixes the kill moments and the writers."""
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import lance
import pytest

from conftest import CLEANUP_FLOOR_KEY, ROOT, VERSION_FLOOR_KEY
from oracle import batch, content, degraded_table
from table_files import cleanup_everything, orphans_and_missing, rewrites_since

ROUNDS = int(os.environ.get("LANCE_COMPACT_CHAOS_ROUNDS", "3"))
SEED = int(os.environ.get("LANCE_COMPACT_CHAOS_SEED", "19"))
CALL_TIMEOUT = 300  # a whole spark-sql run
GONE_TIMEOUT = 30  # a killed application's processes must end within this
KILL_WINDOW = 2.0  # seconds after the plan within which the kill falls
# Task 0 of a killed round sleeps this long before it writes (a test hook; the other tasks write
# meanwhile): the CALL outlasts the kill window on an idle machine too, so kills land mid-run.
TASK_0_SLEEP_MS = 2500


def lance_spark_sql(warehouse: Path, sql: str, engine_log: Path, conf: dict[str, str] | None = None) -> subprocess.Popen:
    """spark-sql in its own session (so every process it starts can be found by session id)."""
    return subprocess.Popen(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "--hiveconf", "hive.cli.print.header=true",
         "--conf", f"spark.lance.compact.engine.log={engine_log}",
         "--conf", f"{CLEANUP_FLOOR_KEY}=0 seconds",  # the operator's: cleanup_everything's orphans are young
         "--conf", f"{VERSION_FLOOR_KEY}=0s",  # and so are its versions
         *[a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")],
         "-e", sql],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


# Processes seen in a session so far, by session: engine workers leave the driver's session
# (os.setsid, so a terminal's Ctrl-C is the JVM's to handle) and are re-parented when it dies;
# once seen they are watched until gone.
_SEEN: dict[int, set[int]] = {}


def session_processes(sid: int) -> dict[int, str]:
    """Live (not zombie) processes of session ``sid``, their descendants (the pool's engine
    workers, in sessions of their own) and every such process seen before: pid -> command line."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            if fields[0] != "Z":
                table[int(entry.name)] = (int(fields[1]), int(fields[3]))  # ppid, session
        except (OSError, ValueError, IndexError):
            continue
    members = {pid for pid, (_, session) in table.items() if session == sid}
    while True:
        more = {pid for pid, (ppid, _) in table.items() if ppid in members} - members
        if not more:
            break
        members |= more
    seen = _SEEN.setdefault(sid, set())
    seen |= members
    out = {}
    for pid in seen & set(table):
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def diagnose(pid: int) -> str:
    """Why a process is still there: its state, its threads' states and kernel wait channels,
    and who else holds its stdin (the pipe whose end should have closed)."""
    proc = Path(f"/proc/{pid}")
    try:
        state = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("State"))
        threads = sorted(
            f"{(t / 'comm').read_text().strip()}:{(t / 'stat').read_text().rsplit(')', 1)[1].split()[0]}"
            f"/{(t / 'wchan').read_text().strip() or '-'}" for t in (proc / "task").iterdir())
        stdin = os.readlink(proc / "fd" / "0")
    except (OSError, StopIteration) as e:
        return f"pid {pid}: gone or unreadable ({e})"
    holders = []
    for other in Path("/proc").iterdir():
        if not other.name.isdigit() or int(other.name) == pid:
            continue
        try:
            fds = list((other / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == stdin:
                    holders.append(f"{other.name} {(other / 'cmdline').read_bytes()[:120]!r}")
                    break
            except OSError:
                continue
    return f"pid {pid}: {state}; threads {threads}; stdin {stdin} also held by {holders or 'nobody'}"


def wait_until_gone(sid: int, timeout: float = GONE_TIMEOUT) -> dict[int, str]:
    """Wait for session ``sid`` to have no process; returns what is left (killed, then),
    each with a diagnosis."""
    deadline = time.monotonic() + timeout
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: f"{cmd} [{diagnose(pid)}]" for pid, cmd in left.items()}
    for pid in left:  # ours: end them so that a failure here leaves nothing running
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> bool:
    """Until ``text`` appears in the file at ``path`` (True) or ``proc`` ends (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    raise AssertionError(f"'{text}' did not appear in {path} within {timeout} s")


def result_rows(stdout: str) -> list[dict]:
    """The CALL lance.compact result rows in spark-sql's output (header on)."""
    lines = stdout.strip().splitlines()
    return [dict(zip(line.split("\t"), lines[i + 1].split("\t")))
            for i, line in enumerate(lines[:-1]) if line.startswith("table\tstrategy\t")]


def write_between_rounds(uri: str, rng: random.Random, round_: int) -> None:
    """A writer's turn: append a batch of new rows, delete a random slice."""
    lance.write_dataset(batch(1_000_000 + round_ * 1000, 60, seed=round_), uri, mode="append",
                        max_rows_per_file=30)
    ds = lance.dataset(uri)
    k = rng.randrange(7, 13)
    ds.delete(f"id % {k} = {rng.randrange(k)}")


@pytest.fixture(scope="module")
def chaos_warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("chaos-warehouse")
    (wh / "db").mkdir()
    return wh


def compact_sql(table: str, partial: bool, slow: bool = False) -> str:
    return (f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300"
            + (", partial_progress => true, max_commits => 4" if partial else "")
            + (f", options => map('test_task_sleep_ms', '0:{TASK_0_SLEEP_MS}')" if slow else "") + ")")


def finish_and_clean(warehouse: Path, table: str, tmp: Path) -> subprocess.CompletedProcess:
    """An undisturbed compaction, then cleanup of everything unreferenced."""
    p = lance_spark_sql(warehouse, compact_sql(table, False) + "; " + cleanup_everything(table),
                        tmp / "final-engine.log")
    out, err = p.communicate(timeout=CALL_TIMEOUT)
    assert p.returncode == 0, err[-3000:]
    assert not wait_until_gone(p.pid)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_driver_killed_at_random_moments(chaos_warehouse, tmp_path):
    started = time.monotonic()
    rng = random.Random(SEED)
    uri = str(chaos_warehouse / "db" / "killed.lance")
    degraded_table(uri, fragments=80, rows_per_fragment=40)
    expected = content(lance.dataset(uri))
    outcomes = []
    for round_ in range(ROUNDS):
        partial = round_ % 2 == 1
        version = lance.dataset(uri).version
        log = tmp_path / f"engine-{round_}.log"
        clock = time.monotonic()
        p = lance_spark_sql(chaos_warehouse, compact_sql("db.killed", partial, slow=True), log)
        try:
            delay = rng.uniform(0, KILL_WINDOW)
            planned = wait_for(log, ": planned ", p, CALL_TIMEOUT)
            to_plan = time.monotonic() - clock
            alive = session_processes(p.pid) if planned and not _sleep_or_end(p, delay) else {}
            if p.pid in alive:  # (it may have ended just now: then it finished)
                # The launcher scripts exec'd into the driver JVM; the engine runs beside it.
                assert "SparkSubmit" in alive[p.pid], alive
                engine = any("lance_compact.engine" in c for c in alive.values())
                os.kill(p.pid, signal.SIGKILL)
                outcome = (f"killed {delay:.1f} s after the plan ({len(alive)} processes"
                           + (", the engine's among them)" if engine else ")"))
            else:
                outcome = "finished before the kill"
            p.communicate(timeout=CALL_TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=60)
        left = wait_until_gone(p.pid)
        assert not left, (f"round {round_} ({outcome}): processes left behind: {left}; the engine's log ends: "
                          + "".join(log.read_text(errors="replace").splitlines(True)[-15:]))
        ds = lance.dataset(uri)
        landed = rewrites_since(ds, version)
        orphans, missing = orphans_and_missing(uri)
        assert not missing, missing
        assert content(ds) == expected, f"round {round_}: the rows changed ({outcome})"
        outcomes.append((round_, "partial" if partial else "single", f"{to_plan:.0f} s", outcome, landed,
                         len(orphans), f"{time.monotonic() - clock:.0f} s"))
        write_between_rounds(uri, rng, round_)
        expected = content(lance.dataset(uri))
    print("\nchaos: round | commit mode | start to plan | outcome | compactions landed | "
          "files not in the latest version | round time")
    for row in outcomes:
        print(" | ".join(map(str, row)))
    # Not hollow: at least one kill hit a running CALL, its engine alive beside the JVM.
    assert any("the engine's among them" in o[3] for o in outcomes), "no round was killed mid-run"
    finish_and_clean(chaos_warehouse, "db.killed", tmp_path)
    orphans, missing = orphans_and_missing(uri)
    assert not orphans and not missing, (orphans, missing)
    assert content(lance.dataset(uri)) == expected
    print(f"chaos: {ROUNDS} rounds and the final cleanup in {time.monotonic() - started:.0f} s")


def _sleep_or_end(p: subprocess.Popen, seconds: float) -> bool:
    """Sleep ``seconds``; True if ``p`` ended meanwhile."""
    try:
        p.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_two_applications_compacting_one_table_at_once(chaos_warehouse, tmp_path):
    started = time.monotonic()
    uri = str(chaos_warehouse / "db" / "shared.lance")
    before = degraded_table(uri, fragments=80, rows_per_fragment=40)
    expected = content(before)
    apps = [lance_spark_sql(chaos_warehouse, compact_sql("db.shared", False), tmp_path / f"engine-{i}.log")
            for i in range(2)]
    results = []
    try:
        for p in apps:
            out, err = p.communicate(timeout=CALL_TIMEOUT)
            results.append((p.returncode, result_rows(out), err))
    finally:
        for p in apps:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=60)
    for p in apps:
        assert not wait_until_gone(p.pid)
    after = lance.dataset(uri)
    landed = rewrites_since(after, before.version)
    assert content(after) == expected
    rows = []
    for code, found, err in results:
        if code != 0:  # allowed only when it says why: a concurrent writer
            assert "concurrent" in err.lower(), err[-3000:]
            continue
        assert len(found) == 1, err[-3000:]
        rows.append(found[0])
    commits = [int(r["commits"]) for r in rows]
    print(f"\ntwo applications: exit codes {[c for c, _, _ in results]}, commits {commits}, "
          f"tasks {[r['tasks'] for r in rows]}, retries {[r['retries'] for r in rows]}, "
          f"conflicts {[r['conflicts'] for r in rows]}; {time.monotonic() - started:.0f} s")
    assert landed >= 1 and sum(commits) == landed
    for r in rows:
        if r["commits"] == "0":  # it planned after the other committed, or re-planned and said so
            assert r["tasks"] == "0" and (r["read_version"] == r["new_version"]), r
            assert r["retries"] == "0" or r["conflicts"] not in ("", "NULL"), r
    assert len(after.get_fragments()) < len(before.get_fragments())
    orphans, missing = orphans_and_missing(uri)
    assert not missing, missing


# Times or measures the machine: run alone, not beside other modules (bin/test).
pytestmark = pytest.mark.serial


def _kill_driver_when(p: subprocess.Popen, ready, what: str) -> None:
    """SIGKILL spark-sql's JVM ``p`` once ``ready()`` holds (within CALL_TIMEOUT; ``what`` is
    said if it ended or timed out first); ``p`` is reaped either way."""
    try:
        deadline = time.monotonic() + CALL_TIMEOUT
        while not ready() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert p.poll() is None and ready(), f"{what}: " + p.communicate()[1][-3000:]
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=60)


def _segments(uri: str) -> set[str]:
    folder = Path(uri) / "_indices"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def test_driver_killed_during_an_index_build_commits_nothing_and_cleanup_removes_its_segments(
        chaos_warehouse, tmp_path):
    """CALL lance.create_index on Spark tasks, its driver SIGKILLed while the first task sleeps
    and the others have written their segments: no index committed, the version unchanged, no
    process left; the segments left behind are removed by cleanup; a new build then answers."""
    uri = str(chaos_warehouse / "db" / "indexed.lance")
    degraded_table(uri, fragments=8, rows_per_fragment=500, delete_every=0)
    version = lance.dataset(uri).version
    log = tmp_path / "engine-index.log"
    build = ("CALL lance.create_index(table => 'db.indexed', column => 'id', index_type => 'BTREE', "
             "options => map('rows_per_segment', '1000'{}))")
    p = lance_spark_sql(chaos_warehouse, build.format(", 'test_task_sleep_ms', '0:120000'"), log,
                        {"spark.lance.compact.engineRewrite.maxBatchBytes": "0"})
    _kill_driver_when(p, lambda: len(_segments(uri)) >= 3, "tasks 1-3 did not write their segments before the end")
    assert not wait_until_gone(p.pid)
    ds = lance.dataset(uri)
    assert ds.version == version and not ds.describe_indices()
    left = _segments(uri)
    assert len(left) == 3  # the killed build's segments, referenced by no version
    done = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(chaos_warehouse),
                           "--master", "local[2]", "--conf", f"{CLEANUP_FLOOR_KEY}=0 seconds",
                           "--conf", f"{VERSION_FLOOR_KEY}=0s", "-e",
                           cleanup_everything("db.indexed") + "; " + build.format("")],
                          capture_output=True, text=True, timeout=CALL_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    ds = lance.dataset(uri)
    assert not left & _segments(uri)  # removed by cleanup; the new build's are there instead
    assert {s for i in ds.describe_indices() for s in map(lambda x: str(x.uuid), i.segments)} == _segments(uri)
    for f in ("id = 7", "id < 30", "id >= 3990"):
        assert ds.to_table(filter=f, columns=["id"]).sort_by("id") == \
            ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f


def _engine_workers(jvm: int) -> set[int]:
    """The engine workers the driver JVM ``jvm`` started (its children running
    lance_compact.engine; they leave its session: os.setsid)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            if parent == jvm and b"lance_compact.engine" in (entry / "cmdline").read_bytes():
                out.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _gone(pids: set[int], timeout: float = GONE_TIMEOUT) -> set[int]:
    """Those of ``pids`` still alive (not zombies) after at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = set()
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.add(pid)
            except OSError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_driver_killed_during_a_build_in_its_engine_worker_leaves_no_worker_and_no_files(chaos_warehouse, tmp_path):
    """The pool's parent killed (issue 42): spark-sql's JVM SIGKILLed while its engine worker
    builds the issue's heavy IVF_HNSW_FLAT itself (engineMaxSeconds raised): the worker exits
    (its stdin's end closed, or orphaned), nothing is committed, and the worker removed the
    segment folder it had staged before exiting (no pool is left to do it)."""
    uri = str(chaos_warehouse / "db" / "hnsw.lance")
    degraded_table(uri, fragments=5, rows_per_fragment=1000, delete_every=0)
    version = lance.dataset(uri).version
    p = lance_spark_sql(chaos_warehouse, "CREATE INDEX hnsw ON lance.db.hnsw USING IVF_HNSW_FLAT (vector) "
                        "OPTIONS (num_partitions 1, m 256, ef_construction 5000)", tmp_path / "engine-hnsw.log",
                        {"spark.lance.compact.index.engineMaxSeconds": "1000000"})
    workers: set[int] = set()

    def building() -> bool:  # the worker's segment folder is there: its workers, before the kill
        if _segments(uri):
            workers.update(_engine_workers(p.pid))
        return bool(workers)

    _kill_driver_when(p, building, "the build did not start (or no engine worker of the driver was found)")
    left = _gone(workers)
    assert not left, {pid: diagnose(pid) for pid in left}
    assert not wait_until_gone(p.pid)
    ds = lance.dataset(uri)
    assert ds.version == version and not ds.describe_indices()
    assert not _segments(uri), "the killed build's staged folder was left behind"
