"""Ten thousand small tables on an S3-compatible store with S3's round trips (issue 45): what
``maintain_warehouse`` (dry run and real), ``lance.system.table_health`` and the maintenance
service's round cost the first time an engine worker reads the warehouse and the times after,
when only tables that changed are read again (maintenance/health_cache.py), against pylance
loops over the same tables; the requests each makes, counted by the latency proxy.

The tables: ``--tables`` small tables ``ns<i % 4>/t<i>`` (healthy ones: three appends of a
20-row fragment, three versions, a quarter of them then compacted by pylance's
``compact_files``, five versions, so table_health must find a compaction it did not make; every
``--degraded-every``-th one degraded: 24 fragments of 20 rows in four appends and a delete, five
versions, so compaction is due). A few template
tables are written once with pylance on local disk and each table is uploaded from one of them
to the store (Lance's own client, 16 at a time): a manifest names its files relative to the
table, so every copy is a table of its own (writing ten thousand tables through the store takes
hours here). S3Proxy's in-memory store (benchmarks/s3proxy_server.py), the latency proxy in
front of it (benchmarks/latency_proxy.py: ``--latency-ms`` per request, counted).

In one run, each figure printed as it is measured (wall seconds, requests to the store):

* ``maintain_warehouse(dry_run => true)``: the engine worker's first read of the tables, again,
  and ``SELECT * FROM lance.system.table_health`` (which also looks up the last compaction, so
  its first read of each table is its own), again;
* pylance reading what health reads (open, config, fragments, indices, ``versions()``) table
  after table on a sample (``--sample``), and from 16 threads over every table (one session);
* ``CALL lance.maintain_warehouse()`` (the policy's defaults: the degraded tables compacted)
  against a pylance loop of ``compact_files``, ``optimize_indices`` and ``cleanup_old_versions``
  from 16 threads over a copy of the first ``--pylance-copy`` tables (another bucket);
* a dry run after it (the maintained tables were evaluated after their steps: kept too);
* ``--changed`` tables appended to by pylance, then one round of the maintenance service
  (``maintenance_service.Service``, the same ``maintain_warehouse``): it reads those again only.

``--health-only``: the dry runs, ``table_health`` and a pylance loop over every table of what it
reads (the last compaction included, found the same), 16 threads, one session; no maintenance.
``--health-first``: the same with ``table_health`` as the worker's first read.

    flock /tmp/lance-bench.lock .venv/bin/python benchmarks/many_tables.py --tables 10000 --latency-ms 20
    flock /tmp/lance-bench.lock .venv/bin/python benchmarks/many_tables.py --tables 10000 --latency-ms 20 --health-only --sample 0
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

HEALTHY_TEMPLATES, DEGRADED_TEMPLATES = 4, 2
COMPACTED_TEMPLATE = 3  # this healthy template's three fragments compacted by pylance's compact_files
THREADS = 16  # the engine's full reads at once (health.METADATA_THREADS)


def templates(work: Path) -> tuple[list[Path], list[Path]]:
    """The template tables, written with pylance on local disk."""
    import lance
    import pyarrow as pa

    def rows(start: int, n: int, seed: int) -> pa.Table:
        return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                         "payload": pa.array([f"row {seed} {j}" for j in range(start, start + n)])})

    healthy, degraded = [], []
    for k in range(HEALTHY_TEMPLATES):
        uri = work / f"healthy{k}.lance"
        for v in range(3):
            lance.write_dataset(rows(v * 20, 20, k), str(uri), mode="append" if v else "create")
        if k == COMPACTED_TEMPLATE:  # compacted by pylance, not by us: table_health must find it
            lance.dataset(str(uri)).optimize.compact_files()
        healthy.append(uri)
    for k in range(DEGRADED_TEMPLATES):
        uri = work / f"degraded{k}.lance"
        for v in range(4):
            lance.write_dataset(rows(v * 120, 120, k), str(uri), mode="append" if v else "create",
                                max_rows_per_file=20)
        lance.dataset(str(uri)).delete("id % 7 = 0")
        degraded.append(uri)
    return healthy, degraded


def layout(n: int, degraded_every: int, healthy: list[Path], degraded: list[Path]) -> list[tuple[str, Path]]:
    """(the table's path under the warehouse, its template) for each table."""
    out = []
    for i in range(n):
        template = degraded[i % len(degraded)] if degraded_every and i % degraded_every == 0 else healthy[i % len(healthy)]
        out.append((f"ns{i % 4}/t{i:05d}.lance", template))
    return out


def upload(tables: list[tuple[str, Path]], bucket: str, prefix: str, storage: dict) -> int:
    """Every file of each table's template to ``bucket/prefix/<table>``; the objects written."""
    from lance.file import LanceFileSession

    session = LanceFileSession(bucket, storage)
    files = {t: [f for f in t.rglob("*") if f.is_file()] for t in {t for _, t in tables}}
    jobs = [(str(f), f"{prefix}/{path}/{f.relative_to(t)}") for path, t in tables for f in files[t]]
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda j: session.upload_file(*j), jobs))
    return len(jobs)


