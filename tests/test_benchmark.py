"""The benchmark suite keeps working: its quick mode (tiny tables) runs every section, checks
every result's content and layout, and writes its table, JSON and chart. Its figures are not
asserted: timing belongs to the benchmark, not to tests. So the module is not `serial`: it runs
side by side with the others in bin/test (slower there, which it does not measure against
anything)."""
import json
import re
import subprocess
import sys

from conftest import ROOT


def test_the_quick_benchmark_runs_every_path_and_writes_its_report(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--quick",
                        "--work", str(tmp_path / "work"), "--out", str(out)],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((out / "results-quick.json").read_text())
    rows = {(r["section"], r["path"]) for r in report["rows"]}
    sections = {s for s, _ in rows}
    assert sections == {"streaming", "big", "binary", "memory", "scaling", "planning", "warehouse"}
    for path in ["pylance compact_files, in-process (2 cores)", "spark-sql: first statement of a fresh session",
                 "spark-sql: CALL, warm", "PySpark compact(), warm, local[2]", "CALL, warm, local[1]",
                 "spark-sql: first statement, no EnginePlugin", "CALL, warm no-op"]:
        assert ("streaming", path) in rows, path
    # Every compared path has its ratio to an anchor that is in the report.
    anchors = {r["path"] for r in report["rows"]}
    for r in report["rows"]:
        assert r["seconds"] > 0 and r["runs"]
        if r["anchor"]:
            assert r["anchor"] in anchors and r["ratio"] == r["seconds"] / next(
                a["seconds"] for a in report["rows"] if a["path"] == r["anchor"] and a["section"] == r["section"])
    assert len(report["targets"]) == 11  # issue 42 split the warm CALL target: PySpark and spark-sql
    assert any(path.startswith("CALL lance.maintain_warehouse") for s, path in rows if s == "warehouse")
    assert ("big", "CALL maintain_warehouse, warm, local[2]") in rows
    assert report["memory"]["big"]["python_worker_mb"] > 0 and report["memory"]["big"]["driver_jvm_mb"] > 0
    assert report["bandwidth"]["read_mb_s"] > 0
    svg = (out / "results-quick.svg").read_text()
    import xml.etree.ElementTree as ET
    from html import escape
    assert ET.fromstring(svg).tag.endswith("svg")
    for r in report["rows"]:  # a labelled bar per measured path, its ratio beside it
        assert escape(f"{r['section']}: {r['path']}", quote=False) in svg, r["path"]
        if r["ratio"] is not None:
            assert f"{r['ratio']:.2f}x" in svg, r["path"]
    assert "\ntargets:\n" in p.stdout


def test_the_warehouse_at_scale_runs_on_both_stores_and_counts_its_requests(tmp_path):
    """benchmarks/warehouse_scale.py, tiny: on S3Proxy (whole, maintain_warehouse against the
    pylance loop, live rows checked by the script) and on moto (reads only), each behind the
    latency proxy, which counts requests: a dry run that knows the commit times and manifests
    makes fewer than the engine's first."""
    import re
    for store, extra in (("s3proxy", []), ("s3", ["--reads-only"])):
        p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "warehouse_scale.py"), "--store", store,
                            "--tables", "3", "--fragments", "4", "--versions", "3", "--repeat", "1",
                            "--latency-ms", "5", *extra], capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert f"3 tables on {store} (5 ms per request)" in p.stdout
        first, again = map(int, re.search(r"the first (\d+) \(.*\), again (\d+) ", p.stdout).groups())
        assert 0 < again < first, p.stdout[-2000:]
        assert "the first dry run against the store serving its requests alone" in p.stdout
        assert ("maintain_warehouse against the pylance loop" in p.stdout) == (store == "s3proxy")



def test_the_fragment_scale_benchmark_runs_every_step(tmp_path):
    """benchmarks/scale_fragments.py on tiny tables (with deletions and an index): every step
    timed through the catalog against pylance's planner, the compaction's content checked equal
    to compact_files' (the benchmark asserts it), the memory peaks read."""
    out = tmp_path / "scale.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale_fragments.py"), "--sizes", "300",
                        "--deletions", "--index", "--compact", "--budget-fragments", "100", "--repeat", "1", "--work", str(tmp_path / "work"),
                        "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {"10", "300", "memory"}
    steps = {"pylance Compaction.plan", "plan_compaction", "describe_layout", "system.table_health",
             "system.maintenance_history", "versions table", "fragments table (count)", "fragments table (rows)",
             "pylance Compaction.plan (after)", "pylance compact_files", "compact",
             "plan_compaction, the table's first statement"}
    assert set(figures["10"]) == steps
    # two budgeted steps, each committed, each rewriting at most 100 fragments (into at least
    # one), the second starting where the first left the table (the benchmark checks the rows)
    budgeted = sorted(k for k in figures["300"] if k.startswith("budgeted"))
    assert set(figures["300"]) - set(budgeted) == steps and len(budgeted) == 2, budgeted
    counts = [tuple(int(x.replace(",", "")) for x in re.search(r"\(([\d,]+) fragments before, ([\d,]+) after\)",
                                                                 k).groups()) for k in budgeted]
    assert counts[0][0] == 300 and counts[1][0] == counts[0][1], counts
    assert all(before - 100 < after < before for before, after in counts), counts
    for size in ("10", "300"):
        assert all(v > 0 for v in figures[size].values())
    assert figures["memory"]["engine peak RSS MB"] > 0 and figures["memory"]["driver JVM peak RSS MB"] > 0
    # the compaction's memory side by side: compact_files in a process of its own, the engine
    # worker's peak since it was reset before the CALL
    for size in ("10 fragments", "300 fragments"):
        peaks = figures["memory"]["compaction"][size]
        assert peaks["compact_files process peak RSS MB"] > 0 and peaks["engine peak RSS MB during the CALL"] > 0
    assert "the compaction at 300 fragments: compact_files process peak RSS MB" in p.stdout
    assert "| describe_layout |" in p.stdout
