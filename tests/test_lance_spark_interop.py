"""One shared root, two catalogs: real lance-spark (Spark 3.5, `org.lance:lance-spark-3.5_2.12`,
its directory catalog `impl=dir`) writes; our catalog (Spark 4, same `impl`/`root`/
`single_level_ns` settings) lists, compacts and reads; lance-spark reads what we committed and
writes again; we read that. Both layouts: lance-spark's default (`__manifest`, table
`db.events`) and `single_level_ns=true` (`<root>/flat.lance`, table `default.flat`).

lance-spark has no Spark 4 build, so its side runs in its own venv (.cache/spark35-venv, pyspark
3.5) as a subprocess (tests/lance_spark_side.py). The venv and the jars Spark's own
`spark.jars.packages` resolution fetched are cached in .cache/, so only the first run downloads.
A failed download fails the test with the error; nothing is skipped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pytest
from lance import namespace as lance_ns

from conftest import ROOT
from lance_compact.api import CATALOG_CLASS

# lance-spark's venv (pip) and jars (Maven, through spark.jars.packages) come from the registries.
pytestmark = pytest.mark.network

PYSPARK = "3.5.9"
PACKAGE = "org.lance:lance-spark-3.5_2.12:0.4.0"
# The venv and the jars are kept here between runs (a fresh clone starts cold: point this
# variable at a folder outside the work tree to keep them across clones).
CACHE = Path(os.environ.get("LANCE_SPARK_INTEROP_CACHE") or ROOT / ".cache")
VENV = CACHE / "spark35-venv"
IVY = CACHE / ("lance-spark-" + PACKAGE.rsplit(":", 1)[1]) / "ivy"
JARS_RECORD = IVY.parent / "jars.json"
SIDE = Path(__file__).with_name("lance_spark_side.py")

LAYOUTS = {"multi": ("ours_multi", "db.events", False), "flat": ("ours_flat", "default.flat", True)}


def _tail(text: str, n: int = 4000) -> str:
    return text[-n:] if text else ""


def _run(cmd, timeout: int, what: str, log: Path | None = None, env=None) -> str:
    """Run cmd with a bounded wait; on failure pytest.fail with the command's own error."""
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=str(log.parent) if log else None)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{what}: no answer in {timeout} s: {' '.join(map(str, cmd))}\n"
                    f"{_tail(e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or '')}")
    if log:
        log.write_text(p.stderr)
    if p.returncode != 0:
        errors = [line for line in p.stderr.splitlines()
                  if any(k in line for k in ("Exception", "Error", "ERROR", "unresolved", "not found"))]
        pytest.fail(f"{what} failed (exit {p.returncode}): {' '.join(map(str, cmd))[:500]}\n"
                    f"error lines:\n" + "\n".join(errors[-40:]) + f"\n--- stderr tail ---\n{_tail(p.stderr)}"
                    f"\n--- stdout tail ---\n{_tail(p.stdout, 2000)}")
    return p.stdout


def _side_env() -> dict:
    """The Spark 3.5 venv's own environment: nothing of the project's Spark 4 (SPARK_HOME,
    PYSPARK_*, PYTHONPATH from bin/env.sh or conftest) may leak into it; the JVM flags of
    SPARK_SUBMIT_OPTS (the tests' C1-only JIT, conftest) point at nothing and stay."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "LANCE_COMPACT_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
           or k == "SPARK_SUBMIT_OPTS"}
    py = str(VENV / "bin" / "python")
    env.update(PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py, SPARK_LOCAL_IP="127.0.0.1",
               PATH=str(VENV / "bin") + os.pathsep + env.get("PATH", ""))
    return env


def _result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("LANCE_SPARK_RESULT ")]
    assert lines, f"no result line from lance_spark_side.py:\n{_tail(stdout)}"
    return json.loads(lines[-1].split(" ", 1)[1])


@pytest.fixture(scope="module")
def lance_spark(tmp_path_factory):
    """Runs tests/lance_spark_side.py with real lance-spark: prepares (once, cached in .cache/)
    a venv with pyspark 3.5 and the lance-spark jars resolved by Spark's spark.jars.packages."""
    logs = tmp_path_factory.mktemp("lance_spark_logs")
    py = VENV / "bin" / "python"
    probe = [py, "-c", "import pyspark; print(pyspark.__version__)"]
    if not (py.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == PYSPARK):
        _run([sys.executable, "-m", "venv", "--clear", VENV], 300, "creating the Spark 3.5 venv")
        _run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", f"pyspark=={PYSPARK}"], 900,
             f"pip install pyspark=={PYSPARK} into {VENV}")
    env = _side_env()
    jars = json.loads(JARS_RECORD.read_text()) if JARS_RECORD.exists() else []
    if not jars or not all(Path(j).exists() for j in jars):
        IVY.mkdir(parents=True, exist_ok=True)
        out = _run([py, SIDE, "resolve", "--packages", PACKAGE, "--ivy", IVY], 1200,
                   f"resolving {PACKAGE} with spark.jars.packages", logs / "resolve.log", env)
        jars = _result(out)["jars"]
        assert any("lance-spark-3.5" in j for j in jars) and any("lance-core" in j for j in jars), jars
        JARS_RECORD.write_text(json.dumps(jars, indent=1))

    def run(command: str, **roots) -> dict:
        args = [py, SIDE, command, "--jars", ",".join(jars)]
        for layout, root in roots.items():
            args += [f"--{layout}", root]
        result = _result(_run(args, 900, f"lance-spark {command}", logs / f"{command}.log", env))
        print(f"lance-spark {command}: Spark {result['spark']}, session {result['session_s']} s, "
              f"total {result['elapsed_s']} s")
        return result

    return run


