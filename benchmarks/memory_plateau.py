"""Memory over hours (issue 33, item 7): the engine under a real Spark session running the
procedures a streaming table's upkeep calls, and the maintenance service over a warehouse of
its own, side by side, while both warehouses keep getting appends and deletes.

    source bin/env.sh && nice -n 10 .venv/bin/python benchmarks/memory_plateau.py \\
        --until 11:38 --csv benchmarks/results/memory_plateau.csv

Every round (one a ``--every`` seconds at most) appends ``--rows`` rows to every table of both
warehouses and deletes a fifth of them plus one older row, then, in the driver's session:
``compact`` of every table, a clustering ``compact(sort_order => 'tenant')`` of one table in
turn, ``maintain``, ``cleanup`` and ``describe_layout`` of every table, ``optimize_indices``
of the tables with an index, and one ``SELECT`` of ``lance.system.table_health``. The service
(``python -m lance_compact.maintenance_service``) runs ``maintain_warehouse`` over the other
warehouse every ``--service-every``.

Once a minute one CSV row: resident set (MiB) of this driver, its JVM and its engine, of the
service's Python, JVM and engine; each JVM's heap and metaspace in use (``jstat``); each
engine's anonymous memory (``/proc/PID/smaps_rollup``) and its own last logged figures
(runtime/memory.py: RSS after trimming, the Lance session caches). At the end, the rows are
checked (nothing lost).

``--users N`` (issue 42: the engine is a pool of workers, one statement each): N users at once,
each a thread of the driver's session with a job group of its own (``userK``) keeping its own
table ``db.tK`` (N tables, each with a BTREE on id): a round of its own every ``--every``
seconds, appends and deletes, then ``compact``, a clustering ``compact(sort_order => 'tenant')``,
``maintain``, ``cleanup``, ``describe_layout``, ``optimize_indices`` and ``table_health``. Each
minute's row then also gives every worker of the pool (``EnginePool.workersJson``: their
count, RSS each, sum and largest, statements served), the workers started so far (the log's
"engine ready" lines: replacements show), those replaced for their memory ceiling, and the
total of the driver's processes (its Python, its JVM, its workers). ``--no-service`` leaves
the maintenance service out:

    source bin/env.sh && nice -n 10 .venv/bin/python benchmarks/memory_plateau.py --users 4 \\
        --no-service --every 30 --max-statements 100000 --until 11:15 \\
        --csv benchmarks/results/memory_pool_4users.csv

``--summary CSV`` prints, for each process, the median of the half hour
after ``--warmup`` minutes against that of the last half hour, and the linear-fit slope over
the last hour:

    .venv/bin/python benchmarks/memory_plateau.py --summary benchmarks/results/memory_plateau.csv
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from memory_soak import engine_pid  # noqa: E402

MIB = 2 ** 20
INDEXED = 2  # tables t0 and t1 carry a BTREE on id


def rss(pid: int | None) -> float:
    from lance_compact.runtime.memory import rss_bytes

    return rss_bytes(pid) / MIB if pid else 0.0


def anonymous(pid: int | None) -> float:
    """Anonymous memory (the heaps, native and Python), MiB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) / 1024
    except (OSError, TypeError):
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def java_under(pid: int) -> int | None:
    """The JVM PySpark started under process ``pid`` (spark-submit execs java)."""
    todo = [pid]
    while todo:
        p = todo.pop()
        for c in children(p):
            try:
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0].endswith(b"java"):
                        return c
            except OSError:
                continue
            todo.append(c)
    return None


def jstat(pid: int | None) -> tuple[float, float]:
    """A JVM's heap in use and metaspace in use, MiB (0, 0 when jstat cannot tell)."""
    if not pid:
        return 0.0, 0.0
    try:
        out = subprocess.run(["nice", "-n", "10", "jstat", "-gc", str(pid)], capture_output=True, text=True,
                             timeout=30).stdout.split("\n")
        row = dict(zip(out[0].split(), map(float, out[1].split())))
        heap = sum(row.get(k, 0.0) for k in ("S0U", "S1U", "EU", "OU"))
        return heap / 1024, row.get("MU", 0.0) / 1024
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return 0.0, 0.0


def engine_pids(jvm: int) -> list[int]:
    """Every engine worker (``python -m lance_compact.engine``) the driver JVM ``jvm`` started."""
    out = []
    for c in children(jvm):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                if b"lance_compact.engine" in f.read():
                    out.append(c)
        except OSError:
            continue
    return sorted(out)