def pylance_health_reads(uris: list[str], storage: dict, threads: int, last_compaction: bool = False) -> dict:
    """What health reads, with pylance: open, config, fragments, indices, versions() (every
    manifest, for the versions' ages) and (``last_compaction``, table_health's) the newest
    Rewrite: ``read_transaction`` newest first until one (pylance 14.0.2 cannot decode a Rewrite
    that remapped an index: its TypeError counts as one), ``threads`` tables at a time, one
    Lance session. The last compaction found, by URI."""
    import lance

    session = lance.Session()
    found = {}

    def one(uri: str) -> None:
        ds = lance.dataset(uri, storage_options=storage, session=session)
        ds.config()
        [f.metadata for f in ds.get_fragments()]
        ds.describe_indices()
        ds.versions()
        if last_compaction:
            found[uri] = None
            for v in range(ds.version, 0, -1):
                try:
                    t = ds.read_transaction(v)
                except TypeError:
                    found[uri] = v
                    break
                if t is not None and type(t.operation).__name__ == "Rewrite":
                    found[uri] = v
                    break

    if threads == 1:
        for uri in uris:
            one(uri)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, uris))
    return found


def pylance_maintenance(uris: list[str], storage: dict) -> None:
    """compact_files, optimize_indices, cleanup_old_versions (pylance's defaults) per table,
    16 tables at a time, one Lance session."""
    import lance

    session = lance.Session()

    def one(uri: str) -> None:
        ds = lance.dataset(uri, storage_options=storage, session=session)
        ds.optimize.compact_files()
        ds.optimize.optimize_indices()
        ds.cleanup_old_versions()

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, uris))


