"""pip install brings it all: the wheel from bin/build-wheel, installed into a fresh venv outside
the source tree, runs compaction with nothing from the checkout: the `lance-spark-sql`
command and a PySpark session from configure_spark_with_lance_compact, both on the jar
inside the wheel. The wheel on a platform's own Spark and Arrow, and on its declared floors:
tests/test_wheel_platform.py (a module of its own so that the two run side by side)."""
from __future__ import annotations

import io
import json
import os
import re
import sys
import textwrap
import zipfile
from pathlib import Path

import lance
import pytest

from conftest import ROOT
from oracle import content, degraded_table
from wheel_build import CONSTRAINTS, built_wheel, clean_env, local_path, run


def pins(lines) -> dict[str, str]:
    """name -> version of the `name==version` lines (extras dropped, names normalized)."""
    out = {}
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*==\s*([^\s;#]+)", line)
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return out


def test_constraints_pin_what_pyproject_asks_for():
    """constraints.txt pins every exact pin of pyproject.toml at the same version, and every
    runtime dependency and the `spark` extra's pyspark (the one build.sbt compiles against)
    inside its range. Only pylance is exact; pyspark is no runtime dependency: a platform's
    own Spark and Arrow stay (test_wheel_platform.py)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the test extra installs tomli there
        import tomli as tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["spark"]
    deps = runtime + project["optional-dependencies"]["test"]
    constrained = pins(CONSTRAINTS.read_text().splitlines())
    for name, version in pins(deps).items():
        assert constrained.get(name) == version, f"{name}=={version} in pyproject.toml, constraints.txt: {constrained.get(name)}"
    for dep in map(Requirement, runtime):
        assert dep.name in constrained, f"constraints.txt does not pin {dep.name}"
        assert dep.specifier.contains(constrained[dep.name]), f"{dep.name}=={constrained[dep.name]} not in {dep}"
    required = {r.name: str(r.specifier) for r in map(Requirement, project["dependencies"])}
    assert required == {"pylance": "==14.0.2", "pyarrow": ">=16", "pyroaring": "<2,>=1.0", "numpy": ">=1.23.2"}
    assert project["optional-dependencies"]["spark"] == ["pyspark>=4.0.0,<4.4"]


@pytest.fixture(scope="module")
def wheel() -> Path:
    """bin/build-wheel's wheel, built once per test run (tests/wheel_build.py)."""
    return built_wheel()


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv outside the source tree with the wheel, its `spark` extra (a machine with
    no Spark) and its dependencies from the package index, at the tested versions
    (-c constraints.txt; pip's cache makes it quick)."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    assert not venv.resolve().is_relative_to(ROOT)
    p = run([sys.executable, "-m", "venv", venv], timeout=300, env=clean_env())
    assert p.returncode == 0, p.stderr[-3000:]
    p = run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "-c", CONSTRAINTS, f"{wheel}[spark]"], timeout=1200, env=clean_env(), cwd=venv.parent)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A folder outside the source tree holding a warehouse with two degraded tables."""
    d = tmp_path_factory.mktemp("wheel-outside")
    assert not d.resolve().is_relative_to(ROOT)
    for name in ["t", "t2"]:
        degraded_table(str(d / "wh" / "db" / f"{name}.lance"))
    (d / "cwd").mkdir()
    return d


def packaged_jar(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages")) / "lance_compact" / "jars" / "lance-spark-compact.jar"


@pytest.mark.network
def test_the_wheel_carries_the_jar_and_offers_spark_as_an_extra(wheel):
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())
    assert {"lance_compact/jars/lance-spark-compact.jar", "lance_compact/parameters.json",
            "lance_compact/cli.py"} <= names
    # no pyspark_* module: Spark would register the read source by name for every SQL user
    assert not [n for n in names if n.startswith("pyspark_")], names
    assert z.read("lance_compact/jars/lance-spark-compact.jar") \
        == (ROOT / "spark-ext" / "target" / "lance-spark-compact.jar").read_bytes()
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [l.split(":", 1)[1].strip() for l in z.read(info).decode().splitlines()
                if l.startswith("Requires-Dist:")]
    # ranges but pylance; pyspark only with the `spark` extra
    assert [r for r in requires if "extra ==" not in r] \
        == ["pylance==14.0.2", "pyarrow>=16", "pyroaring<2,>=1.0", "numpy>=1.23.2"]
    assert 'pyspark<4.4,>=4.0.0; extra == "spark"' in requires
    entry_points = z.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "lance-spark-sql = lance_compact.cli:main" in entry_points


def rows_after_header(stdout: str, header_start: str) -> list[dict[str, str]]:
    lines = stdout.strip().splitlines()
    return [dict(zip(line.split("\t"), lines[i + 1].split("\t")))
            for i, line in enumerate(lines[:-1]) if line.startswith(header_start)]


@pytest.mark.network
def test_installed_lance_spark_sql_compacts(venv, outside):
    """`lance-spark-sql` on PATH as in an activated venv, run from a folder outside the tree
    with no Spark, jar or Python path in the environment."""
    table = outside / "wh" / "db" / "t.lance"
    before = lance.dataset(str(table))
    p = run(["lance-spark-sql", "--warehouse", outside / "wh", "--master", "local[2]",
             "--hiveconf", "hive.cli.print.header=true", "-e",
             "SET spark.jars; CALL lance.compact(table => 'db.t', target_rows_per_fragment => 100000)"],
            timeout=600, cwd=outside / "cwd", env=clean_env(path_first=venv / "bin"))
    assert p.returncode == 0, p.stderr[-3000:]
    jars = rows_after_header(p.stdout, "key\tvalue")[0]
    assert jars["key"] == "spark.jars"
    assert local_path(jars["value"]) == packaged_jar(venv)
    row = rows_after_header(p.stdout, "table\tstrategy")[0]
    after = lance.dataset(str(table))
    assert row["table"] == "db.t" and int(row["new_version"]) == after.version > before.version
    assert int(row["fragments_removed"]) == len(before.get_fragments()) > len(after.get_fragments()) == 1
    assert content(after) == content(before)
    assert sorted(os.listdir(outside / "cwd")) == []  # no metastore_db/ or derby.log left behind


@pytest.mark.network
def test_pyspark_session_from_the_helper_compacts(venv, outside):
    """A PySpark job in the venv: configure_spark_with_lance_compact, compact() and a SELECT
    read on the executors, nothing else set up (the venv's bin is not even on PATH, as in a notebook kernel)."""
    table = outside / "wh" / "db" / "t2.lance"
    before = lance.dataset(str(table))
    script = outside / "job.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        from pyspark.sql import SparkSession
        from lance_compact import compact, configure_spark_with_lance_compact

        builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        spark = configure_spark_with_lance_compact(builder, warehouse=sys.argv[1]).getOrCreate()
        row = compact(spark, "db.t2", target_rows_per_fragment=100000).collect()[0]
        # a read on the executors (the filter keeps Lance's own count out of it)
        read = spark.sql("SELECT count(id) FROM lance.db.t2 WHERE id >= 0")
        plan = read._jdf.queryExecution().executedPlan().toString()
        print("RESULT " + json.dumps({"jars": spark.conf.get("spark.jars"), "read": read.collect()[0][0],
                                      "python_scan": "(Python)" in plan, **row.asDict()}))
        spark.stop()
    """))
    p = run([venv / "bin" / "python", script, outside / "wh"], timeout=600, cwd=outside / "cwd",
            env=clean_env(SPARK_LOCAL_IP="127.0.0.1"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    result = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert local_path(result["jars"]) == packaged_jar(venv)
    after = lance.dataset(str(table))
    assert result["table"] == "db.t2" and result["new_version"] == after.version > before.version
    assert result["fragments_removed"] == len(before.get_fragments()) > len(after.get_fragments()) == 1
    assert content(after) == content(before)
    assert result["python_scan"] and result["read"] == after.count_rows()


# The text of https://www.apache.org/licenses/LICENSE-2.0.txt, byte for byte.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


@pytest.mark.network
def test_the_licence_is_apache_2_in_the_repository_the_wheel_and_the_jar(wheel):
    """Apache-2.0 (as Lance and Spark): LICENSE and NOTICE in the checkout, the wheel's
    metadata names it and carries both files, the jar's manifest names it and carries both."""
    import hashlib

    licence = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(licence).hexdigest() == APACHE_2_SHA256
    notice = (ROOT / "NOTICE").read_bytes()
    assert b"Apache License, Version 2.0" in notice

    z = zipfile.ZipFile(wheel)
    info = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    metadata = z.read(f"{info}/METADATA").decode().splitlines()
    assert "License-Expression: Apache-2.0" in metadata
    assert {"License-File: LICENSE", "License-File: NOTICE"} <= set(metadata)
    assert z.read(f"{info}/licenses/LICENSE") == licence and z.read(f"{info}/licenses/NOTICE") == notice

    jar = zipfile.ZipFile(io.BytesIO(z.read("lance_compact/jars/lance-spark-compact.jar")))
    manifest = dict(l.split(": ", 1) for l in jar.read("META-INF/MANIFEST.MF").decode().splitlines() if ": " in l)
    assert manifest["Bundle-License"] == "Apache-2.0"
    assert manifest["Implementation-Title"] == "lance-spark-compact" and manifest["Implementation-Version"] == "0.1.0"
    assert jar.read("META-INF/LICENSE") == licence and jar.read("META-INF/NOTICE") == notice
