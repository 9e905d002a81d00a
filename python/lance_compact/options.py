"""The compaction options: one spec (parameters.json), parsed and validated here.

The same spec declares the CALL parameters on the JVM side, so a name, type or range
lives in exactly one place.
"""
from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping

from .errors import CompactionError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptionSpec:
    name: str
    type: str
    doc: str
    sql: bool = False
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    lance_default: Any = None
    aliases: tuple[str, ...] = ()  # former names, accepted for one release (see former_name)


def make_spec(entry: Mapping[str, Any]) -> OptionSpec:
    """An entry of parameters.json as an :class:`OptionSpec` (keys it does not hold ignored)."""
    fields = set(OptionSpec.__dataclass_fields__)
    o = {k: v for k, v in entry.items() if k in fields}
    if o.get("choices"):
        o["choices"] = tuple(o["choices"])
    o["aliases"] = tuple(o.get("aliases") or ())
    return OptionSpec(**o)


@lru_cache(maxsize=None)
def spec() -> dict:
    """The parsed parameters.json."""
    return json.loads(resources.files(__package__).joinpath("parameters.json").read_text())


@lru_cache(maxsize=None)
def option_specs() -> dict[str, OptionSpec]:
    return {o["name"]: make_spec(o) for o in spec()["options"]}


def canonical(name: str, specs: Mapping[str, OptionSpec]) -> str:
    """``name``, or the entry of ``specs`` it is a former name (alias) of; an unknown name
    as it is."""
    if name in specs:
        return name
    return next((o.name for o in specs.values() if name in o.aliases), name)


_WARNED: set[tuple[str, str]] = set()


def former_name(where: str, old: str, new: str) -> None:
    """Say (in the engine's log, once per process and name) that ``old`` was used, the former
    name of ``new``, still accepted for one release."""
    if (where, old) not in _WARNED:
        _WARNED.add((where, old))
        log.warning("%s %s is deprecated: it is the former name of %s, accepted until the next release; "
                    "use %s", where, old, new, new)


def columns_ddl(columns: list[tuple[str, str]]) -> str:
    """Spark DDL of (name, type) columns, as the engine's answers carry their schema."""
    return ", ".join(f"`{n}` {t}" for n, t in columns)


def result_columns(kind: str = "result_columns") -> list[tuple[str, str]]:
    """(name, type) of the columns of a result, in order: ``result_columns`` (compact),
    ``plan_columns`` (plan_compaction) or ``layout_columns`` (describe_layout)."""
    return [(c["name"], c["type"]) for c in spec()[kind]]


LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1  # Spark's LONG, and what Lance converts
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _num(x: float) -> str:
    """A bound as written in the spec: 4294967295, not 4.29497e+09."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# String parameters that are names: never stripped.
AS_WRITTEN = frozenset({"name", "column", "indices"})


def convert_value(o: OptionSpec, value: Any, table: str) -> Any:
    """Convert a value (typed, or text from the options map) to the option's type."""
    def bad(expected: str) -> CompactionError:
        return CompactionError(
            f"table {table}: option {o.name} expects {expected}, got {value!r}")

    if o.type == "long":
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            v = value
        elif isinstance(value, float) and value.is_integer():
            v = int(value)
        elif isinstance(value, str):
            try:
                v = int(value.strip())
            except ValueError:
                raise bad("an integer") from None
        else:
            raise bad("an integer")
        if not LONG_MIN <= v <= LONG_MAX:  # Lance's integers are 64-bit: it cannot convert more
            raise bad(f"an integer from {LONG_MIN} to {LONG_MAX}")
    elif o.type == "double":
        if isinstance(value, bool):
            raise bad("a number")
        try:
            v = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise bad("a number") from None
        if not math.isfinite(v):  # NaN passes every range check; Lance's thresholds need a number
            raise bad("a finite number")
    elif o.type == "boolean":
        if isinstance(value, bool):
            v = value
        elif isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            v = value.strip().lower() in _TRUE
        else:
            raise bad("true or false")
    elif o.type == "string":
        if not isinstance(value, str):
            raise bad("a string")
        # a name is taken as written and checked so (runtime/identifiers.py): stripping would
        # quietly make 'x\n' or 'x\x85' (Python's whitespace) another name
        v = value if o.name in AS_WRITTEN else value.strip()
    elif o.type in ("duration", "age"):  # checked and read where used (runtime/durations.py)
        if not isinstance(value, (str, timedelta, datetime)):
            raise bad("a duration or a moment" if o.type == "age" else "a duration")
        v = value.strip() if isinstance(value, str) else value
    elif o.type == "long_list":
        items = value.split(",") if isinstance(value, str) else value
        try:
            v = sorted({int(str(x).strip()) for x in items if str(x).strip()})
        except (TypeError, ValueError):
            raise bad("comma-separated integers") from None
        for x in v:
            if o.min is not None and x < o.min:
                raise bad(f"integers >= {_num(o.min)}")
            if x > LONG_MAX:
                raise bad(f"integers <= {LONG_MAX}")
        return v
    else:  # pragma: no cover - the spec is ours
        raise AssertionError(f"unknown option type {o.type}")

    # a number out of range is shown as the number it was read as ('0' from an options map: 0)
    shown = _num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(value)
    if o.min is not None and v < o.min:
        raise CompactionError(
            f"table {table}: option {o.name} must be >= {_num(o.min)}, got {shown}")
    if o.max is not None and v > o.max:
        raise CompactionError(
            f"table {table}: option {o.name} must be <= {_num(o.max)}, got {shown}")
    if o.choices is not None and v not in o.choices:
        raise CompactionError(
            f"table {table}: option {o.name} must be one of {', '.join(o.choices)}, got {value!r}")
    return v


