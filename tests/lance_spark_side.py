"""lance-spark's side of tests/test_lance_spark_interop.py: real lance-spark (Spark 3.5, its
directory catalog `impl=dir`) driven through Spark SQL, run by the Spark 3.5 venv's python
(not the project's venv: lance-spark has no Spark 4 build).

    python lance_spark_side.py resolve --packages org.lance:lance-spark-3.5_2.12:0.4.0 --ivy DIR
    python lance_spark_side.py write --jars A.jar,B.jar --multi ROOT1 --flat ROOT2
    python lance_spark_side.py check --jars A.jar,B.jar --multi ROOT1 --flat ROOT2

`--multi ROOT` is lance-spark's default layout (namespaces and tables in ROOT/__manifest), table
`db.events`; `--flat ROOT` is `single_level_ns=true` (ROOT/<t>.lance), table `default.flat`.
One Spark session serves both. The result is one line on stdout: `LANCE_SPARK_RESULT {json}`.

- resolve: Spark's own `spark.jars.packages` resolution into `--ivy`; prints the jars it put on
  the class path (the test caches them and passes them with `--jars` afterwards).
- write: creates the table, `--inserts` INSERTs of `--rows` rows each (one Spark partition each,
  so one Lance fragment each), then deletes `id % 7 = 0`; prints what lance-spark lists and reads.
- check: reads count and ids, then INSERTs 20 rows and DELETEs the smallest id (a row of the
  fragments someone else compacted), and reads again.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from urllib.parse import urlparse

VECTOR_DIM = 8
NEW_IDS = (100_000, 100_020)


def session(args, roots: dict):
    from pyspark.sql import SparkSession

    scratch = tempfile.mkdtemp(prefix="lance-spark-side-")
    b = (SparkSession.builder.master("local[2]").appName("lance-spark-side")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.warehouse.dir", os.path.join(scratch, "spark-warehouse"))
         .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
         .config("spark.sql.extensions", "org.lance.spark.extensions.LanceSparkSessionExtensions"))
    if args.packages:
        b = b.config("spark.jars.packages", args.packages).config("spark.jars.ivy", args.ivy)
    else:
        b = b.config("spark.jars", args.jars)
    for name, (root, single) in roots.items():
        b = (b.config(f"spark.sql.catalog.{name}", "org.lance.spark.LanceNamespaceSparkCatalog")
             .config(f"spark.sql.catalog.{name}.impl", "dir")
             .config(f"spark.sql.catalog.{name}.root", root))
        if single:
            b = b.config(f"spark.sql.catalog.{name}.single_level_ns", "true")
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def layouts(args) -> dict:
    """catalog name -> (root, single_level_ns, table identifier)."""
    out = {}
    if args.multi:
        out["ls_multi"] = (args.multi, False, "db.events")
    if args.flat:
        out["ls_flat"] = (args.flat, True, "default.flat")
    return out


def ids(s, table: str) -> list[int]:
    return sorted(r[0] for r in s.sql(f"SELECT id FROM {table}").collect())


def insert(s, table: str, lo: int, hi: int):
    # range(lo, hi, 1, 1): one partition, so one write task and one Lance fragment.
    s.sql(f"INSERT INTO {table} SELECT id, concat('payload-', CAST(id AS STRING)), "
          f"transform(sequence(0, {VECTOR_DIM - 1}), i -> CAST(id + i AS FLOAT)) "
          f"FROM range({lo}, {hi}, 1, 1)")


def write(s, cat: str, single: bool, ident: str, args) -> dict:
    table = f"{cat}.{ident}"
    ns = ident.split(".")[0]
    if not single:
        s.sql(f"CREATE NAMESPACE {cat}.{ns}")
    s.sql(f"CREATE TABLE {table} (id BIGINT, payload STRING, vector ARRAY<FLOAT>) "
          f"TBLPROPERTIES ('vector.arrow.fixed-size-list.size' = '{VECTOR_DIM}')")
    for i in range(args.inserts):
        insert(s, table, i * args.rows, (i + 1) * args.rows)
    s.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    got = ids(s, table)
    return {"table": ident,
            "namespaces": sorted(r[0] for r in s.sql(f"SHOW NAMESPACES IN {cat}").collect()),
            "tables": sorted(f"{r[0]}.{r[1]}" for r in s.sql(f"SHOW TABLES IN {cat}.{ns}").collect()),
            "count": s.sql(f"SELECT count(*) FROM {table}").collect()[0][0],
            "ids": got}


def check(s, cat: str, single: bool, ident: str, args) -> dict:
    table = f"{cat}.{ident}"
    before = ids(s, table)
    out = {"table": ident, "count": s.sql(f"SELECT count(*) FROM {table}").collect()[0][0],
           "ids": before,
           "vectors_ok": s.sql(f"SELECT count(*) FROM {table} WHERE size(vector) = {VECTOR_DIM} "
                               f"AND vector[0] = CAST(id AS FLOAT) AND payload = concat('payload-', "
                               f"CAST(id AS STRING))").collect()[0][0]}
    insert(s, table, *NEW_IDS)
    deleted = before[0]
    s.sql(f"DELETE FROM {table} WHERE id = {deleted}")
    out.update(inserted=list(range(*NEW_IDS)), deleted=deleted,
               count_after=s.sql(f"SELECT count(*) FROM {table}").collect()[0][0],
               ids_after=ids(s, table))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["resolve", "write", "check"])
    p.add_argument("--packages", help="Maven coordinates for spark.jars.packages (resolve)")
    p.add_argument("--ivy", help="spark.jars.ivy: where Spark's resolver caches (resolve)")
    p.add_argument("--jars", help="comma-separated jars for spark.jars (write, check)")
    p.add_argument("--multi", help="root of lance-spark's default (multi-level) layout")
    p.add_argument("--flat", help="root of a single_level_ns=true layout")
    p.add_argument("--inserts", type=int, default=12)
    p.add_argument("--rows", type=int, default=50)
    args = p.parse_args(argv)
    if bool(args.packages) == bool(args.jars):
        p.error("give exactly one of --packages (with --ivy) and --jars")
    t0 = time.time()
    lay = layouts(args)
    s = session(args, {c: (r, single) for c, (r, single, _) in lay.items()})
    try:
        result: dict = {"spark": s.version, "session_s": round(time.time() - t0, 2)}
        if args.command == "resolve":
            jars = s.sparkContext.getConf().get("spark.jars", "")
            result["jars"] = [urlparse(j).path if j.startswith("file:") else j for j in jars.split(",") if j]
            # The classes load: lance-spark's catalog answers on an empty root.
            with tempfile.TemporaryDirectory() as root:
                s.conf.set("spark.sql.catalog.probe", "org.lance.spark.LanceNamespaceSparkCatalog")
                s.conf.set("spark.sql.catalog.probe.impl", "dir")
                s.conf.set("spark.sql.catalog.probe.root", root)
                result["probe_namespaces"] = [r[0] for r in s.sql("SHOW NAMESPACES IN probe").collect()]
        else:
            step = write if args.command == "write" else check
            result["layouts"] = {("flat" if single else "multi"): step(s, cat, single, ident, args)
                                 for cat, (_, single, ident) in lay.items()}
        result["elapsed_s"] = round(time.time() - t0, 2)
    finally:
        s.stop()  # also when a step fails: no JVM left behind
    print("LANCE_SPARK_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
