"""The baseline store: one JSON file per machine key and size profile, holding for every
measured metric its latest run (its value, sample count and the notch of its median) and the
values of its last runs (history), so that the run-to-run spread of each metric on this machine
is known. One row per line: a git diff shows which rows a save moved.

Saving is safe against everything that happens to CI runners:
- concurrent saves (two jobs, two shells) merge under an exclusive lock: the file is re-read
  and merged just before the atomic rename, so no run's rows are lost;
- an interrupted save (Ctrl-C, SIGKILL, a full disk) leaves the previous file intact, and the
  orphaned temporary of a killed save is removed by the next save;
- a file that cannot be read is an error naming it, and is never overwritten;
- the merged file is checked by the loader's own rules before the rename, so a save never
  writes a file the next run would refuse;
- a symlinked file is written through (the file it links to is merged and replaced);
- the file keeps its mode (or gets the umask's for a new file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_hpml import __version__
from pytest_hpml.compare import provenance
from pytest_hpml.compare.baseline_rules import Invalid, check_document
from pytest_hpml.compare.bulk import collector_paused
from pytest_hpml.compare.history import MergePolicy, extend
from pytest_hpml.compare.scratch import clean_stale_temporaries, locked
from pytest_hpml.compare.stored import Stored
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.plain_numbers import json_safe
from pytest_hpml.report.files import write_atomic, write_target
from pytest_hpml.results import Record

SCHEMA_PREFIX = "pytest-hpml/baseline/"
SCHEMA = f"{SCHEMA_PREFIX}2"
#: Files written before the history was kept: still read, as one run each.
OLD_SCHEMAS = ("pytest-hpml/baseline/1",)

class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and what to do (a
    ValueError, as read_results documents for files it cannot read)."""


@dataclass
class Baseline:
    path: Path
    fingerprint: dict[str, Any]
    profile: str
    records: dict[str, dict[str, Any]]  # record id -> record dict
    # save id -> {"on": ISO date, "commit": sha or None} (compare/provenance.py); empty in
    # files written before saves were recorded
    saves: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The measured metrics of each row as the load checked them (record id -> name -> Stored),
    # kept so that a comparison and a save do not build and check them again (a 10 000-row
    # save built 70 000 of them); empty for a Baseline made by hand.
    checked: dict[str, dict[str, Stored]] = field(default_factory=dict, repr=False)
    # The file's stamp (stamp()) taken before it was read: a file with another stamp now has
    # been rewritten since (current()).
    stamp: tuple[int, ...] | None = field(default=None, repr=False)

    def metrics_for(self, record_id: str) -> dict[str, Stored]:
        found = self.checked.get(record_id)
        if found is not None:
            return dict(found)
        data = self.records.get(record_id)
        if not data:
            return {}
        return {m["name"]: Stored.from_dict(m) for m in data.get("metrics", [])
                if m.get("kind", "measured") == "measured"}


@dataclass
class SaveResult:
    path: Path
    skipped: list[str] = field(default_factory=list)  # "record metric = nan" not stored
    levels: list[str] = field(default_factory=list)  # "record metric: before -> after"
    kept: list[str] = field(default_factory=list)  # moves the history kept (no new level)


def baseline_path(directory: Path, key: str, profile: str) -> Path:
    return Path(directory) / f"{key}-{profile}.json"


def _damaged(path: Path, what: str) -> BaselineError:
    return BaselineError(f"baseline file {path} is damaged ({what}); it was left untouched. "
                         "Fix or remove it, then rerun with --hpml-save-baseline.")


def _schema_problem(path: Path, data: Any) -> BaselineError | None:
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema in (SCHEMA, *OLD_SCHEMAS):
        return None
    number = str(schema).removeprefix(SCHEMA_PREFIX)
    if str(schema).startswith(SCHEMA_PREFIX) and number.isdigit() and \
            int(number) > int(SCHEMA.removeprefix(SCHEMA_PREFIX)):
        return BaselineError(
            f"baseline file {path} was written by a newer pytest-hpml (schema {schema!r}); "
            f"pytest-hpml {__version__} reads schemas up to {SCHEMA!r}. Upgrade pytest-hpml "
            "(pip install -U pytest-hpml) to the version that wrote it; the file was left "
            "untouched.")
    return BaselineError(
        f"baseline file {path} is not a pytest-hpml baseline (expected schema {SCHEMA!r}); "
        "it was left untouched. Move it away or point --hpml-baselines at another folder.")


def stamp(path: Path) -> tuple[int, ...] | None:
    """What tells a file rewritten since (a save replaces it by a rename: another inode)."""
    try:
        found = Path(path).stat()
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def parse(path: Path, text: str) -> Baseline:
    """A baseline from its text; BaselineError naming `path` when it cannot be used."""
    # One pause for the JSON and its check: each pause's end had the collector walk all it
    # made (a 10 000-row file's rows, then its checked metrics).
    with collector_paused():
        data = _decoded(path, text)
        problem = _schema_problem(path, data)
        if problem:
            raise problem
        checked: dict[str, dict[str, Stored]] = {}
        try:
            fingerprint, profile, records, saves = check_document(data, checked)
        except Invalid as exc:
            raise _damaged(path, str(exc)) from None
    return Baseline(path, fingerprint, profile, records, saves, checked)