class Run:
    """Figures printed as they are measured: wall seconds and the requests the store got."""

    def __init__(self, proxy, tables: int) -> None:
        self.proxy, self.tables, self.rows = proxy, tables, []

    def __call__(self, name: str, fn, tables: int | None = None):
        before, t = self.proxy.requests, time.perf_counter()
        out = fn()
        seconds, requests = time.perf_counter() - t, self.proxy.requests - before
        n = tables or self.tables
        self.rows.append((name, seconds, requests, n))
        print(f"measured: {name}: {seconds:.2f} s, {requests:,} requests ({requests / n:.2f} a table of {n:,}); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=10_000)
    p.add_argument("--degraded-every", type=int, default=50, help="every N-th table degraded (0: none)")
    p.add_argument("--latency-ms", type=int, default=20)
    p.add_argument("--sample", type=int, default=300, help="tables read one after the other by pylance")
    p.add_argument("--pylance-copy", type=int, default=None,
                   help="tables copied for the pylance maintenance loop (default: all)")
    p.add_argument("--changed", type=int, default=100, help="tables appended to before the service's round")
    p.add_argument("--evaluations-only", action="store_true",
                   help="the dry runs and the service's round only: no table_health, pylance loops or maintenance")
    p.add_argument("--health-first", action="store_true",
                   help="with --health-only: table_health (and the pylance loop) before the dry runs, as the "
                        "worker's first read of the tables")
    p.add_argument("--health-only", action="store_true",
                   help="the dry runs, table_health and the pylance loop of health's reads (the last compaction "
                        "included) over every table only: no maintenance, no service round")
    a = p.parse_args()

    from conftest import lance_session
    from latency_proxy import LatencyProxy
    from s3proxy_server import S3ProxyServer

    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="lance-many-tables-"))
    server = proxy = spark = None
    try:
        t = time.perf_counter()
        healthy, degraded = templates(work)
        tables = layout(a.tables, a.degraded_every, healthy, degraded)
        server = S3ProxyServer().start()
        storage = server.storage_options
        bucket, other = server.fresh_bucket("many"), server.fresh_bucket("many-pylance")
        objects = upload(tables, bucket, "wh", storage)
        a.health_only = a.health_only or a.health_first
        copies = [] if a.evaluations_only or a.health_only else tables[:a.pylance_copy] if a.pylance_copy is not None else tables
        objects += upload(copies, other, "wh", storage) if copies else 0
        built = time.perf_counter() - t
        print(f"built {len(tables):,} tables ({sum(t in degraded for _, t in tables):,} degraded) and a copy of "
              f"{len(copies):,}: {objects:,} objects uploaded in {built:.1f} s", flush=True)
        proxy = LatencyProxy(server.endpoint, a.latency_ms).start()
        storage = {**storage, "aws_endpoint": proxy.endpoint}
        uris = [f"{bucket}/wh/{path}" for path, _ in tables]
        copy_uris = [f"{other}/wh/{path}" for path, _ in copies]

        engine_log = work / "engine.log"
        spark = lance_session("local[2]", "lance-compact-many-tables", f"{bucket}/wh",
                              {"spark.lance.compact.engine.log": str(engine_log)}, storage_options=storage)
        # the engine up, no table read: the first dry run below is this worker's first read
        spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'none'").collect()
        run = Run(proxy, len(tables))
        dry = "CALL lance.maintain_warehouse(dry_run => true)"
        if a.health_first:  # table_health as the worker's first read; the dry runs then served from it
            health_reads(run, spark, storage, uris, tables, healthy)
        first = run("maintain_warehouse(dry_run => true), " + ("after table_health" if a.health_first else
                                                                 "the worker's first read"), lambda: spark.sql(dry).collect())
        due = {r.table for r in first if r.step == "compact" and r.reason.startswith("due")}
        assert not [r for r in first if r.error], [r.error for r in first if r.error][:3]
        assert len(due) == sum(t in degraded for _, t in tables), len(due)
        again = run("maintain_warehouse(dry_run => true), again", lambda: spark.sql(dry).collect())
        assert list(map(_no_elapsed, again)) == list(map(_no_elapsed, first)), "a served row differs"
        if a.health_only:
            if not a.health_first:
                health_reads(run, spark, storage, uris, tables, healthy)
        elif not a.evaluations_only:
            table_health_and_maintenance(a, run, spark, storage, server, uris, copy_uris, tables, degraded, due, dry)
        changed = [] if a.health_only else uris[1::max(1, len(uris) // max(1, a.changed))][:a.changed]
        import lance
        import pyarrow as pa
        for u in changed:  # straight to the store: not counted
            lance.write_dataset(pa.table({"id": pa.array([10**6], pa.int64()), "payload": ["new"]}), u,
                                mode="append", storage_options=server.storage_options)
        if not a.health_only:
            from lance_compact.maintenance_service import Service
            service = Service(spark, None, {}, every=0, min_interval=0, backoff=60, max_backoff=3600)
            report = run(f"the maintenance service's round ({len(changed)} tables appended to)", lambda: service.round(1))
            assert report["tables"] == len(tables) and not report["failed"], report
        kept = re.findall(r"health of (\d+) tables kept \(at most \d+\); (\d+) evaluations served from it, "
                          r"(\d+) read the table", engine_log.read_text())
        print(f"\n{len(tables):,} tables on S3Proxy, {a.latency_ms} ms a request; built in {built:.0f} s; "
              f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'path':86} {'seconds':>8} {'requests':>9} {'a table':>8}")
        for name, seconds, requests, n in run.rows:
            print(f"{name:86} {seconds:8.2f} {requests:9,} {requests / n:8.2f}")
        if kept:
            print("the engine's last log of its health cache: %s tables kept, %s evaluations served, %s read" % kept[-1])
        evaluated = re.findall(r"maintain_warehouse: (\d+) tables evaluated in (\d+) ms", engine_log.read_text())
        print("maintain_warehouse's evaluation in the engine, each call: "
              + ", ".join(f"{int(n):,} tables in {int(ms) / 1000:.2f} s" for n, ms in evaluated))
        served = re.findall(r"served (\w+) in (\d+) ms", engine_log.read_text())
        print("the engine's time per statement: " + ", ".join(f"{w} {int(ms) / 1000:.2f} s" for w, ms in served))
    finally:
        if spark is not None:
            spark.stop()
        if proxy:
            proxy.stop()
        if server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def health_reads(run, spark, storage, uris, tables, healthy) -> None:
    """table_health twice (its last-compaction look-up: the tables of the compacted template must
    show pylance's compaction, the others none), and pylance reading what it reads, the last
    compaction included, from as many threads as the engine reads tables at once, over every
    table; both find the same last compactions."""
    health = run("SELECT * FROM lance.system.table_health, first (its last-compaction look-up)",
                 lambda: spark.sql("SELECT * FROM lance.system.table_health").collect())
    assert len(health) == len(tables) and not [h for h in health if h.error], [h.error for h in health if h.error][:3]
    run("SELECT * FROM lance.system.table_health, again",
        lambda: spark.sql("SELECT * FROM lance.system.table_health").collect())
    found = run(f"pylance: health's reads and the last compaction, {THREADS} threads, every table",
                lambda: pylance_health_reads(uris, storage, THREADS, last_compaction=True))
    compacted = {path[:-len(".lance")].rsplit("/", 1)[-1] for path, t in tables if t == healthy[COMPACTED_TEMPLATE]}
    ours = {h.table: h.last_compacted_version for h in health}
    assert {t for t, v in ours.items() if v is not None} == compacted, "table_health missed a pylance compaction"
    by_name = {u[:-len(".lance")].rsplit("/", 1)[-1]: v for u, v in found.items()}
    assert ours == by_name, [(t, ours[t], by_name.get(t)) for t in ours if ours[t] != by_name.get(t)][:3]
    print(f"last compactions found: {len(compacted):,} tables (pylance's compact_files), the same as pylance's "
          f"read_transaction walk", flush=True)


def table_health_and_maintenance(a, run, spark, storage, server, uris, copy_uris, tables, degraded, due, dry) -> None:
    """table_health twice, the pylance reads, maintain_warehouse and the pylance loop, a dry run after."""
    health = run("SELECT * FROM lance.system.table_health, first (its last-compaction look-up)",
                 lambda: spark.sql("SELECT * FROM lance.system.table_health").collect())
    assert len(health) == len(tables) and not [h for h in health if h.error]
    run("SELECT * FROM lance.system.table_health, again",
        lambda: spark.sql("SELECT * FROM lance.system.table_health").collect())
    sample = uris[:a.sample]
    run(f"pylance: health's reads, one table after the other ({len(sample)} tables)",
        lambda: pylance_health_reads(sample, storage, 1), len(sample))
    run(f"pylance: health's reads, {THREADS} threads", lambda: pylance_health_reads(uris, storage, THREADS))

    import lance
    live = {u: lance.dataset(u, storage_options=server.storage_options).count_rows()
            for u in uris[::a.degraded_every or 1][:50]}  # degraded ones (and healthy without any)
    result = run("CALL lance.maintain_warehouse()", lambda: spark.sql("CALL lance.maintain_warehouse()").collect())
    assert not [r for r in result if r.error], [r.error for r in result if r.error][:3]
    maintained = {r.table for r in result if r.ran}
    assert maintained == due, (len(maintained), len(due))
    for u, n in live.items():  # no row lost or made
        assert lance.dataset(u, storage_options=server.storage_options).count_rows() == n, u
    run(f"pylance: compact_files, optimize_indices, cleanup_old_versions, {THREADS} threads",
        lambda: pylance_maintenance(copy_uris, storage), len(copy_uris))
    after = run("maintain_warehouse(dry_run => true) after it", lambda: spark.sql(dry).collect())
    assert not [r for r in after if r.step == "compact" and r.reason.startswith("due")]


def _no_elapsed(row) -> tuple:
    return tuple(v for k, v in row.asDict().items() if k != "elapsed_ms")


if __name__ == "__main__":
    raise SystemExit(main())
