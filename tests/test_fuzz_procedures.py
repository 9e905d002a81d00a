"""Fuzzing every procedure's arguments through ``spark.sql`` on one session: random and extreme
values for each parameter (durations, versions, sizes, thresholds, names, options maps). Every
call comes back within a bound with a result or a clear error; a failed call leaves the
table's version unchanged; the engine answers a trivial statement afterwards.

Seeded and bounded: ``LANCE_COMPACT_FUZZ_SEED`` (default 24) and ``LANCE_COMPACT_FUZZ_CASES``
(default 60) choose the cases."""
from __future__ import annotations

import json
import os
import random
import threading
import time
from importlib import resources

import lance
import pytest

from oracle import degraded_table

SEED = int(os.environ.get("LANCE_COMPACT_FUZZ_SEED", "24"))
CASES = int(os.environ.get("LANCE_COMPACT_FUZZ_CASES", "60"))
BOUND_S = 60
TABLE = "db.fuzz"

_SPEC = json.loads(resources.files("lance_compact").joinpath("parameters.json").read_text())


def _sql_params(*sections: str) -> list[dict]:
    return [o for s in sections for o in _SPEC[s] if o.get("sql")]


# procedure -> its named parameters (besides table), from the spec the JVM binds them with
PROCEDURES = {
    "compact": _sql_params("options", "settings", "run_settings"),
    "plan_compaction": _sql_params("options", "settings", "run_settings"),
    "describe_layout": _sql_params("layout_parameters"),
    "cleanup": _sql_params("cleanup_parameters"),
    "optimize_indices": _sql_params("optimize_indices_parameters"),
    "maintain": _sql_params("maintain_parameters"),
    "maintain_warehouse": _sql_params("maintain_warehouse_parameters"),
}
TAKES_OPTIONS = {"compact", "plan_compaction"}
DURATIONS = {"older_than", "unverified_min_age", "max_duration"}

LONGS = ["0", "1", "-1", "2", "CAST(2147483648 AS BIGINT)", "9223372036854775807L",
         "CAST(-9223372036854775808 AS BIGINT)", "4294967296L", "1000000"]
DOUBLES = ["double('NaN')", "double('inf')", "double('-inf')", "-0.0D", "0.5D", "1.0D", "1e308D", "-1.0D"]
TEXTS = ["''", "' '", "'x'", "'\u65e5\u672c\u8a9e \u2603'", "'''; DROP TABLE x; --'", "'" + "y" * 5000 + "'",
         "'\\\\0'", "'NULL'", "'%s'", "'../../etc'", "'db.fuzz'", "'*'"]
DURATION_TEXTS = ["'0 seconds'", "'-5 days'", "'100000000 days'", "'9999-12-31T00:00:00Z'",
                  "'0001-01-01T00:00:00Z'", "'1 second'", "'2 weeks'", "'1e400 days'", "'-0 days'",
                  "'2262-04-12T00:00:00Z'", "'P1D'", "'9223372036854775807 seconds'",
                  # Spark's own types and the short forms (runtime/durations.py)
                  "INTERVAL -5 DAYS", "INTERVAL '100000000' DAY", "INTERVAL '1-2' YEAR TO MONTH",
                  "INTERVAL 1000000 YEARS", "TIMESTAMP '0001-01-01 00:00:00'", "TIMESTAMP_NTZ '9999-12-31 23:59:59'",
                  "'7d'", "'0s'", "'1.5 months'", "'1 day 12 hours'"]
WHERES = ["'id = 1'", "'1 = 1'", "'id > 9223372036854775807'", "'nonexistent = 1'", "''''", "'id IN ()'",
          "'_rowid = 0'", "'id / 0 = 1'",
          "'" + "id + " * 700 + "1 = 2'",  # killed the engine (SIGSEGV in Lance's planner)
          "'" + " OR ".join(["id = 1"] * 150) + "'"]
MAP_KEYS = [o["name"] for o in _SPEC["options"]] + ["strategy", "since_version", "colour", "", "test_x",
                                                   "max_fragments", "where", "\u00e9"]
MAP_VALUES = ["'0'", "'-1'", "'9223372036854775807'", "'99999999999999999999999'", "'NaN'", "'inf'",
              "'legacy'", "'garbage!!'", "''", "'true'", "'2.1'", "'1,2,-3'", "'x'"]


def _value(rng: random.Random, p: dict) -> str:
    if rng.random() < 0.05:
        return "NULL"
    if p["name"] in DURATIONS:
        return rng.choice(DURATION_TEXTS)
    if p["name"] == "where":
        return rng.choice(WHERES)
    return {"long": lambda: rng.choice(LONGS), "double": lambda: rng.choice(DOUBLES),
            "boolean": lambda: rng.choice(["true", "false"]),
            "string": lambda: rng.choice(TEXTS + ([f"'{c}'" for c in p.get("choices") or []]))}.get(
        p["type"], lambda: rng.choice(TEXTS))()


def _case(rng: random.Random) -> str:
    procedure = rng.choice(sorted(PROCEDURES))
    params = PROCEDURES[procedure]
    table = f"'{TABLE}'" if rng.random() < 0.85 else rng.choice(TEXTS)
    args = [] if procedure == "maintain_warehouse" else [f"table => {table}"]
    chosen = rng.sample(params, min(len(params), rng.randint(1, 4)))
    for p in chosen:
        args.append(f"{p['name']} => {_value(rng, p)}")
    if procedure in TAKES_OPTIONS and rng.random() < 0.5:
        pairs = [f"'{rng.choice(MAP_KEYS)}', {rng.choice(MAP_VALUES)}" for _ in range(rng.randint(1, 3))]
        args.append(f"options => map({', '.join(pairs)})")
    if (procedure in ("maintain_warehouse", "maintain", "cleanup", "optimize_indices")
            and "dry_run" not in {p["name"] for p in chosen} and rng.random() < 0.5):
        args.append("dry_run => true")  # keep most of these cheap; the rest really run
    return f"CALL lance.{procedure}({', '.join(args)})"


