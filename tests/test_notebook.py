"""examples/notebooks/compaction.ipynb runs headless (nbclient, a real IPython kernel on this
Python) and every cell succeeds: on a local session, and unchanged against a Spark Connect
server with the lance catalog (SPARK_REMOTE), as a Databricks notebook would. The notebook's
own asserts check that compaction kept every row and that maintain ran its three steps.

Re-render the checked-in outputs (local session) with:

    source bin/env.sh && .venv/bin/python tests/test_notebook.py
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebooks" / "compaction.ipynb"
CELL_TIMEOUT = 600  # seconds; the first CALL of a session starts Spark's Python workers


def run_notebook(env: dict[str, str], workdir: Path):
    """Execute the notebook in a fresh kernel with ``env``; raises on the first failing cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    client.execute(env=env)
    return nb


def kernel_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_GATEWAY") and k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.update(extra)
    return env


def outputs_text(nb) -> str:
    return "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_notebook_runs_on_a_local_session(tmp_path):
    nb = run_notebook(kernel_env(LANCE_WAREHOUSE=str(tmp_path / "wh")), tmp_path)
    text = outputs_text(nb)
    assert "| local |" in text
    assert "fragments_removed" in text and "rows_rewritten" in text
    pictures = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(pictures) == 2, "the before and the before/after pictures"


def test_notebook_runs_unchanged_over_spark_connect(tmp_path):
    import client_servers as cs

    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    server = cs.connect_server(warehouse, tmp_path).start()
    try:
        with server.logs_on_failure():
            t0 = time.monotonic()
            nb = run_notebook(kernel_env(LANCE_WAREHOUSE=str(warehouse),
                                         SPARK_REMOTE=f"sc://127.0.0.1:{server.port}"), tmp_path)
            print(f"notebook over Spark Connect: {time.monotonic() - t0:.1f} s "
                  f"(server start {server.startup_seconds:.1f} s)")
    finally:
        server.stop()
    assert "| remote |" in outputs_text(nb)


if __name__ == "__main__":
    import nbformat

    sys.path.insert(0, str(ROOT / "tests"))
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "lance-notebook-render"
    work.mkdir(parents=True, exist_ok=True)
    rendered = run_notebook(kernel_env(LANCE_WAREHOUSE=str(work / "wh")), work)
    for cell in rendered.cells:  # keep what a reader needs: no Spark log lines, one picture format
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
            for o in cell.outputs:
                o.get("data", {}).pop("image/svg+xml", None)
    nbformat.write(rendered, NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)} with its outputs")
