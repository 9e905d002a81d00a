"""One real local Spark session per test module, with the lance catalog over a temporary
warehouse. No mocks: real Spark, real Lance datasets on disk."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("warehouse")
    (wh / "db").mkdir()
    return wh


@pytest.fixture(scope="module")
def spark(warehouse, request):
    """A module may set SPARK_MASTER (e.g. local[2,3] to give tasks 3 attempts)."""
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Python workers find the example strategy (examples/my_planners.py) on their path.
    # and the tests' concurrent-writer hooks (tests/writers.py).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT / "examples"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")] if p)
    builder = (SparkSession.builder.master(getattr(request.module, "SPARK_MASTER", "local[2]")).appName(f"lance-compact-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    session = configure_spark_with_lance_compact(builder, warehouse=str(warehouse)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def fresh_table(warehouse, request):
    """A degraded table db.<test name> in the warehouse; returns (identifier, path)."""
    from degraded_table import degraded_table

    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:60]
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path))
    return f"db.{name}", path