def _specs(section: str) -> dict[str, OptionSpec]:
    return {o["name"]: make_spec(o) for o in spec().get(section, [])}


@lru_cache(maxsize=None)
def run_specs() -> dict[str, OptionSpec]:
    """How a run commits and retries (partial_progress, max_commits, max_retries)."""
    return _specs("run_settings")


@lru_cache(maxsize=None)
def hook_specs() -> dict[str, OptionSpec]:
    """Test-only fault injection hooks."""
    return _specs("test_hooks")


TEST_HOOKS_ENV = "LANCE_COMPACT_TEST_HOOKS"


@lru_cache(maxsize=None)
def hooks_enabled() -> bool:
    """Whether this process was started for tests (``$LANCE_COMPACT_TEST_HOOKS=1`` in the
    driver JVM's environment, inherited by its engine). Read once, at engine start: nothing a
    SQL user passes can switch it on; without it every ``test_*`` key is an unknown option."""
    return os.environ.get(TEST_HOOKS_ENV, "").strip() == "1"


@lru_cache(maxsize=None)
def specs_of(section: str) -> dict[str, OptionSpec]:
    """Parameters of another procedure (``optimize_indices_parameters``)."""
    return _specs(section)


def procedure_args(procedure: str, section: str, params: dict[str, Any] | None,
                   table: str) -> dict[str, Any]:
    """A procedure's parameters (``params``, name -> value) checked against parameters.json's
    ``section`` and converted to their types; unknown names are rejected with the valid ones."""
    specs = _specs(section)
    args: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in (params or {}).items():
        name = canonical(key, specs)
        if name not in specs:
            raise CompactionError(f"table {table}: unknown {procedure} parameter {key!r}; "
                                  f"valid ones are: {', '.join(sorted(specs))}")
        if value is None:
            continue
        if name in args:  # a former name and the new one
            raise CompactionError(f"table {table}: {procedure} parameter {name} is given twice "
                                  f"(as {given_as[name]} and as {key}, its former name or itself): give it once")
        if name != key:
            former_name(f"{procedure} parameter", key, name)
        given_as[name] = key
        args[name] = convert_value(specs[name], value, table)
    return args


def run_defaults() -> dict[str, Any]:
    return {o["name"]: o["default"] for o in spec()["run_settings"]}


@lru_cache(maxsize=None)
def setting_specs() -> dict[str, OptionSpec]:
    """Strategy settings (name -> spec); ``setting_strategies`` says which strategies take each."""
    return _specs("settings")


