"""The warehouse at scale (issue 25, item 6): many small tables on a local folder or an
S3-compatible store, and in one run

* a sequential pylance read of the metadata health needs (open, config, fragments, indices,
  versions, the newest transactions), table after table;
* ``SELECT * FROM lance.system.table_health`` (a warm session; the first query untimed);
* ``maintenance_history`` for two tables by a pushed filter, and all of it;
* a dry run of ``maintain_warehouse``, and one with ``max_duration => '5 seconds'``;
* ``maintain_warehouse(older_than => '0 seconds')`` against a pylance loop (compact_files,
  optimize_indices, cleanup_old_versions per table) over a second copy of the same tables.

Short run (checks it works)::

    source bin/env.sh && .venv/bin/python benchmarks/warehouse_scale.py --store s3 --tables 20

``--latency-ms 20`` puts a proxy in front of the store that delays every request by 20 ms, as
S3's round trips are (benchmarks/latency_proxy.py: one asyncio loop, 1,290 requests a second
here without the delay, not the bottleneck). ``--store s3`` is moto's server (the tests'
store): on this machine's two cores it serves about 120 listings a second, and a
warehouse-wide dry run is bound by it. ``--store s3proxy`` is S3Proxy's in-memory store
(benchmarks/s3proxy_server.py, from Maven Central), 1,380 a second: the client's own cost
shows.

The issue's shape (200 tables, ~24 fragments and ~25 versions each; long: not while others
test)::

    .venv/bin/python benchmarks/warehouse_scale.py --store s3proxy --tables 200 --fragments 24 --versions 25 --latency-ms 20
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(uri: str, tables: int, fragments: int, versions: int, storage: dict | None) -> list[str]:
    """``tables`` degraded tables ns<i%4>.t<i>: ``versions`` appends of small fragments, then a
    delete (one more version); returns their URIs."""
    import lance
    import pyarrow as pa

    uris = []
    per = max(1, fragments // max(1, versions))
    for i in range(tables):
        table_uri = f"{uri}/ns{i % 4}/t{i:03d}.lance"
        n = 0
        for v in range(versions):
            rows = per * 20
            data = pa.table({"id": pa.array(range(n, n + rows), pa.int64()),
                             "payload": pa.array([f"row {j}" for j in range(n, n + rows)])})
            lance.write_dataset(data, table_uri, mode="append" if v else "create", max_rows_per_file=20,
                                storage_options=storage)
            n += rows
        lance.dataset(table_uri, storage_options=storage).delete("id % 7 = 0")
        uris.append(table_uri)
    return uris


def upload(local_root: Path, uri: str, storage: dict) -> None:
    """Copy every file under ``local_root`` to the S3 folder ``uri`` (s3://bucket/prefix), many at
    once: tables built locally and uploaded are the same tables (a manifest names its files
    relative to the table), and the upload takes a minute where writing 200 tables of 25 versions
    through S3 took half an hour."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.config import Config

    bucket, _, prefix = uri[len("s3://"):].partition("/")
    client = boto3.client("s3", endpoint_url=storage["aws_endpoint"], region_name=storage["aws_region"],
                          aws_access_key_id=storage["aws_access_key_id"],
                          aws_secret_access_key=storage["aws_secret_access_key"],
                          config=Config(max_pool_connections=16, request_checksum_calculation="when_required",
                                        response_checksum_validation="when_required"))
    files = [f for f in local_root.rglob("*") if f.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda f: client.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(local_root)}"), files))


def pylance_metadata(uris: list[str], storage: dict | None, transactions: bool = True) -> float:
    """What health reads, with pylance, one table after the other: open, config, fragments,
    indices, versions and (``transactions``) the newest 16 transactions, where the last
    compaction is found (health reads fewer: only versions that kept their live rows)."""
    import lance

    t = time.perf_counter()
    for uri in uris:
        ds = lance.dataset(uri, storage_options=storage)
        ds.config()
        [f.metadata for f in ds.get_fragments()]
        ds.list_indices()
        ds.versions()
        if transactions:
            ds.get_transactions(min(16, ds.version))
    return time.perf_counter() - t


def pylance_loop(uris: list[str], storage: dict | None) -> float:
    """What maintain does to each table, with pylance, one table after the other:
    compact_files, optimize_indices, cleanup_old_versions (older than 0 seconds)."""
    import datetime

    import lance

    t = time.perf_counter()
    for uri in uris:
        ds = lance.dataset(uri, storage_options=storage)
        ds.optimize.compact_files()
        ds.optimize.optimize_indices()
        ds.cleanup_old_versions(older_than=datetime.timedelta(0))
    return time.perf_counter() - t


def live_rows(uris: list[str], storage: dict | None) -> list[int]:
    import lance

    return [lance.dataset(uri, storage_options=storage).count_rows() for uri in uris]


FLOOR_REQUESTS = 5  # a table's evaluation: two listings of _versions/, a HEAD and two reads of a manifest


def store_floor(uris: list[str], storage: dict) -> None:
    """The ``FLOOR_REQUESTS`` a first evaluation of each table makes, made directly from as many
    threads as the engine reads tables with, through one client (one file session for the
    store, as the engine's)."""
    from concurrent.futures import ThreadPoolExecutor
    from lance_compact.maintenance.health import METADATA_THREADS
    from lance_compact.runtime.tables import FILE_SESSIONS

    def one(uri: str) -> None:
        session, base = FILE_SESSIONS.folder(uri, storage)
        folder = f"{base}/_versions" if base else "_versions"
        listing = session.list_with_delimiter(folder).objects
        session.list_with_delimiter(folder)
        manifest = min(listing)  # a manifest (the newest, in Lance's V2 naming)
        session.contains(manifest)
        session.read_range(manifest, 0, 4096)
        session.read_range(manifest, 0, 4096)

    with ThreadPoolExecutor(METADATA_THREADS) as pool:
        list(pool.map(one, uris))


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


class Figures(dict):
    """The figures, each printed as it is measured: a run of half an hour that fails late (the
    test store answering 500s under load) keeps what it measured."""

    def __setitem__(self, path: str, runs: list[float]) -> None:
        super().__setitem__(path, runs)
        print(f"measured: {path}: {', '.join(f'{x:.3f}' for x in runs)} s", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=["local", "s3", "s3proxy"], default="local")
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--fragments", type=int, default=12, help="fragments per table (about)")
    p.add_argument("--versions", type=int, default=6, help="appends per table (each a version)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--latency-ms", type=int, default=0,
                   help="on an S3 store: every request waits this long (a proxy in front of the store), "
                        "as S3's round trips do")
    p.add_argument("--reads-only", action="store_true",
                   help="the metadata reads and dry runs only: no pylance loop, no maintain_warehouse")
    a = p.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import lance_session  # the tests' local session: same catalog settings

    server = proxy = None
    work = Path(tempfile.mkdtemp(prefix="lance-warehouse-scale-"))
    try:
        t = time.perf_counter()
        local = build(str(work / "wh"), a.tables, a.fragments, a.versions, None)
        if a.store in ("s3", "s3proxy"):
            if a.store == "s3":
                from s3_server import S3Server
                server = S3Server().start()
            else:
                from s3proxy_server import S3ProxyServer
                server = S3ProxyServer().start()
            storage = server.storage_options
            # the same tables twice: the pylance loop changes its copy, in a bucket of its own (a
            # listing costs moto time in proportion to every object of its bucket; S3's does not)
            bucket, other = server.fresh_bucket("scale"), server.fresh_bucket("scale-pylance")
            uri = bucket + "/wh"
            upload(work / "wh", f"{bucket}/wh", storage)
            if not a.reads_only:
                upload(work / "wh", f"{other}/pylance", storage)
            if a.latency_ms:
                from latency_proxy import LatencyProxy
                proxy = LatencyProxy(server.endpoint, a.latency_ms).start()  # it counts the requests made
                storage = {**storage, "aws_endpoint": proxy.endpoint}
            uris = [uri + u[len(str(work / "wh")):] for u in local]
            copies = [other + "/pylance" + u[len(str(work / "wh")):] for u in local]
        else:
            import shutil
            shutil.copytree(work / "wh", work / "pylance")
            storage, uri, uris = None, str(work / "wh"), local
            copies = [str(work / "pylance") + u[len(str(work / "wh")):] for u in local]
        print(f"built {len(uris)} tables (twice) on {a.store} in {time.perf_counter() - t:.1f} s", flush=True)

        engine_log = work / "engine.log"
        spark = lance_session("local[2]", "lance-compact-warehouse-scale", uri,
                              {"spark.lance.compact.engine.log": str(engine_log),
                               "spark.lance.compact.cleanup.versionMinAge": "0s"},  # versions seconds old
                              **({"storage_options": storage} if storage else {}))
        # warm the engine and its imports, but evaluate no table: the first dry run below is the
        # first time this engine reads the tables (what a fresh spark-sql's dry run costs)
        spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'none'").collect()
        figures = Figures()
        dry = "CALL lance.maintain_warehouse(dry_run => true)"
        first_requests = proxy.requests if proxy else 0
        figures["maintain_warehouse(dry_run => true), the engine's first read of the tables"] = timed(
            lambda: spark.sql(dry).collect(), 1)
        first_requests = proxy.requests - first_requests if proxy else None
        from lance.file import LanceFileSession
        session = LanceFileSession(uris[0], storage)
        figures["one listing of a table's _versions/ (the store's own cost)"] = [x / 10 for x in timed(
            lambda: [session.list_with_delimiter("_versions") for _ in range(10)], a.repeat)]
        figures["pylance sequential metadata read"] = timed(lambda: pylance_metadata(uris, storage), a.repeat)
        figures["pylance sequential, no transactions (a lower bound)"] = timed(
            lambda: pylance_metadata(uris, storage, transactions=False), a.repeat)
        health = spark.sql("SELECT * FROM lance.system.table_health").collect()
        assert len(health) == len(uris) and not [h for h in health if h.error], [h.error for h in health if h.error][:3]
        figures["SELECT * FROM lance.system.table_health"] = timed(
            lambda: spark.sql("SELECT * FROM lance.system.table_health").collect(), a.repeat)
        figures["table_health WHERE namespace = 'none' (listing, fixed cost)"] = timed(
            lambda: spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'none'").collect(), a.repeat)
        two = "namespace = 'ns0' AND `table` IN ('t000', 't004')"
        figures[f"maintenance_history WHERE {two}"] = timed(
            lambda: spark.sql(f"SELECT * FROM lance.system.maintenance_history WHERE {two}").collect(), a.repeat)
        figures["maintenance_history, all of it"] = timed(
            lambda: spark.sql("SELECT * FROM lance.system.maintenance_history").collect(), 1)
        before = proxy.requests if proxy else 0
        figures["maintain_warehouse(dry_run => true), again (commit times and manifests known)"] = timed(
            lambda: spark.sql(dry).collect(), a.repeat)
        dry_requests = (proxy.requests - before) / a.repeat if proxy else None
        if proxy:
            # What the store itself takes for a first evaluation's requests: per table, two listings
            # of _versions/, a HEAD and two reads of a manifest, from as many threads as the engine
            # reads tables with. A first dry run cannot beat it.
            figures["the store serving a dry run's requests from 16 threads (its floor)"] = timed(
                lambda: store_floor(uris, storage), a.repeat)
        figures["maintain_warehouse(dry_run => true, max_duration => '5 seconds')"] = timed(
            lambda: spark.sql("CALL lance.maintain_warehouse(dry_run => true, "
                              "max_duration => '5 seconds')").collect(), 1)
        together = loop = None
        if not a.reads_only:
            rows_before = live_rows(uris, storage)
            assert live_rows(copies, storage) == rows_before
            loop = [pylance_loop(copies, storage)]
            t = time.perf_counter()  # a CALL runs when spark.sql() is called, not at collect()
            result = spark.sql("CALL lance.maintain_warehouse(older_than => '0 seconds')").collect()
            together = [time.perf_counter() - t]
            assert not [r for r in result if r.error], [r.error for r in result if r.error][:3]
            assert live_rows(uris, storage) == rows_before, "maintain_warehouse changed the live rows"
            figures["pylance loop (compact_files, optimize_indices, cleanup), one run"] = loop
            figures["CALL lance.maintain_warehouse(older_than => '0 seconds'), one run"] = together
        spark.stop()
        base = statistics.median(figures["pylance sequential metadata read"])
        figures = {"pylance sequential metadata read": figures.pop("pylance sequential metadata read"), **figures}
        print(f"\n{len(uris)} tables on {a.store}" + (f" ({a.latency_ms} ms per request)" if a.latency_ms else "") + f", {sum(h.fragments for h in health):,} fragments, "
              f"{sum(h.versions for h in health):,} versions")
        print(f"{'path':72} {'median s':>9} {'vs pylance':>10}  runs")
        for name, runs in figures.items():
            m = statistics.median(runs)
            print(f"{name:72} {m:9.3f} {m / base:9.2f}x  [{', '.join(f'{x:.3f}' for x in runs)}]")
        served = [int(x) for x in re.findall(r"served table_health in (\d+) ms", engine_log.read_text())]
        print(f"the engine's own time per table_health query (all tables, then the filtered one): "
              f"{served[1:]} ms")
        if dry_requests is not None:
            print(f"requests to the store per dry run (the listing of the warehouse included): the first "
                  f"{first_requests:,} ({first_requests / len(uris):.1f} per table), again {dry_requests:,.0f} "
                  f"({dry_requests / len(uris):.1f} per table)")
            first = figures["maintain_warehouse(dry_run => true), the engine's first read of the tables"][0]
            floor = statistics.median(figures["the store serving a dry run's requests from 16 threads (its floor)"])
            print(f"the first dry run against the store serving its requests alone: {first:.3f} s / {floor:.3f} s = "
                  f"{first / floor:.2f}x ({len(uris) * FLOOR_REQUESTS / floor:,.0f} requests a second)")
        if together and loop:
            print(f"maintain_warehouse against the pylance loop over the same tables: "
                  f"{together[0]:.3f} s / {loop[0]:.3f} s = {together[0] / loop[0]:.2f}x")
    finally:
        if proxy:
            proxy.stop()
        if server:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
