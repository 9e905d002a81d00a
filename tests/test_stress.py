"""The seeded randomized stress test (tests/stress.py). Small in CI; more with
STRESS_SEEDS=20 STRESS_OPS=40 .venv/bin/python -m pytest -q -s tests/test_stress.py"""
import os
import shutil

import pytest

import stress

SEEDS = int(os.environ.get("STRESS_SEEDS", "2"))
OPS = int(os.environ.get("STRESS_OPS", "12"))
SPARK_MASTER = "local[2,2]"
SUMMARY: dict = {}


@pytest.mark.parametrize("seed", range(SEEDS))
def test_concurrent_writers_and_compactions_keep_every_row(spark, warehouse, seed, tmp_path):
    path = warehouse / "db" / f"stress{seed}.lance"
    shutil.rmtree(path, ignore_errors=True)
    stress.run(spark, str(path), f"db.stress{seed}", seed, OPS, SUMMARY, tmp_path)
    print(f"\nstress after seed {seed}: {SUMMARY}")
    assert SUMMARY["compactions"] >= 3 * (seed + 1)
    # under a deleter touching every fragment every 0.3 s, every compaction with work lands,
    # most without a single re-plan
    # (runs with max_retries => 0 may drop a conflicted task by design: not counted)
    assert SUMMARY.get("runs_landed", 0) == SUMMARY.get("runs_with_work", 0), SUMMARY
    assert SUMMARY.get("runs_replanned", 0) <= SUMMARY["compactions"] // 2


# Times or measures the machine: run alone, not beside other modules (bin/test).
pytestmark = pytest.mark.serial
