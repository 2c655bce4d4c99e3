"""The rules a baseline document must satisfy, the one set a load and a save both apply: every
number a comparison uses is a finite number, the fingerprint's facts have their types, each
row is there once, and each measured metric is one hpml.record would have accepted."""

from __future__ import annotations

import math
from typing import Any

from pytest_hpml.compare import provenance
from pytest_hpml.compare.stored import Stored
from pytest_hpml.results import check_measurement


class Invalid(Exception):
    """What is wrong with a baseline document, in words (the caller names the file)."""


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond float64, 10**400
        return False


def _finite_numbers(values: list[Any]) -> bool:
    """Whether every value of a list is a finite number (_finite_number), at C speed for the
    lists a file holds: numbers whose exact sum is finite are each finite, and no True or False
    (which sum as 1 and 0) is among them; one by one where that cannot tell (a string, an
    infinity, a sum beyond a float, a value equal to 1 or 0)."""
    try:
        if math.isfinite(math.fsum(values)) and True not in values and False not in values:
            return True
    except (TypeError, ValueError, OverflowError):
        pass
    return all(_finite_number(v) for v in values)


def check_metric(record_id: str, m: Any, build: bool = True) -> Stored | None:
    """Every number a comparison will use is a finite number; the rest of the rules (a name
    that is a string, no negative time) are Metric's own, the ones hpml.record applies.
    Returns the metric as Stored; None where not `build` (a save's check of what it writes,
    which keeps no Stored: the same rules, Stored's own applied without building one)."""
    if not isinstance(m, dict) or not isinstance(m.get("name"), str):
        raise Invalid(f"record {record_id!r} has a metric without a name")
    if not _finite_number(m.get("value")):
        raise Invalid(f"{_where(record_id, m)}: value {m.get('value')!r} is not a finite "
                      "number")
    for key in _NUMBER_LISTS:
        values = m.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or not _finite_numbers(values):
            bad = values if not isinstance(values, list) else next(
                v for v in values if not _finite_number(v))
            raise Invalid(f"{_where(record_id, m)}: {key} hold {bad!r}, not a finite number")
    saves = m.get("history_saves")
    if saves is not None and not (isinstance(saves, list) and all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in saves)):
        raise Invalid(f"{_where(record_id, m)}: history_saves holds {saves!r}, not counts of "
                      "values (integers > 0)")
    accepted = m.get("accepted")
    if accepted is not None and not (isinstance(accepted, list) and all(
            isinstance(a, dict) and isinstance(a.get("on"), str) and _finite_number(
                a.get("before")) and _finite_number(a.get("after")) for a in accepted)):
        raise Invalid(f"{_where(record_id, m)}: accepted holds {accepted!r}, not a list of "
                      "{'on': date, 'before': number, 'after': number}")
    try:
        if not build:
            # Stored.__post_init__'s check, on the fields Stored.from_dict would give it.
            check_measurement(m["name"], m["value"], m.get("unit", ""), m.get("better"),
                              samples=m.get("samples"), tolerance=m.get("tolerance"))
            return None
        return Stored.from_dict(m)
    except (TypeError, ValueError) as exc:  # Metric's rules, whose words name the metric
        raise Invalid(f"record {record_id!r}: {exc}") from exc


#: The lists of numbers a stored metric may hold.
_NUMBER_LISTS = ("samples", "history", "relative_history", "paced_history")


def _where(record_id: str, m: dict[str, Any]) -> str:
    """The metric a refusal names (said only where there is one: 10 000 rows a load)."""
    return f"metric {m['name']!r} of {record_id!r}"


#: The fingerprint's facts that name the file's machine (machine_key), and their types.
_KEY_FACTS = {"gpu": str, "cpu": str, "gpu_count": int, "cpu_cores": int}


def _check_fingerprint(fingerprint: Any) -> dict[str, Any]:
    if not isinstance(fingerprint, dict):
        raise Invalid(f"fingerprint is {type(fingerprint).__name__}, not an object")
    for key, value in fingerprint.items():
        kind = _KEY_FACTS.get(key)
        if value is None:
            continue
        if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise Invalid(f"fingerprint {key} is {value!r}, not a {kind.__name__}")
        if not isinstance(value, (str, int, float, bool)):
            raise Invalid(f"fingerprint {key} is {type(value).__name__}, not a plain value")
    return dict(fingerprint)


def check_document(data: dict[str, Any], checked: dict[str, dict[str, Stored]] | None = None,
                   skip: dict[str, Any] | None = None
                   ) -> tuple[dict[str, Any], str, dict[str, Any], dict[str, Any]]:
    """(fingerprint, profile, records by id, saves by id) of a baseline document; Invalid
    names what is wrong. The one set of rules a load and a save both apply. `checked`, where
    given, receives each row's measured metrics as checked; a row that is the same object as
    `skip`'s row of its id was checked by the load that read it, and is not checked again."""
    try:
        records_list, profile = data["records"], data["profile"]
        fingerprint = _check_fingerprint(data["fingerprint"])
        saves = provenance.check_table(data.get("saves"))
    except KeyError as exc:
        raise Invalid(f"no {exc.args[0]!r}") from exc
    except ValueError as exc:
        raise Invalid(str(exc)) from exc
    if not isinstance(records_list, list):
        raise Invalid("records is not a list")
    if not isinstance(profile, str):
        raise Invalid(f"profile is {profile!r}, not a string")
    records: dict[str, dict[str, Any]] = {}
    for r in records_list:
        if not isinstance(r, dict) or not isinstance(r.get("id"), str):
            raise Invalid(f"a record's id is {r.get('id') if isinstance(r, dict) else r!r}, "
                          "not a string")
        if r["id"] in records:
            # A hand merge of two files: which copy is the baseline cannot be told.
            raise Invalid(f"record {r['id']!r} is in it twice; keep one of the two")
        if skip is not None and skip.get(r["id"]) is r:
            records[r["id"]] = r  # checked when it was read, and merged as it was
            continue
        metrics = r.get("metrics", [])
        if not isinstance(metrics, list):
            raise Invalid(f"record {r['id']!r}: metrics is not a list")
        row: dict[str, Stored] = {}
        for m in metrics:
            stored = check_metric(r["id"], m, build=checked is not None)
            if stored is not None and m.get("kind", "measured") == "measured":
                row[m["name"]] = stored
            try:
                provenance.check_metric(m, saves)
            except ValueError as exc:
                raise Invalid(f"{_where(r['id'], m)}: {exc}") from exc
        records[r["id"]] = r
        if checked is not None:
            checked[r["id"]] = row
    return fingerprint, profile, records, saves
