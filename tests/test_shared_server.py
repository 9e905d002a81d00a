"""On a shared server nothing in a procedure's arguments runs code, writes where the caller
chooses or ends a process. These drivers are started WITHOUT $LANCE_COMPACT_TEST_HOOKS (the
rest of the suite starts its drivers with it): test_* hooks are unknown options, a dotted
strategy nobody registered is not imported (not even by a SET), pictures are off unless the
operator allows a folder; the table is unchanged and the driver still answers."""
import json
import os
import subprocess
import sys

import lance
import pytest

from conftest import ROOT
from oracle import content, degraded_table

ATTEMPTS = {
    "rmtree": "CALL lance.compact(table => 'db.t', target_rows_per_fragment => 300, "
              "options => map('test_before_commit', 'shutil.rmtree'))",
    "kill": "CALL lance.compact(table => 'db.t', target_rows_per_fragment => 300, "
            "options => map('test_kill_driver_before_commit', 'true'))",
    "import": "CALL lance.compact(table => 'db.t', strategy => 'import_probe.Probe')",
    "set": "SET spark.sql.catalog.lance.strategies.probe = import_probe.Probe;\n"
           "CALL lance.compact(table => 'db.t', strategy => 'probe')",
    "picture": "CALL lance.describe_layout(table => 'db.t', histogram => true, picture => 'layout.png')",
}
REFUSED = {
    "rmtree": "unknown options map key 'test_before_commit'; valid options are: ",
    "kill": "unknown options map key 'test_kill_driver_before_commit'; valid options are: ",
    "import": "unknown strategy 'import_probe.Probe'; valid strategies are: default, deletion_only, "
              "incremental, io_bounded (a custom strategy is registered",
    "set": "unknown strategy 'probe'",
    "picture": "describe_layout parameter picture is off",
}


@pytest.fixture
def setup(tmp_path):
    """A warehouse with db.t, a module whose import leaves a marker, and the environment of a
    driver started as in production (no test hooks)."""
    path = tmp_path / "wh" / "db" / "t.lance"
    degraded_table(str(path), fragments=20, rows_per_fragment=30)
    marker = tmp_path / "imported"
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "import_probe.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "from lance_compact.compaction.planners import Planner as Probe\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LANCE_COMPACT_TEST_HOOKS", "PYSPARK_SUBMIT_ARGS") and not k.startswith("PYSPARK_GATEWAY")}
    env["PYTHONPATH"] = os.pathsep.join([str(probe), str(ROOT / "examples"), str(ROOT / "tests")])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return path, marker, env


def unchanged(path, before):
    after = lance.dataset(str(path))
    assert after.version == before.version and content(after) == content(before)
    assert len(os.listdir(path / "data")) == len(before.get_fragments())


def test_spark_sql_refuses_code_kills_and_pictures(setup, tmp_path):
    path, marker, env = setup
    before = lance.dataset(str(path))
    script = tmp_path / "attempts.sql"
    script.write_text(";\n".join(ATTEMPTS.values()) + ";\nSELECT 'alive', count(*) FROM lance.db.t;\n")
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(tmp_path / "wh"), "--master", "local[2]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.lance.compact.picture.dir=",
         "--hiveconf", "hive.cli.errors.ignore=true", "-f", str(script)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    for what, message in REFUSED.items():
        assert message in p.stderr, (what, p.stderr[-4000:])
    valid = p.stderr.split("valid options are: ", 1)[1].splitlines()[0]
    assert "target_rows_per_fragment" in valid and "test_" not in valid
    assert f"alive\t{before.count_rows()}" in p.stdout  # the driver still answers
    assert not marker.exists() and not (tmp_path / "layout.png").exists()
    unchanged(path, before)


PYSPARK = """
import json, sys
from pyspark.sql import SparkSession
from lance_compact import LanceCompaction, compact, configure_spark_with_lance_compact, describe_layout

builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
spark = configure_spark_with_lance_compact(builder, warehouse=sys.argv[1], picture_dir=None).getOrCreate()
errors = {}
attempts = {
    "rmtree": lambda: compact(spark, "db.t", options={"test_before_commit": "shutil.rmtree"}),
    "kill": lambda: LanceCompaction(spark, "db.t").option("test_kill_driver_before_commit", True).execute(),
    "import": lambda: compact(spark, "db.t", strategy="import_probe.Probe"),
    "picture": lambda: describe_layout(spark, "db.t", picture="layout.png"),
}
for name, attempt in attempts.items():
    try:
        attempt().collect()
        errors[name] = None
    except Exception as e:
        errors[name] = str(e)
alive = spark.sql("SELECT count(*) FROM lance.db.t").collect()[0][0]
print("RESULT " + json.dumps({"errors": errors, "alive": alive}))
spark.stop()
"""


def test_pyspark_api_refuses_code_kills_and_pictures(setup, tmp_path):
    path, marker, env = setup
    before = lance.dataset(str(path))
    p = subprocess.run([sys.executable, "-c", PYSPARK, str(tmp_path / "wh")], capture_output=True,
                       text=True, timeout=600, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-4000:]
    result = json.loads(p.stdout.split("RESULT ", 1)[1])
    for what, error in result["errors"].items():
        assert error and REFUSED[what] in error, (what, error)
    assert result["alive"] == before.count_rows()
    assert not marker.exists() and not (tmp_path / "layout.png").exists()
    unchanged(path, before)
