"""The engine's memory levels off (issue 33, item 7): maintain_warehouse over tiny tables with
an append to each between rounds, as a maintenance service runs for weeks. Every commit adds
immutable metadata (a manifest, file footers) that the engine's Lance session caches and no
later open reads; before its bound was lowered and made a setting, the cache took 256 MiB (and
the index cache 256 more) before it stopped growing. Here the bound is 2 MiB: the engine's log
shows the cache within it, and once the cache is full its resident set grows by no more than
noise. The residual once measured here (about 28 KiB a round of 5 tables) was glibc's
per-thread arenas, each fragmented on its own: the engine caps them (runtime/memory.py;
docs/benchmark.md, benchmarks/memory_soak.py and memory_plateau.py).

Not a `serial` module: it measures its own engine worker's resident set, which other processes
beside it do not change (the growth bound below holds at load 40), so bin/test runs it side by
side with the others."""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time

import lance
import pyarrow as pa
import pytest

from conftest import NO_CLEANUP_FLOOR
from lance_compact.runtime.memory import ARENAS

ROUNDS = 120
TABLES = 4
COLUMNS = 24
BOUND_MIB = 2


@pytest.fixture(scope="module")
def spark(warehouse, tmp_path_factory):
    from conftest import logged_session

    session = logged_session(warehouse, tmp_path_factory, "lance-compact-memory", {
        **NO_CLEANUP_FLOOR, "spark.lance.compact.engine.metadataCacheBytes": f"{BOUND_MIB}m"})
    yield session
    session.stop()


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _append(uri: str, start: int) -> None:
    """Ten rows; a wide schema, so each commit's metadata (the manifest's field list, each data
    file's footer) is what a real table's is: a few KiB."""
    ids = range(start, start + 10)
    data = pa.table({"id": pa.array(ids, pa.int64()),
                     **{f"c{c:02d}": pa.array([f"row {i} column {c}" for i in ids]) for c in range(COLUMNS)}})
    lance.write_dataset(data, uri, mode="append" if start else "create")


def test_the_engine_keeps_its_caches_within_their_bounds_and_its_memory_levels_off(spark, warehouse):
    uris = [str(warehouse / "soak" / f"t{i}.lance") for i in range(TABLES)]
    (warehouse / "soak").mkdir()
    for uri in uris:
        _append(uri, 0)
    call = "CALL lance.maintain_warehouse(namespace => 'soak', older_than => '0 seconds')"
    spark.sql(call).collect()
    pid = spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession).pid()
    rss, started = [], time.monotonic()
    for r in range(1, ROUNDS + 1):
        for uri in uris:
            _append(uri, r * 10)
        rows = spark.sql(call).collect()
        assert not [x.error for x in rows if x.error], rows
        rss.append(_rss_mib(pid))
    took = time.monotonic() - started
    for uri in uris:
        assert lance.dataset(uri).count_rows() == (ROUNDS + 1) * 10
    # The engine's own figures, logged once a minute after requests (runtime/memory.py).
    deadline = time.monotonic() + 90
    while True:
        lines = [line for line in spark.engine_log.read_text().splitlines() if "memory: rss" in line]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert lines, "the engine logged no memory figures"
    log_text = spark.engine_log.read_text()
    assert f"memory: at most {ARENAS} malloc arenas" in log_text, "the engine did not cap glibc's arenas"
    for line in lines:
        held, bound = map(int, re.search(r"Lance session caches (\d+) MiB \(bounds: metadata (\d+) MiB", line).groups())
        assert bound == BOUND_MIB and held <= 2 * BOUND_MIB, line  # index cache empty: metadata only
        versions, most = map(int, re.search(r"(\d+) versions \(at most (\d+)\)", line).groups())
        assert versions <= most, line
        in_use, free = map(int, re.search(r"C heap (\d+) MiB in use, (\d+) MiB free", line).groups())
        assert 0 < in_use < 200 and free < 200, line
        blocks, objects = map(int, re.search(r"Python (\d+) blocks, (\d+) objects", line).groups())
        assert 0 < objects < blocks, line
    # Growth over the last third against the middle third: the cache is full within a few rounds,
    # what is left is noise. Measured on a busy machine (load 40): the code before the bound grew
    # 11.0 MiB here (its cache was filling towards 256 MiB), with it 1.6 MiB.
    third = ROUNDS // 3
    middle, last = statistics.median(rss[third:2 * third]), statistics.median(rss[2 * third:])
    assert last - middle < 6, (f"engine RSS grew {last - middle:.1f} MiB from the middle to the last third of "
                               f"{ROUNDS} rounds ({took:.0f} s): {[round(x) for x in rss[::10]]}")


# Threads that each allocate through malloc, then the number of arenas glibc made (malloc_info's
# <heap nr=...>), with and without the engine's cap.
_ARENAS_PROBE = """
import ctypes, os, sys, tempfile, threading
from lance_compact.runtime.memory import limit_arenas
if sys.argv[1] == "capped":
    assert limit_arenas(), "limit_arenas did not apply"
bufs = []
together = threading.Barrier(16)  # all alive at once (more than the cap: 8): an ended thread's arena goes to the next one
def allocate():
    bufs.extend(ctypes.create_string_buffer(4096) for _ in range(100))  # above pymalloc's 512 bytes: malloc
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "info.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
print(open(path).read().count("<heap nr="))
"""


def test_the_engine_caps_glibc_malloc_arenas():
    """Each thread gets a glibc arena of its own (up to 8 per core) and memory freed stays in its
    arena, fragmented there: the residual growth of the engine's soaks (runtime/memory.py). The
    engine caps them (``limit_arenas``, at its start); ``$MALLOC_ARENA_MAX`` wins when set."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    arenas = {how: int(subprocess.run([sys.executable, "-c", _ARENAS_PROBE, how], env=env, check=True,
                                      capture_output=True, text=True).stdout.strip())
              for how in ("default", "capped")}
    assert arenas["capped"] <= ARENAS < arenas["default"], arenas
    out = subprocess.run([sys.executable, "-c", "from lance_compact.runtime.memory import limit_arenas; "
                          "print(limit_arenas())"], env={**env, "MALLOC_ARENA_MAX": "4"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", "the operator's MALLOC_ARENA_MAX must win"
