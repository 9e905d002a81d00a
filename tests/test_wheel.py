"""pip install brings it all: the wheel from bin/build-wheel, installed into a fresh venv outside
the source tree, runs compaction with nothing from the checkout: the `lance-spark-sql`
command and a PySpark session from configure_spark_with_lance_compact, both on the jar
inside the wheel."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import lance
import pytest

from conftest import ROOT
from oracle import content, degraded_table

CONSTRAINTS = ROOT / "constraints.txt"


def run(args, timeout, **kw):
    """A subprocess with a bounded wait; its output comes back for the assertion messages."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


def clean_env(path_first: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment less anything pointing at the checkout, a venv or a Spark:
    no PYTHONPATH, LANCE_*, SPARK_*, PYSPARK_*, VIRTUAL_ENV; PATH without the checkout's
    folders (the machine's pip settings, PIP_*, stay)."""
    drop = ("LANCE_", "SPARK_", "PYSPARK_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join(([str(path_first)] if path_first else []) + path)
    env.update(extra)
    return env


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
    own Spark and Arrow stay (test_platform_install_keeps_its_spark_and_arrow)."""
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
    assert required == {"pylance": "==14.0.2", "pyarrow": ">=16", "pyroaring": "<2,>=1.0", "numpy": ">=1.22"}
    assert project["optional-dependencies"]["spark"] == ["pyspark>=4.0.0,<4.4"]


@pytest.fixture(scope="module")
def wheel() -> Path:
    """bin/build-wheel (its pip build fetches setuptools from the package index)."""
    p = run([ROOT / "bin" / "build-wheel"], timeout=900, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels = sorted((ROOT / "dist").glob("lance_spark_compact-*.whl"))
    assert len(wheels) == 1, wheels
    # The source checkout goes on using spark-ext/target: build-wheel leaves no copy behind.
    assert not (ROOT / "python" / "lance_compact" / "jars").exists()
    return wheels[0]


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


def local_path(path_or_uri: str) -> Path:
    return Path(urlparse(path_or_uri).path if path_or_uri.startswith("file:") else path_or_uri)


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
        == ["pylance==14.0.2", "pyarrow>=16", "pyroaring<2,>=1.0", "numpy>=1.22"]
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


# The platform's pyarrow: not constraints.txt's, inside the wheel's range, and the oldest line
# the platform's PySpark 4.2 accepts (its own floor is 18.0.0).
PLATFORM_PYARROW = "18.1.0"
CATALOG_CLASS = "io.github.lancecompact.spark.catalog.LanceCatalog"
# What a platform starts before any notebook cell runs: the session (`spark`), with the
# cluster's settings from its spark-defaults.conf (the jar is a cluster library there).
PLATFORM_SESSION = """\
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
"""
# Run before the notebook's last cell (spark.stop()): what the notebook ran on.
PLATFORM_PROBE = """\
import json, pyarrow, pyspark
catalog = spark._jsparkSession.sessionState().catalogManager().catalog("lance")
print("PLATFORM " + json.dumps({
    "pyarrow": pyarrow.__version__, "pyspark": pyspark.__version__, "pyspark_file": pyspark.__file__,
    "spark_jars": spark.sparkContext.getConf().get("spark.jars"),
    "catalog_jar": catalog.getClass().getProtectionDomain().getCodeSource().getLocation().getPath()}))
"""


def installed(python: Path, env: dict[str, str]) -> dict[str, str]:
    """name -> version of every distribution pip sees in that Python's environment."""
    p = run([python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
            timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in json.loads(p.stdout)}


@pytest.mark.network
def test_platform_install_keeps_its_spark_and_arrow(wheel, tmp_path, monkeypatch):
    """A platform that brings its own Spark and Arrow (Databricks, EMR, Dataproc): a Spark
    distribution whose Python is on PYTHONPATH (pip sees no pyspark), an environment with its
    own pyarrow, the jar as a cluster library (spark.jars in spark-defaults.conf) and a session
    started before the notebook. `pip install <wheel>` (no extra, no constraints) installs
    neither pyspark nor another pyarrow, changes no package the platform had, and the notebook
    runs there unchanged, on the cluster library's jar."""
    import nbformat
    import py4j
    import pyspark
    from nbclient import NotebookClient

    # The platform's Spark: a distribution's layout made of this machine's Spark 4.2 (no pip
    # metadata anywhere on its path).
    spark_home = tmp_path / "spark"
    (spark_home / "python").mkdir(parents=True)
    for name in ("bin", "jars"):
        (spark_home / name).symlink_to(Path(pyspark.__file__).parent / name)
    (spark_home / "python" / "pyspark").symlink_to(Path(pyspark.__file__).parent)
    (spark_home / "python" / "py4j").symlink_to(Path(py4j.__file__).parent)
    cluster_jar = tmp_path / "cluster-libraries" / "lance-spark-compact.jar"
    cluster_jar.parent.mkdir()
    cluster_jar.write_bytes(zipfile.ZipFile(wheel).read("lance_compact/jars/lance-spark-compact.jar"))
    (spark_home / "conf").mkdir()
    # The operator's settings: the jar, and the version-retention check off (the notebook's
    # versions are seconds old; it sets the same on a session it starts itself).
    (spark_home / "conf" / "spark-defaults.conf").write_text(
        f"spark.jars {cluster_jar}\nspark.lance.compact.cleanup.versionMinAge 0s\n")

    venv = tmp_path / "platform-venv"
    python = venv / "bin" / "python"
    env = clean_env(PYTHONPATH=str(spark_home / "python"), SPARK_HOME=str(spark_home),
                    SPARK_CONF_DIR=str(spark_home / "conf"), PYSPARK_PYTHON=str(python),
                    SPARK_LOCAL_IP="127.0.0.1")
    p = run([sys.executable, "-m", "venv", venv], timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    # The platform's own packages: its pyarrow, numpy and the notebook kernel (those two at the
    # tested versions, so pip's cache serves them; no matplotlib: the notebook's histograms fall
    # back to their text form).
    platform_pins = tmp_path / "platform-constraints.txt"
    platform_pins.write_text("\n".join(l for l in CONSTRAINTS.read_text().splitlines()
                                       if not re.match(r"\s*(pyarrow|pyspark)\s*==", l)) + "\n")
    t0 = time.monotonic()
    p = run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", platform_pins,
             f"pyarrow=={PLATFORM_PYARROW}", "numpy", "ipykernel"], timeout=1200, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    t1 = time.monotonic()
    before = installed(python, env)
    assert "pyspark" not in before and before["pyarrow"] == PLATFORM_PYARROW

    # What a user of that platform runs: %pip install <wheel>, nothing else.
    p = run([python, "-m", "pip", "install", "--disable-pip-version-check", wheel], timeout=1200, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    t2 = time.monotonic()
    after = installed(python, env)
    assert "pyspark" not in after, "the wheel brought its own pyspark"
    assert {k: after.get(k) for k in before} == before, "the wheel replaced a platform package"
    assert after["lance-spark-compact"] == "0.1.0" and after["pylance"] == "14.0.2"

    # The notebook, in a kernel of that environment, after the platform has started `spark`.
    kernels = tmp_path / "jupyter" / "kernels" / "platform"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "platform", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-platform-session.py").write_text(PLATFORM_SESSION)
    nb = nbformat.read(ROOT / "examples" / "notebooks" / "compaction.ipynb", as_version=4)
    assert "spark.stop()" in nb.cells[-1].source
    nb.cells.insert(len(nb.cells) - 1, nbformat.v4.new_code_cell(PLATFORM_PROBE))
    work = tmp_path / "work"
    work.mkdir()
    # the kernel starts the platform's session before it answers: more than nbclient's 60 s on a busy machine
    NotebookClient(nb, timeout=600, startup_timeout=600, kernel_name="platform",
                   resources={"metadata": {"path": str(work)}}) \
        .execute(env={**env, "IPYTHONDIR": str(tmp_path / "ipython"), "LANCE_WAREHOUSE": str(tmp_path / "wh")})
    t3 = time.monotonic()
    print(f"platform packages {t1 - t0:.1f} s, pip install of the wheel {t2 - t1:.1f} s, notebook {t3 - t2:.1f} s")

    outputs = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    probe = json.loads(next(l for o in outputs for l in o.splitlines() if l.startswith("PLATFORM "))[9:])
    assert probe["pyarrow"] == PLATFORM_PYARROW and probe["pyspark"] == pyspark.__version__
    assert Path(probe["pyspark_file"]).parent == spark_home / "python" / "pyspark"
    assert local_path(probe["spark_jars"]) == cluster_jar and Path(probe["catalog_jar"]) == cluster_jar
    assert any("fragments_removed" in o for o in outputs)


# The wheel's declared floors (pyproject.toml) where our own code sets them, and a numpy 1.x.
FLOORS = {"pyarrow": "16.0.0", "pyroaring": "1.0.0", "numpy": "1.26.4"}
FLOOR_CHECK = """\
import json, tempfile
import lance, numpy as np, pyarrow as pa, pyroaring
from lance.optimize import Compaction
from lance_compact.compaction import rebase
from lance_compact.runtime import spark_types

# The Arrow -> Spark type rules (view types from pyarrow 16), every example they list.
kinds = [spark_types.spark_and_arrow(t)[0] for _, _, examples in spark_types.RULES for t in examples]
kinds.append(spark_types.spark_and_arrow(pa.string_view())[0])
# A rebase's row-address map (pyroaring's BitMap64): a task rewrote 600 rows less 1 in 7, then
# a writer deleted 1 in 11; the positions among the new rows of the rows deleted since.
path = tempfile.mkdtemp()
lance.write_dataset(pa.table({"id": np.arange(600)}), path, max_rows_per_file=60)
ds = lance.dataset(path)
ds.create_scalar_index("id", "BTREE")
ds.delete("id % 7 = 0")
plan = Compaction.plan(ds, {"target_rows_per_fragment": 1000})
(result,) = [t.execute(ds) for t in plan.tasks]
base = lance.dataset(path, version=plan.read_version)
ds.delete("id % 11 = 0")
positions, why = rebase._deleted_positions(result, base, lance.dataset(path))
print("FLOORS " + json.dumps({"pyarrow": pa.__version__, "pyroaring": pyroaring.__version__,
                              "numpy": np.__version__, "kinds": kinds, "positions": positions, "why": why,
                              "mapped": bool(json.loads(result.json()).get("row_addrs"))}))
"""


@pytest.mark.network
def test_the_wheel_runs_on_its_declared_floors(wheel, tmp_path):
    """pyarrow 16.0.0 and pyroaring 1.0.0 (the floors pyproject.toml declares for what our
    code uses of them) with numpy 1.x: the wheel installs beside them and the code that needs
    each runs (the type rules' view types, a rebase's row-address map)."""
    venv = tmp_path / "floors-venv"
    p = run([sys.executable, "-m", "venv", venv], timeout=300, env=clean_env())
    assert p.returncode == 0, p.stderr[-3000:]
    python = venv / "bin" / "python"
    p = run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel,
             *(f"{name}=={version}" for name, version in FLOORS.items())], timeout=1200, env=clean_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    p = run([python, "-c", FLOOR_CHECK], timeout=300, env=clean_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("FLOORS "))[7:])
    assert {k: got[k] for k in FLOORS} == FLOORS
    assert got["kinds"][-1] == "STRING" and len(got["kinds"]) > 20
    live = [i for i in range(600) if i % 7]
    assert got["mapped"] and got["why"] == ""
    assert got["positions"] == [k for k, i in enumerate(live) if i % 11 == 0]