def _decoded(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:  # lists in lists deeper than Python's stack: no baseline is
        raise _damaged(path, "its JSON is nested too deeply to be a baseline") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"baseline file {path} is not valid JSON ({exc}); it was left untouched. "
            "Fix or remove it, then rerun with --hpml-save-baseline to record a new one."
        ) from None


def load(path: Path) -> Baseline | None:
    """The baseline at `path`, None when there is none; BaselineError when unreadable."""
    path = Path(path)
    if not path.exists():
        return None
    # Stamped before it is read: a save landing in between makes the stamp stale (the file is
    # read again by current()), never the content.
    before = stamp(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(
            f"baseline file {path} cannot be read ({exc}); it was left untouched. "
            "Fix or remove it, then rerun with --hpml-save-baseline to record a new one."
        ) from exc
    found = parse(path, text)
    found.stamp = before
    return found


def current(path: Path, known: Baseline | None) -> Baseline | None:
    """The file at `path` as it is now: `known` where it was read from the file as it still is
    (a 10 000-row file takes a second to read and check again), else the file read again
    (another shard's or runner's save landed meanwhile)."""
    if known is not None and known.stamp is not None and stamp(path) == known.stamp:
        return known
    return load(path)


def _text(document: dict[str, Any], encoded: dict[str, str] | None = None) -> str:
    """A baseline's text: its header indented, each row on a line of its own (a save changes
    the lines of the rows it measured, so a git diff of the baseline branch shows which).
    The document is JSON's already (json_safe, or read from a file); `encoded`: rows' text
    made already, by id."""
    head = json.dumps({k: v for k, v in document.items() if k != "records"}, indent=1,
                      allow_nan=False)
    encoded = encoded or {}
    rows = [encoded.get(r["id"]) or _encode_row(r) for r in document["records"]]
    return head[:-2] + ',\n "records": [\n' + ",\n".join(rows) + "\n ]\n}\n"


#: One encoder for every row (json.dumps with options builds one per call: 10 000 a save).
_ROW = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _row_encoder() -> Callable[[Any], str]:
    """_ROW.encode, with json's C encoder made once rather than on every call (as encode makes
    it: a fifth of a 10 000-row save's encoding); _ROW.encode where json has no C encoder. The
    same text: encode's one-shot path is this encoder. No circular check: a row is the merge's
    dicts and lists of numbers and strings."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ROW.encode
    chunks = make(None, _ROW.default, json.encoder.encode_basestring_ascii, None,
                  _ROW.key_separator, _ROW.item_separator, False, False, False)
    return lambda row: "".join(chunks(row, 0))


_encode_row = _row_encoder()


def save(path: Path, fingerprint: dict[str, Any], profile: str, records: list[Record],
         policy: MergePolicy | None = None, known: Baseline | None = None) -> SaveResult:
    """Merge `records` into the file at `path` under its lock, atomically. The merged file is
    checked by the loader's own rules before the rename: a save never writes a file the next
    run would refuse. A symlink is written through (its target is the file merged). `known`:
    the file as the run read it, used where the file has not been rewritten since."""
    policy = policy or MergePolicy()
    path = write_target(Path(path))
    if policy.keep < 1:
        raise ValueError(f"keep must be >= 1 run, got {policy.keep}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path), collector_paused(freeze=True):
        clean_stale_temporaries(path)
        # Read under the lock, just before writing: a save that finished a moment ago is
        # merged, not overwritten. A damaged file raises here and is never overwritten.
        existing = current(path, known)
        if existing and machine_key(existing.fingerprint) != machine_key(fingerprint):
            raise BaselineError(
                f"baseline file {path} belongs to machine {machine_key(existing.fingerprint)!r}"
                f", not this one ({machine_key(fingerprint)!r}); it was left untouched.")
        # This save's entry in the saves table, under an id no save in the file holds.
        table = dict(existing.saves) if existing else {}
        when = policy.when or provenance.utc_now()
        policy = replace(policy, when=when, save_id=provenance.new_save_id(when, table),
                         commits={k: v.get("commit") for k, v in table.items()
                                  if isinstance(v, dict)})
        table[policy.save_id] = provenance.entry(when, policy.commit)
        try:
            merged, skipped, levels, kept = extend(
                existing.records if existing else {}, records, policy,
                existing.metrics_for if existing else None)
        except (TypeError, ValueError) as exc:
            raise BaselineError(f"the save to {path} was refused: the merged file would be "
                                f"damaged ({exc}); the file was left untouched.") from None
        _write_checked(path, fingerprint, profile, table, merged, "the save to",
                       existing.records if existing else None)
    return SaveResult(path, skipped, levels, kept)


def _write_checked(path: Path, fingerprint: dict[str, Any], profile: str,
                   table: dict[str, Any], rows: dict[str, Any], what: str,
                   checked: dict[str, Any] | None = None) -> None:
    """Write the file of `rows` atomically once it passes the loader's own checks: a file the
    loader would refuse is never written (the one there stays). The document checked is the
    one written, as JSON makes it (json_safe: what _text dumps); `checked` holds rows a load
    checked already, each skipped where the merge kept it as it was (the same object)."""
    try:
        safe, encoded = {}, {}
        for k, row in rows.items():
            if checked is not None and checked.get(k) is row:
                safe[k] = row
                continue
            try:
                # Standard JSON as it is (no NaN, no infinity: a save keeps none), encoded
                # once: json_safe walked every new row of a 10 000-row save for nothing.
                encoded[k], safe[k] = _encode_row(row), row
            except ValueError:
                safe[k] = json_safe(row)
        document = {"schema": SCHEMA, "fingerprint": json_safe(fingerprint), "profile": profile,
                    "saves": json_safe(provenance.kept(table, rows.values())),
                    "records": [safe[k] for k in sorted(safe)]}
        check_document(document, skip=checked)
        text = _text(document, encoded)
    except (Invalid, TypeError, ValueError) as exc:
        raise BaselineError(f"{what} {path} was refused: the merged file would be damaged "
                            f"({exc}); the file was left untouched.") from None
    write_atomic(path, lambda f: f.write(text))


@dataclass
class ShardsMerged:
    path: Path
    taken: dict[str, list[str]] = field(default_factory=dict)  # shard -> rows it saved


def _unseen_save(row: dict[str, Any], table: dict[str, Any], shard_row: dict[str, Any],
                 shard_table: dict[str, Any]) -> str | None:
    """A save of `row` (in the file) that the shard's copy of the row never held: the file
    moved after the shard copied it. Saves older than everything the shard's row refers to
    are the history its save trimmed, not a move."""
    seen = [provenance.parse_time(shard_table[i]["on"])
            for i in provenance.referenced([shard_row]) if i in shard_table]
    # A save is known by its id and its entry: an id is a save's second, bumped past the ids
    # its file holds, so the shard's save (bumped past the file's last one) and a later save
    # of the file can carry one id.
    unseen = {i for i in provenance.referenced([row]) if shard_table.get(i) != table.get(i)}
    for save in sorted(unseen):
        when = provenance.parse_time(table.get(save, {}).get("on", ""))
        if when is not None and seen and when >= min(seen):
            return f"{save} ({table[save]['on']})"
    return None


def merge_shards(path: Path, shards: list[tuple[str, Path, set[str]]]) -> ShardsMerged:
    """Bring the saves of shards into the file at `path`, under its lock and validated before
    the rename, as save() writes. Each shard (its name, its file, the rows it ran) ran part of
    the suite with a copy of this folder and saved into its copy (save(), its history rules):
    the rows it ran that differ from the file's are the ones its save wrote, taken with their
    saves, so the file holds what one save of the whole suite would have written. A shard of
    another machine, and a file that gained a save the shard never saw, are errors naming
    the shard; nothing is written then."""
    path = write_target(Path(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        clean_stale_temporaries(path)
        existing = load(path)
        records = dict(existing.records) if existing else {}
        table = dict(existing.saves) if existing else {}
        fingerprint, profile = (existing.fingerprint, existing.profile) if existing else ({}, "")
        merged = ShardsMerged(path)
        for label, shard_path, ran in shards:
            shard = load(shard_path)
            if shard is None:
                continue
            if existing and machine_key(shard.fingerprint) != machine_key(existing.fingerprint):
                raise BaselineError(f"shard {label}: {shard_path} was saved on "
                                    f"{machine_key(shard.fingerprint)!r}, {path} on "
                                    f"{machine_key(existing.fingerprint)!r}; nothing was merged")
            before = existing.records if existing else {}
            rows = {rid: row for rid, row in shard.records.items()
                    if rid in ran and row != before.get(rid)}
            for rid, row in sorted(rows.items()):
                moved = rid in before and _unseen_save(before[rid], table, row, shard.saves)
                if moved:
                    raise BaselineError(
                        f"{path} holds save {moved} of row {rid} that shard {label} did not "
                        "start from: the file changed after the shards copied it. Copy the "
                        "folder again and rerun the shards; nothing was merged")
            for save in sorted(provenance.referenced(rows.values())):
                entry = shard.saves[save]
                if save in table and table[save] != entry:  # two saves of the same second
                    new = provenance.new_save_id(entry["on"], set(table) | set(shard.saves))
                    rows = {rid: provenance.renamed(row, save, new) for rid, row in rows.items()}
                    save = new
                table[save] = entry
            records.update(rows)
            if rows:
                merged.taken[label] = sorted(rows)
                fingerprint, profile = shard.fingerprint, shard.profile  # its versions: newest
        if not merged.taken:
            return merged
        _write_checked(path, fingerprint, profile, table, records, "the merge into")
    return merged
