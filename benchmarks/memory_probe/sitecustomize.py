"""Benchmark-only memory probe for the engine process (benchmarks/memory_soak.py --trace).

``memory_soak.py --trace FILE`` puts this folder first on ``PYTHONPATH``: every Python the
benchmark's driver starts imports it, and it does nothing unless the process is the engine
(``python -m lance_compact.engine``). There it starts tracemalloc and, every
``$LANCE_COMPACT_PROBE_EVERY`` seconds, appends one JSON line to ``$LANCE_COMPACT_PROBE``: RSS,
Python's traced bytes, pyarrow's pool, the Lance session's caches, the sizes of the engine's
own registries, the object types whose counts grew most and the source lines whose
allocations grew most since the first sample. Nothing of the product reads this file.
"""
import os


def _is_engine() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return b"lance_compact.engine" in f.read()
    except OSError:
        return False


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _mallinfo() -> dict:
    """glibc's heap, summed over its arenas (MiB): what is in use, and what it holds free."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Info
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {"malloc_in_use": m.uordblks + m.hblkhd, "malloc_free": m.fordblks, "malloc_arena": m.arena}


def _sizes() -> dict:
    """The engine's kept state, where it is already imported (never imports it)."""
    import sys

    out = {}
    tables = sys.modules.get("lance_compact.runtime.tables")
    if tables is not None:
        if tables._session is not None:
            out["lance_session_bytes"] = tables._session.size_bytes()
        out["file_sessions"] = len(tables.FILE_SESSIONS._by_root)
    ages = sys.modules.get("lance_compact.maintenance.version_ages")
    if ages is not None:
        times = ages.COMMIT_TIMES._by_uri
        out["commit_times_tables"] = len(times)
        out["commit_times_versions"] = sum(len(t) for _, t in times.values())
    acc = sys.modules.get("pyspark.accumulators")
    if acc is not None:
        out["accumulators"] = len(acc._accumulatorRegistry)
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        out["pyarrow_bytes"] = pa.total_allocated_bytes()
    import threading
    out["threads"] = threading.active_count()
    return out


def _probe(path: str, every: float, frames: int) -> None:
    import collections
    import gc
    import json
    import time
    import tracemalloc

    if frames:  # 0: no tracing (its own cost hides small growth); the other figures only
        tracemalloc.start(frames)
    first = first_types = None
    started = time.monotonic()
    while True:
        time.sleep(every)
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
        ) if frames else None
        types = collections.Counter(type(o).__name__ for o in gc.get_objects())
        line = {"t": round(time.monotonic() - started), "rss": _rss(),
                "traced": tracemalloc.get_traced_memory()[0], **_sizes()}
        if os.environ.get("LANCE_COMPACT_PROBE_TRIM"):  # what glibc holds freed but not returned
            import ctypes
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            line["rss_after_trim"] = _rss()
        line.update(_mallinfo())
        if first_types is None:
            first, first_types = snap, types
        elif snap is not None:
            stats = snap.compare_to(first, "traceback" if frames > 1 else "lineno")
            line["grew"] = [[s.size_diff, s.count_diff, " < ".join(str(f) for f in s.traceback[:frames])]
                            for s in stats[:12] if s.size_diff > 0]
        if first_types is not types:
            line["types"] = sorted(((n, c - first_types.get(n, 0)) for n, c in types.items()
                                    if c - first_types.get(n, 0) > 0), key=lambda x: -x[1])[:12]
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


if os.environ.get("LANCE_COMPACT_PROBE") and _is_engine():
    import threading

    threading.Thread(target=_probe, args=(os.environ["LANCE_COMPACT_PROBE"],
                                          float(os.environ.get("LANCE_COMPACT_PROBE_EVERY", "60")),
                                          int(os.environ.get("LANCE_COMPACT_PROBE_FRAMES", "1"))),
                     daemon=True, name="memory-probe").start()
