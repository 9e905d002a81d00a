"""The one jar on the oldest Spark 4 with the lowest versions the wheel accepts (pyarrow,
pyroaring, numpy: pyproject.toml's floors) and on the newest Spark 4 with the newest tested
(constraints.txt), clustering included (bin/check-spark-versions; the matrix in
docs/deployment.md runs every line). Each version's venv is cached in .venvs/; the
first run installs it from the package index (hence `network`)."""
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.network


def test_the_jar_works_on_the_oldest_and_the_newest_spark():
    p = subprocess.run([str(ROOT / "bin" / "check-spark-versions"), "4.0.0@floors", "4.3.0"],
                       capture_output=True, text=True, timeout=1800)
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # the matrix's rows (notes under it start with the version too)
    rows = [line.split() for line in p.stdout.splitlines()
            if line.startswith(("4.0.0@floors ", "4.3.0 ")) and line.split()[1] in ("ok", "FAIL")]
    # every check ok (15 with the venv), but SHOW PROCEDURES, which Spark 4.0 lacks
    assert len(rows) == 2 and all("FAIL" not in r for r in rows), rows
    assert [r.count("ok") for r in rows] == [14, 15] and rows[0].count("n/a") == 1, rows
