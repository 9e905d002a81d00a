"""The wheel on a platform that brings its own Spark and Arrow (Databricks, EMR, Dataproc), and
on the oldest pyarrow, pyroaring and numpy it declares: each in a fresh venv outside the source
tree, from bin/build-wheel's wheel (built once per run, tests/wheel_build.py). A module apart
from tests/test_wheel.py so that the two run side by side."""
from __future__ import annotations

import json
import re
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from wheel_build import CONSTRAINTS, built_wheel, clean_env, local_path, run


@pytest.fixture(scope="module")
def wheel() -> Path:
    """bin/build-wheel's wheel, built once per test run (tests/wheel_build.py)."""
    return built_wheel()


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
    # Each extra, resolved against the same platform (pip's dry run): none replaces a package the
    # platform had, but one: the glue extra's boto3, whose botocore asks python-dateutil<3.0.0
    # (this platform has no boto3, and jupyter's python-dateutil 4), would install 2.9 in its
    # place (docs/catalogs.md says so; a platform that ships boto3 has 2.x already).
    botocore_cap = {"python-dateutil"}
    for extra in ("glue", "hive", "plot"):
        report = tmp_path / f"{extra}.json"
        p = run([python, "-m", "pip", "install", "--dry-run", "-q", "--disable-pip-version-check", "--report",
                 report, f"{wheel}[{extra}]"], timeout=1200, env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        chosen = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"]
                  for i in json.loads(report.read_text())["install"]}
        replaced = {k: (after[k], v) for k, v in chosen.items() if k in after and after[k] != v}
        allowed = botocore_cap if extra == "glue" and "botocore" in chosen else set()
        assert set(replaced) <= allowed, f"the {extra} extra would replace platform packages: {replaced}"
        assert all(v.startswith("2.") for k, (_, v) in replaced.items()), replaced

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
FLOORS = {"pyarrow": "16.0.0", "pyroaring": "1.0.0", "numpy": "1.23.2"}
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
