"""The Lance warm-up's scratch folders (engine._warm_lance), no Spark: a worker removes its own
on every way out, and the next worker removes those of workers that were killed."""
from __future__ import annotations

import os
import subprocess
import tempfile

from lance_compact import engine


def test_a_killed_workers_scratch_folder_is_removed_by_the_next_warm_up():
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    root = tempfile.gettempdir()
    dead = tempfile.mkdtemp(prefix=f"{engine.WARM_PREFIX}{gone.pid}-")
    alive = tempfile.mkdtemp(prefix=f"{engine.WARM_PREFIX}{os.getppid()}-")  # a running process's
    other = tempfile.mkdtemp(prefix=f"{engine.WARM_PREFIX}notapid-")
    try:
        engine._warm_lance()
        assert not os.path.exists(dead)
        assert os.path.isdir(alive) and os.path.isdir(other)
        assert engine._WARM_FOLDER is None
        assert not [n for n in os.listdir(root) if n.startswith(f"{engine.WARM_PREFIX}{os.getpid()}-")]
    finally:
        for folder in (dead, alive, other):
            if os.path.isdir(folder):
                os.rmdir(folder)


def test_an_exit_during_the_warm_up_removes_its_folder():
    engine._WARM_FOLDER = tempfile.mkdtemp(prefix=f"{engine.WARM_PREFIX}{os.getpid()}-")
    folder = engine._WARM_FOLDER
    engine._remove_own_staged()  # what both exit paths call before os._exit
    assert not os.path.exists(folder) and engine._WARM_FOLDER is None