def pool_workers(spark) -> list[dict]:
    """The pool's workers now: ``[{pid, leased, served, table}]`` (EnginePool.workersJson)."""
    import json

    pool = spark._jvm.io.github.lancecompact.spark.engine.EnginePool.of(spark._jsparkSession)
    return json.loads(pool.workersJson())


def log_counts(log: Path) -> tuple[int, int]:
    """Workers started so far (their "engine ready" lines) and those that asked to be replaced
    for their memory ceiling, from the pool's log."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0, 0
    return text.count("engine ready (pid"), text.count("over the engine's ceiling")


def logged(log: Path) -> tuple[float, float, float, float]:
    """The engine's last logged RSS (after its trim), Lance session caches and C heap in use,
    MiB, and Python's allocated blocks, thousands."""
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if "memory: rss" in x]
    except OSError:
        return 0.0, 0.0, 0.0, 0.0
    if not lines:
        return 0.0, 0.0, 0.0, 0.0

    def figure(pattern: str, scale: float = 1.0) -> float:
        m = re.search(pattern, lines[-1])
        return float(m.group(1)) / scale if m else 0.0

    return (figure(r"memory: rss (\d+) MiB"), figure(r"Lance session caches (\d+) MiB"),
            figure(r"C heap (\d+) MiB in use"), figure(r"Python (\d+) blocks", 1000.0))


def histogram(pid: int | None, path: Path) -> None:
    """A JVM's live objects by class (a full GC first), for comparing start and end."""
    if pid:
        with open(path, "w") as f:
            subprocess.run(["nice", "-n", "10", "jcmd", str(pid), "GC.class_histogram"], stdout=f,
                           stderr=subprocess.DEVNULL, timeout=120)


def append(uri: str, start: int, rows: int, create: bool = False) -> None:
    import lance
    import pyarrow as pa

    ids = range(start, start + rows)
    data = pa.table({"id": pa.array(ids, pa.int64()), "tenant": pa.array([i % 7 for i in ids], pa.int64()),
                     "ts": pa.array([i * 1000 for i in ids], pa.int64()),
                     "payload": pa.array([f"row {i} of a streaming table" for i in ids])})
    lance.write_dataset(data, uri, mode="create" if create else "append")


def feed(uri: str, start: int, rows: int) -> None:
    """Append ``rows`` rows from ``start`` and delete a fifth of them and one older row (a
    stream with late corrections): 11 rows gone a round once ``start`` > 0."""
    import lance

    append(uri, start, rows)
    where = f"(id >= {start} AND id < {start + rows} AND id % 5 = 0)"
    if start:
        where += f" OR id = {start - 47}"  # = 3 (mod 5) when rows is 50: never deleted before
    lance.dataset(uri).delete(where)


SUMMARISED = ("jvm_rss", "workers_rss_sum", "workers_rss_max", "total_rss", "engine_rss", "engine_logged_rss", "engine_c_heap", "engine_py_kblocks", "jvm_rss", "jvm_metaspace", "driver_rss", "service_engine_rss",
              "service_engine_logged_rss", "service_engine_c_heap", "service_engine_py_kblocks", "service_jvm_rss", "service_jvm_metaspace", "service_py_rss")


