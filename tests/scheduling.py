"""Test modules longest first, and a report of each module's time (a pytest plugin that
tests/conftest.py registers).

bin/test runs modules side by side (pytest-xdist, `--dist loadfile`: a whole module on one
worker). xdist hands modules out in collection order, by default sorted by their number of
tests, so the long modules with few tests (the platform installs, the Spark-version and
lance-spark venvs, a standalone cluster) came last and the run ended waiting on them alone.
Here modules are collected longest first (seconds from tests/module_seconds.json; a module not
listed is guessed from its number of tests), so the long ones start at once beside the rest and
the short ones fill in at the end. A module's tests keep their order.

The terminal summary lists the slowest modules (the sum of their tests' setup, call and
teardown, so a module-scoped fixture's start counts). `LANCE_COMPACT_TEST_TIMES=<file>` also
writes this run's module times into <file> (merged with what it holds): after a whole bin/test
run, `tests/module_seconds.json` keeps the order right as modules grow."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
# A module not in SECONDS_FILE: its Spark session's start, then this much per test.
START_GUESS = 15.0
PER_TEST_GUESS = 1.5
SHOWN = 15  # modules listed in the summary


def module_of(nodeid: str) -> str:
    """'tests/test_x.py' of 'tests/test_x.py::test_y[z]'."""
    return nodeid.split("::", 1)[0]


def known_seconds() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(SECONDS_FILE.read_text()).items()}
    except (OSError, ValueError):
        return {}


class ModuleTimes:
    """Orders the collection longest module first; sums and reports each module's time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @pytest.hookimpl(trylast=True)  # after -m/-k deselected theirs: count what runs
    def pytest_collection_modifyitems(self, config, items) -> None:
        known = known_seconds()
        counts: dict[str, int] = defaultdict(int)
        for item in items:
            counts[module_of(item.nodeid)] += 1
        first_seen = {m: i for i, m in enumerate(counts)}

        def estimate(module: str) -> float:
            return known.get(module, START_GUESS + PER_TEST_GUESS * counts[module])

        # a stable sort on whole modules: each module's tests stay together and in order
        items.sort(key=lambda item: (-estimate(module_of(item.nodeid)), first_seen[module_of(item.nodeid)]))

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_terminal_summary(self, terminalreporter, config) -> None:
        if hasattr(config, "workerinput") or not self.seconds:
            return  # an xdist worker: the controller reports the whole run
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        terminalreporter.write_sep("=", f"slowest {min(SHOWN, len(ranked))} modules (setup + tests + teardown)")
        for module, secs in ranked[:SHOWN]:
            terminalreporter.write_line(f"{secs:8.1f}s {module}")
        out = os.environ.get("LANCE_COMPACT_TEST_TIMES")
        if out:
            path = Path(out)
            try:
                merged = json.loads(path.read_text())
            except (OSError, ValueError):
                merged = {}
            merged.update({m: round(s) for m, s in self.seconds.items()})
            path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
            terminalreporter.write_line(f"module times written to {path}")


def configure(config) -> None:
    """Registers the plugin; xdist's own reordering (by number of tests) is turned off so that
    it hands modules out in this collection's order."""
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False
    config.pluginmanager.register(ModuleTimes(), "lance-compact-module-times")