@pytest.fixture(scope="module")
def roots(tmp_path_factory, spark):
    """The two shared roots, and our catalogs over them in the module's Spark 4 session."""
    out = {}
    for layout, (cat, _, single) in LAYOUTS.items():
        root = tmp_path_factory.mktemp(f"shared_{layout}")
        spark.conf.set(f"spark.sql.catalog.{cat}", CATALOG_CLASS)
        spark.conf.set(f"spark.sql.catalog.{cat}.impl", "dir")
        spark.conf.set(f"spark.sql.catalog.{cat}.root", str(root))
        spark.conf.set(f"spark.sql.catalog.{cat}.single_level_ns", str(single).lower())
        out[layout] = root
    return out


@pytest.fixture(scope="module")
def written(lance_spark, roots):
    """lance-spark creates both tables: 12 INSERTs (12 fragments), then a DELETE."""
    return lance_spark("write", **{k: str(v) for k, v in roots.items()})["layouts"]


def _location(root: Path, layout: str) -> str:
    if layout == "flat":
        return str(root / "flat.lance")
    ns = lance_ns.DirectoryNamespace(root=str(root))
    return ns.describe_table(lance_ns.DescribeTableRequest(id=["db", "events"])).location


def _ids(spark, table: str) -> list[int]:
    return sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect())


def _fragments(spark, table: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {table}.fragments").collect()[0][0]


@pytest.fixture(scope="module")
def compacted(spark, roots, written):
    """Our catalog compacts both of lance-spark's tables."""
    out = {}
    for layout, (cat, ident, _) in LAYOUTS.items():
        table = f"{cat}.{ident}"
        before = {"fragments": _fragments(spark, table), "ids": _ids(spark, table),
                  "version": lance.dataset(_location(roots[layout], layout)).version}
        row = spark.sql(f"CALL {cat}.compact(table => '{ident}', target_rows_per_fragment => 100000)").collect()[0]
        out[layout] = {"before": before, "call": row.asDict(), "fragments": _fragments(spark, table),
                       "ids": _ids(spark, table), "count": spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0],
                       "version": lance.dataset(_location(roots[layout], layout)).version}
    return out


@pytest.fixture(scope="module")
def checked(lance_spark, roots, compacted):
    """lance-spark reads both tables after our compaction, then inserts and deletes."""
    return lance_spark("check", **{k: str(v) for k, v in roots.items()})["layouts"]


LAYOUT_NAMES = list(LAYOUTS)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_ours_lists_lance_spark_tables_under_the_same_names(spark, written, layout):
    cat, ident, single = LAYOUTS[layout]
    w = written[layout]
    assert w["table"] == ident and w["count"] == 12 * 50 - len(range(0, 600, 7)) == len(w["ids"])
    ns = ident.split(".")[0]
    ours_tables = sorted(f"{r.namespace}.{r.tableName}" for r in spark.sql(f"SHOW TABLES IN {cat}.{ns}").collect())
    assert ours_tables == w["tables"] == [ident]
    ours_ns = [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {cat}").collect()]
    if single:
        # lance-spark lists no namespace at the top of a single-level root (0.4.0: []); ours lists
        # the virtual one, `default`, which both catalogs use in the table's name.
        assert ours_ns == ["default"] and w["namespaces"] in ([], ["default"])
    else:
        assert ours_ns == w["namespaces"] == ["db"]
    assert _ids(spark, f"{cat}.{ident}") == w["ids"]


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_ours_compacts_lance_spark_tables(spark, written, compacted, layout):
    c, w = compacted[layout], written[layout]
    assert c["before"]["fragments"] >= 10, c
    assert c["fragments"] < c["before"]["fragments"] and c["fragments"] == 1, c
    assert c["call"]["fragments_removed"] == c["before"]["fragments"] and c["call"]["fragments_added"] == 1
    assert c["call"]["new_version"] == c["version"] > c["before"]["version"]
    assert c["count"] == w["count"] and c["ids"] == c["before"]["ids"] == w["ids"]
    cat, ident, _ = LAYOUTS[layout]
    # every column as lance-spark wrote it
    ok = spark.sql(f"SELECT count(*) FROM {cat}.{ident} WHERE size(vector) = 8 AND vector[0] = CAST(id AS FLOAT) "
                   f"AND payload = concat('payload-', CAST(id AS STRING))").collect()[0][0]
    assert ok == w["count"]


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_lance_spark_reads_and_writes_after_our_compaction(compacted, checked, layout):
    k, c = checked[layout], compacted[layout]
    assert k["count"] == c["count"] and k["ids"] == c["ids"] and k["vectors_ok"] == c["count"]
    want = sorted((set(c["ids"]) | set(k["inserted"])) - {k["deleted"]})
    assert k["ids_after"] == want and k["count_after"] == len(want)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_ours_sees_lance_spark_writes_and_compacts_again(spark, roots, checked, layout):
    cat, ident, _ = LAYOUTS[layout]
    table = f"{cat}.{ident}"
    k = checked[layout]
    assert _ids(spark, table) == k["ids_after"]
    assert _fragments(spark, table) >= 2
    row = spark.sql(f"CALL {cat}.compact(table => '{ident}', target_rows_per_fragment => 100000)").collect()[0]
    assert row.fragments_added == 1 and _fragments(spark, table) == 1
    assert _ids(spark, table) == k["ids_after"]
    assert lance.dataset(_location(roots[layout], layout)).count_rows() == k["count_after"]