def summary(path: str, warmup: float = 10, window: float = 30, fit: float = 60) -> str:  # noqa: C901
    """Each process's level (MiB): the median over ``window`` minutes after ``warmup`` against
    the median over the last ``window`` minutes, and the least-squares slope over the last
    ``fit`` minutes (MiB an hour)."""
    import statistics

    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    minute = [float(r["minute"]) for r in rows]
    end = minute[-1]
    lines = [f"{path}: {len(rows)} samples over {end:.0f} minutes, {rows[-1]['rounds']} rounds, "
             f"{rows[-1]['calls']} calls ({rows[-1]['failed_calls']} failed), {rows[-1]['service_rounds']} service rounds"
             + (f"; pool: {rows[-1]['workers']} workers at the end (at most "
                f"{max(int(r['workers']) for r in rows)}), {rows[-1]['workers_started']} started, "
                f"{rows[-1]['ceiling_replacements']} over their memory ceiling" if "workers" in rows[0] else ""),
             f"{'MiB':28s} {'minutes %g-%g' % (warmup, warmup + window):>14s} {'last %g' % window:>10s} "
             f"{'change':>8s} {'slope, last %g min' % fit:>20s}"]
    seen = set()
    for col in SUMMARISED:
        if col not in rows[0] or col in seen:
            continue
        seen.add(col)
        values = [(m, float(r[col])) for m, r in zip(minute, rows) if float(r[col]) > 0]
        first = [v for m, v in values if warmup <= m < warmup + window]
        last = [v for m, v in values if m > end - window]
        tail = [(m, v) for m, v in values if m > end - fit]
        if not first or not last or len(tail) < 3:
            continue
        slope = statistics.linear_regression([m for m, _ in tail], [v for _, v in tail]).slope * 60
        a, b = statistics.median(first), statistics.median(last)
        lines.append(f"{col:28s} {a:14.1f} {b:10.1f} {b - a:+8.1f} {slope:+15.2f} an hour")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary", metavar="CSV", help="summarise a finished soak's CSV and exit")
    p.add_argument("--warmup", type=float, default=10, help="--summary: minutes left out at the start")
    p.add_argument("--until", help="UTC HH:MM at which the soak stops starting rounds")
    p.add_argument("--csv")
    p.add_argument("--every", type=float, default=60, help="seconds from one round's start to the next's")
    p.add_argument("--service-every", default="60s")
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--rows", type=int, default=50)
    p.add_argument("--cache", default="8m", help="the engines' metadata and index cache bounds")
    p.add_argument("--ceiling", help="the engines' memory ceiling (spark.lance.compact.engine.memoryCeiling): "
                                     "an engine over it is replaced between statements; default the product's")
    p.add_argument("--work", help="a working folder (default: a new temporary one)")
    p.add_argument("--users", type=int, default=0,
                   help="N concurrent users, each a thread with its own job group keeping its own table (sets --tables N)")
    p.add_argument("--no-service", action="store_true", help="no maintenance service beside the driver")
    p.add_argument("--max-statements", type=int,
                   help="spark.lance.compact.engine.maxStatements (a worker replaced after so many statements)")
    p.add_argument("--fit", type=float, default=60, help="--summary: minutes of the slope's fit, at the end")
    a = p.parse_args()
    if a.summary:
        print(summary(a.summary, a.warmup, fit=a.fit))
        return 0
    if not a.until or not a.csv:
        p.error("--until and --csv are required for a soak")
    assert a.rows == 50, "feed()'s older-row delete assumes 50 rows a round"
    if a.users:
        a.tables = a.users
    indexed = a.tables if a.users else INDEXED
    now = dt.datetime.now(dt.timezone.utc)
    hh, mm = map(int, a.until.split(":"))
    deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if deadline <= now:
        deadline += dt.timedelta(days=1)

    from conftest import NO_CLEANUP_FLOOR, lance_session

    import lance

    work = Path(a.work or tempfile.mkdtemp(prefix="lance-memory-plateau-"))
    work.mkdir(parents=True, exist_ok=True)
    whs = {"engine": work / "wh-engine", **({} if a.no_service else {"service": work / "wh-service"})}
    uris = {k: [str(wh / "db" / f"t{i}.lance") for i in range(a.tables)] for k, wh in whs.items()}
    for k, wh in whs.items():
        (wh / "db").mkdir(parents=True)
        for i, uri in enumerate(uris[k]):
            append(uri, 0, a.rows, create=True)
            for r in range(1, 4):
                feed(uri, r * a.rows, a.rows)
            if i < indexed:
                lance.dataset(uri).create_scalar_index("id", "BTREE")
    caches = {"spark.lance.compact.engine.metadataCacheBytes": a.cache,
              "spark.lance.compact.engine.indexCacheBytes": a.cache,
              **({"spark.lance.compact.engine.memoryCeiling": a.ceiling} if a.ceiling else {}),
              **({"spark.lance.compact.engine.maxStatements": str(a.max_statements)} if a.max_statements else {})}
    engine_log, service_log = work / "engine.log", work / "service-engine.log"
    spark = lance_session("local[2]", "lance-compact-memory-plateau", str(whs["engine"]),
                          {"spark.sql.shuffle.partitions": "2", **NO_CLEANUP_FLOOR, **caches,
                           "spark.ui.showConsoleProgress": "false",
                           "spark.lance.compact.engine.log": str(engine_log)})
    spark.sql(f"ALTER TABLE lance.db.t{min(2, a.tables - 1)} CLUSTER BY (tenant)").collect()

    # The service, as an operator starts it (Spark's UI left on, as by default).
    service_conf = {**NO_CLEANUP_FLOOR, **caches, "spark.lance.compact.engine.log": str(service_log),
                    "spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    cmd = [sys.executable, "-m", "lance_compact.maintenance_service", "--warehouse", str(whs.get("service")),
           "--master", "local[2]", "--every", a.service_every, "--min-interval", "0s",
           "--param", "older_than=0 seconds"]
    for k, v in service_conf.items():
        cmd += ["--conf", f"{k}={v}"]
    service_out = open(work / "service.out", "w")
    service = None if a.no_service else subprocess.Popen(cmd, stdout=service_out, stderr=subprocess.STDOUT)

    jvm = spark.sparkContext._gateway.proc.pid
    spark.sql("CALL lance.describe_layout(table => 'db.t0')").collect()
    engine = engine_pid(jvm)
    print(f"work {work}; driver {os.getpid()}, JVM {jvm}, engine {engine}; "
          f"service {service.pid if service else None}; until {deadline:%H:%M} UTC", flush=True)
    # Which code runs: the package, the jar, each worker's command line and Python path.
    import lance_compact
    print(f"lance_compact {lance_compact.__file__}; spark.jars {spark.conf.get('spark.jars')}", flush=True)
    for pid in engine_pids(jvm):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        with open(f"/proc/{pid}/environ", "rb") as f:
            path = [e for e in f.read().split(b"\0") if e.startswith(b"PYTHONPATH=")]
        print(f"worker {pid}: {cmdline}; cwd {os.readlink(f'/proc/{pid}/cwd')}; "
              f"{path[0].decode() if path else 'no PYTHONPATH'}", flush=True)

    state = {"rounds": 0, "calls": 0, "failed": 0, "minute": 0}
    lock = threading.Lock()
    done = threading.Event()
    svc = {"jvm": None, "engine": None}
    # an engine over its ceiling is replaced: the engines of each JVM, as they come
    engines: dict[str, set[int]] = {"driver": {engine}, "service": set()}
    start = time.monotonic()
    Path(a.csv).parent.mkdir(parents=True, exist_ok=True)
    columns = ["utc", "minute", "rounds", "calls", "failed_calls", "service_rounds",
               "workers", "workers_alive", "workers_leased", "workers_served", "workers_rss_sum", "workers_rss_max",
               "workers_anon_sum", "workers_started", "ceiling_replacements", "total_rss", "worker_rss",
               "driver_rss", "jvm_rss", "jvm_heap", "jvm_metaspace", "engine_rss", "engine_anon",
               "engine_logged_rss", "engine_caches", "engine_c_heap", "engine_py_kblocks",
               "service_py_rss", "service_jvm_rss", "service_jvm_heap", "service_jvm_metaspace",
               "service_engine_rss", "service_engine_anon", "service_engine_logged_rss", "service_engine_caches",
               "service_engine_c_heap", "service_engine_py_kblocks",
               "load1", "engines_started", "service_engines_started"]

    def service_rounds() -> int:
        try:
            return (work / "service.out").read_text(errors="replace").count('{"round"')
        except OSError:
            return 0

    def sample(writer: csv.writer) -> None:
        nonlocal engine
        if svc["jvm"] is None and service is not None:
            svc["jvm"] = java_under(service.pid)
        if svc["jvm"] is not None:
            svc["engine"] = engine_pid(svc["jvm"]) or svc["engine"]
            if svc["engine"]:
                engines["service"].add(svc["engine"])
        engine = engine_pid(jvm) or engine
        engines["driver"].add(engine)
        jh, jm = jstat(jvm)
        sh, sm = jstat(svc["jvm"])
        el, ec, eh, eb = logged(engine_log)
        sl, sc, sh_, sb = logged(service_log)
        with lock:
            counts = dict(state)
        try:
            listed = pool_workers(spark)
        except Exception as e:  # the pool's answer is a figure like the others: the row is still written
            print(f"workersJson failed: {e}", flush=True)
            listed = []
        # every worker process of the JVM (one being started is not listed by the pool yet)
        alive = sorted(set(engine_pids(jvm)) | {w["pid"] for w in listed})
        each = {pid: rss(pid) for pid in alive}
        started, over = log_counts(engine_log)
        driver_py = rss(os.getpid())
        row = [dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S"), round((time.monotonic() - start) / 60, 2),
               counts["rounds"], counts["calls"], counts["failed"], service_rounds(),
               len(listed), sum(1 for v in each.values() if v > 0), sum(1 for w in listed if w["leased"]),
               sum(w["served"] for w in listed), sum(each.values()), max(each.values(), default=0.0),
               sum(anonymous(pid) for pid in alive), started, over, driver_py + rss(jvm) + sum(each.values()),
               " ".join(f"{pid}:{v:.0f}" for pid, v in each.items()),
               rss(os.getpid()), rss(jvm), jh, jm, rss(engine), anonymous(engine), el, ec, eh, eb,
               rss(service.pid if service else None), rss(svc["jvm"]), sh, sm, rss(svc["engine"]), anonymous(svc["engine"]), sl, sc, sh_, sb,
               os.getloadavg()[0], len(engines["driver"]), len(engines["service"])]
        writer.writerow([round(x, 2) if isinstance(x, float) else x for x in row])

    def sampler() -> None:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            minute = 0
            while not done.wait(max(0.0, start + 60 * (minute + 1) - time.monotonic())):
                minute += 1
                sample(w)
                f.flush()
                if minute == 15:
                    histogram(jvm, work / "jvm-histogram-15.txt")
                    histogram(svc["jvm"], work / "service-jvm-histogram-15.txt")
            sample(w)

    t = threading.Thread(target=sampler, daemon=True)
    t.start()

    def call(sql: str) -> None:
        try:
            spark.sql(sql).collect()
            ok = True
        except Exception as e:  # a conflict with the feeder is possible: counted, the soak goes on
            ok = False
            print(f"{dt.datetime.now(dt.timezone.utc):%H:%M:%S} failed: {sql}: {str(e).splitlines()[0][:300]}",
                  flush=True)
        with lock:
            state["calls"] += 1
            state["failed"] += 0 if ok else 1

    def running() -> bool:
        return dt.datetime.now(dt.timezone.utc) < deadline and (service is None or service.poll() is None)

    fed = [4 * a.rows] * a.tables  # each table's next id
    rounds_of = [0] * a.tables  # rounds each table was fed

    def upkeep(tables: list[int], n: int) -> None:
        """One round over ``tables``: feed each, then the procedures of a streaming table's upkeep."""
        for k in uris:  # the service's warehouse, if any, is fed the same
            for i in tables:
                feed(uris[k][i], fed[i], a.rows)
        for i in tables:
            fed[i] += a.rows
            rounds_of[i] += 1
        for i in tables:
            call(f"CALL lance.compact(table => 'db.t{i}')")
        call(f"CALL lance.compact(table => 'db.t{tables[n % len(tables)]}', sort_order => 'tenant')")
        for i in tables:
            call(f"CALL lance.maintain(table => 'db.t{i}')")
            call(f"CALL lance.cleanup(table => 'db.t{i}', older_than => '0 seconds')")
            call(f"CALL lance.describe_layout(table => 'db.t{i}')")
        for i in tables:
            if i < indexed:
                call(f"CALL lance.optimize_indices(table => 'db.t{i}')")
        call("SELECT * FROM lance.system.table_health")
        with lock:
            state["rounds"] += 1

    def user(u: int) -> None:
        """User ``u``: its own table, its own job group, a round every ``--every`` seconds."""
        spark.sparkContext.setJobGroup(f"user{u}", f"user {u}: upkeep of db.t{u}")
        n = 0
        while running():
            began = time.monotonic()
            upkeep([u], n)
            n += 1
            time.sleep(max(0.0, a.every - (time.monotonic() - began)))

    if a.users:
        # PySpark pins each Python thread to a JVM thread (PYSPARK_PIN_THREAD): job groups are the thread's
        lanes = [threading.Thread(target=user, args=(u,), name=f"user{u}") for u in range(a.users)]
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
    else:
        n = 0
        while running():
            began = time.monotonic()
            upkeep(list(range(a.tables)), n)
            n += 1
            time.sleep(max(0.0, a.every - (time.monotonic() - began)))
    histogram(jvm, work / "jvm-histogram-end.txt")
    histogram(svc["jvm"], work / "service-jvm-histogram-end.txt")
    done.set()
    t.join()
    if service is not None:
        service.terminate()
        try:
            service.wait(120)
        except subprocess.TimeoutExpired:
            service.kill()
    # Nothing lost: 50 appended a round, 10 of them and one older row deleted (none in round 0).
    for k in uris:
        for i, uri in enumerate(uris[k]):
            expected = a.rows + 3 * (a.rows - 11) + rounds_of[i] * (a.rows - 11)
            got = lance.dataset(uri).count_rows()
            print(f"{uri}: {got} rows (expected {expected})", "OK" if got == expected else "MISMATCH", flush=True)
    spark.stop()
    print(f"{state['rounds']} rounds, {state['calls']} calls, {state['failed']} failed; "
          f"service {service_rounds()} rounds; CSV {a.csv}; work {work}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