def setting_strategies(name: str) -> tuple[str, ...]:
    """The registered strategies that take setting ``name``."""
    return tuple(next(o for o in spec()["settings"] if o["name"] == name)["strategies"])


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a misspelled ``name``, else ''."""
    close = difflib.get_close_matches(name.strip().lower(), sorted(set(known)), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_options(table: str, strategy: str, planner_settings: Mapping[str, OptionSpec],
                  params: Mapping[str, Any] | None, extra: Mapping[str, Any] | None
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Validate named parameters and the options map into (Lance options, strategy settings,
    run settings, test hooks).

    ``params`` holds typed values of named CALL parameters (None = not given); ``extra`` the
    options map (text values). Only Lance options the user gave are returned, so Lance's
    defaults and the table's ``lance.compaction.*`` settings apply to the rest.
    ``planner_settings`` are the settings the chosen strategy takes.
    """
    lance_specs = option_specs()
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    run: dict[str, Any] = {}
    hooks: dict[str, Any] = {}
    given_as: dict[str, str] = {}  # name -> as it was given (itself, or a former name)
    for source, values in (("parameter", params or {}), ("options map key", extra or {})):
        for key, value in values.items():
            name = key.strip().lower() if isinstance(key, str) else key
            given = name
            if isinstance(name, str) and name not in planner_settings:  # a former name (alias)
                name = canonical(name, {**lance_specs, **run_specs(), **setting_specs(), **planner_settings})
            if name in lance_specs:
                target, o = options, lance_specs[name]
            elif name in run_specs():
                target, o = run, run_specs()[name]
            elif name in hook_specs() and hooks_enabled():
                target, o = hooks, hook_specs()[name]
            elif name in planner_settings:
                target, o = settings, planner_settings[name]
            elif name in setting_specs():
                if value is None:
                    continue
                raise CompactionError(
                    f"table {table}: setting {name} belongs to strategy "
                    f"{' or '.join(setting_strategies(name))}, not {strategy}")
            else:
                known = [*lance_specs, *run_specs(), *setting_specs()]
                raise CompactionError(
                    f"table {table}: unknown {source} {key!r}{did_you_mean(str(name), known)}; valid options are: "
                    + ", ".join(sorted(lance_specs) + sorted(run_specs()))
                    + (f"; settings of strategy {strategy}: " + ", ".join(sorted(planner_settings))
                       if planner_settings else ""))
            if value is None:
                continue
            if name in options or name in settings or name in run or name in hooks:
                first = given_as[name]
                raise CompactionError(
                    f"table {table}: option {name} is given twice ("
                    + ("as a parameter and in options" if first == given else
                       f"as {first} and as {given}, one the former name of the other") + ")")
            if given != name:
                former_name(source, given, name)
            given_as[name] = given
            target[name] = convert_value(o, value, table)
            if name == "where":
                check_predicate(table, target[name])
    return options, settings, {**run_defaults(), **run}, hooks


# Lance's planner recurses once per operator of a chain such as ``a + a + ... = 1`` or
# ``a IS NULL IS NULL ...``, on a thread with a small stack: from about 650 levels it overflows
# its stack and the engine process dies (SIGSEGV). Each level takes at least two tokens, so
# 800 tokens keep a predicate below 400 levels.
MAX_PREDICATE_TOKENS = 800
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\w+|\S")


def check_predicate(table: str, predicate: str) -> None:
    """Refuse a ``where`` predicate too long for Lance to evaluate safely."""
    tokens = len(_TOKEN.findall(predicate))
    if tokens > MAX_PREDICATE_TOKENS:
        raise CompactionError(
            f"table {table}: option where has {tokens} tokens (names, literals, operators); at most "
            f"{MAX_PREDICATE_TOKENS} are accepted (Lance's planner overflows its stack on longer "
            "chains of operators): narrow it, e.g. with a range instead of a list")


def lance_options(table: str, params: Mapping[str, Any] | None,
                  extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Lance options only (no strategy settings)."""
    return parse_options(table, "default", {}, params, extra)[0]


def effective(dataset_config: Mapping[str, str], options: Mapping[str, Any], name: str) -> Any:
    """The value Lance will use for option ``name``: given, else the table's
    ``lance.compaction.<name>``, else Lance's default."""
    if name in options:
        return options[name]
    o = option_specs()[name]
    configured = dataset_config.get(f"lance.compaction.{name}")
    if configured is not None:
        return convert_value(o, configured, "(table config)")
    return o.lance_default