def _bounded(spark, statement: str) -> tuple[str, str]:
    """(outcome, text): "ok"/"error" and the error's message; fails the test on a hang."""
    out: dict = {}

    def run():
        try:
            spark.sql(statement).collect()
            out["r"] = ("ok", "")
        except Exception as e:  # the statement's error, for the assertions below
            out["r"] = ("error", str(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), f"no answer within {BOUND_S} s: {statement[:300]}"
    return out["r"]


# Durations are bounded by version_cleanup.py's parser (not this module's): until it refuses
# these, Lance's panic or Python's overflow on them is answered and is no hang.
DURATION_EXTREMES = ("'100000000 days'", "'9999-12-31T00:00:00Z'", "'0001-01-01T00:00:00Z'",
                     "'-5 days'", "'9223372036854775807 seconds'", "'2262-04-12T00:00:00Z'")


def _duration_failure(statement: str, text: str) -> bool:
    return any(d in statement for d in DURATION_EXTREMES) and ("OverflowError" in text or "Lance panicked" in text)


# What a clear error is not: an unrecognized failure, a Java/Python stack, the JVM's own
# internal error wrapping.
UNCLEAR = ("an unexpected error (none lance_compact recognizes", "Traceback (most recent", "\tat io.github",
           "NullPointerException", "[INTERNAL_ERROR]", "exited with code", "did not answer")


def _lost_workers(spark) -> int:
    """Engine workers that died, hung or were killed so far (EnginePool.lostWorkers)."""
    return spark._jvm.io.github.lancecompact.spark.engine.EnginePool.of(spark._jsparkSession).lostWorkers()


@pytest.fixture(scope="module")
def fuzz_table(warehouse):
    path = warehouse / "db" / "fuzz.lance"
    degraded_table(str(path))
    return path


def test_fuzzed_procedure_calls_are_answered_within_a_bound(spark, fuzz_table):
    rng = random.Random(SEED)
    spark.sql(f"CALL lance.describe_layout(table => '{TABLE}')").collect()
    lost = _lost_workers(spark)
    outcomes: list[tuple[str, str, str, float]] = []
    bad: list[tuple[str, str, str]] = []
    for _ in range(CASES):
        statement = _case(rng)
        before = lance.dataset(str(fuzz_table)).version
        started = time.monotonic()
        outcome, text = _bounded(spark, statement)
        took = time.monotonic() - started
        outcomes.append((statement[:200], outcome, text.splitlines()[0][:300] if text else "", took))
        if outcome == "error":
            if lance.dataset(str(fuzz_table)).version != before:
                bad.append(("version changed on an error", statement, text[:1000]))
            if any(u in text for u in UNCLEAR) and not _duration_failure(statement, text):
                bad.append(("unclear error", statement, text[:1000]))
    rows = spark.sql(f"CALL lance.describe_layout(table => '{TABLE}')").collect()
    assert rows and rows[0]["table"] == TABLE
    assert _lost_workers(spark) == lost, "an engine worker died during the fuzz"
    report = os.environ.get("LANCE_COMPACT_FUZZ_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(outcomes, f, indent=1)
    assert not bad, "\n\n".join(map(str, bad))
    assert any(o == "ok" for _, o, _, _ in outcomes) and any(o == "error" for _, o, _, _ in outcomes)


@pytest.mark.parametrize("option, value, message", [
    ("materialize_deletions_threshold", "NaN", "expects a finite number"),  # passed every range check
    ("materialize_deletions_threshold", float("inf"), "expects a finite number"),
    ("target_rows_per_fragment", "99999999999999999999999", "expects an integer from"),  # Lance: OverflowError
    ("max_source_bytes", 2 ** 64, "expects an integer from"),
    ("batch_size", 2 ** 32, "must be <= 4294967295"),  # Lance refuses it only when a task runs
    ("excluded_fragment_ids", "1,18446744073709551616", "integers <= 9223372036854775807"),
])
def test_values_lance_cannot_take_are_refused_at_the_parse(option, value, message):
    from lance_compact.errors import CompactionError
    from lance_compact.options import convert_value, option_specs

    with pytest.raises(CompactionError, match=message) as e:
        convert_value(option_specs()[option], value, "db.t")
    assert f"table db.t: option {option}" in e.value.message


def test_a_predicate_deep_enough_to_overflow_lances_stack_is_refused_at_the_parse():
    """``a + a + ... = 1`` with ~700 operators overflowed the stack of Lance's planner: the
    engine process died (SIGSEGV). Refused by its token count; a long literal counts once."""
    from lance_compact.errors import CompactionError
    from lance_compact.options import MAX_PREDICATE_TOKENS, check_predicate

    check_predicate("db.t", "id + " * 390 + "1 = 2")
    check_predicate("db.t", "name = '" + "x+" * 5000 + "'")
    for deep in ["id + " * 700 + "1 = 2", "id" + " IS NULL" * 2000]:
        with pytest.raises(CompactionError, match=f"table db.t: option where has \\d+ tokens .*at most "
                                                  f"{MAX_PREDICATE_TOKENS}"):
            check_predicate("db.t", deep)
