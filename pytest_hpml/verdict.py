"""A comparison's verdict of a metric (Verdict), the level a save accepted (Accepted), and a
verdict whose words wait until they are read (Worded).

A 10 000-row sweep's compare gives 10 000 verdicts, of which the terminal shows a few lines:
what each rests on and what its blind spot cannot see, in words (the noise's spreads as
percentages, the processes that would narrow a blind spot, found by trying each count), took a
quarter of its judging. A Worded verdict says them when they are first read (a report, a
table, a line shown, to_dict), the same words as a Verdict made with them; whether it is a
blind spot is known without them (has_blind_spot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

VERDICTS = ("improved", "unchanged", "regressed", "ambiguous", "new", "missing", "suspect",
            "incomparable", "unconfirmed")


@dataclass(frozen=True)
class Accepted:
    """A change a save accepted as a metric's new level: when, and the level before and after
    (in the unit of the verdict that carries it)."""

    on: str  # ISO 8601 date and time of the save
    before: float
    after: float


@dataclass(frozen=True)
class Verdict:
    """How a measured metric of this run compares with its evidence (a stored baseline, the
    code at a git ref measured now, another report), and what that rests on: a value beside the
    measurement, made by the comparison engine (pytest_hpml.compare.engine)."""

    outcome: str  # one of VERDICTS
    unit: str = ""  # of `baseline` and `current` (the baseline's values are converted to it)
    baseline: float | None = None  # the stored value the change is measured from
    current: float | None = None  # the value the verdict rests on: the median of the processes
    change: float | None = None  # relative change from `baseline`
    mdc: float | None = None  # the smallest relative change this machine can detect
    basis: str | None = None  # what the verdict rests on, in words
    # The change is relative to the machine's yardstick, not as measured.
    relative: bool = False
    p_value: float | None = None  # of the rank test, where one was run
    accepted: Accepted | None = None  # the stored level's last accepted change
    # A blind spot: the detectable change exceeds --hpml-max-detectable; what it cannot see
    # and what would narrow it, in words.
    blind: str | None = None
    processes: int | None = None  # this run's processes behind `current`

    @property
    def has_blind_spot(self) -> bool:
        """Whether this verdict is a blind spot (its `blind` says what it cannot see)."""
        return bool(self.blind)

    def __post_init__(self) -> None:
        if self.outcome not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.outcome!r}")

    def to_dict(self) -> dict[str, Any]:
        # Field by field (asdict's recursion took 1.2 s for a 10 000-row sweep's verdicts);
        # the accepted level is the one nested value.
        data = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None or value is False or value == "":
                continue
            data[name] = asdict(value) if isinstance(value, Accepted) else value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        known = cls.__dataclass_fields__
        fields = {k: v for k, v in data.items() if k in known}
        accepted = fields.get("accepted")
        # Reports of pytest-hpml 0.2 said the accepted level in words: not read back.
        fields["accepted"] = Accepted(**accepted) if isinstance(accepted, dict) else None
        return cls(**fields)


#: What a Worded verdict says when first read: its basis and its blind spot (None: none).
Words = Callable[[], tuple[str | None, str | None]]


class Worded(Verdict):
    """A Verdict whose `basis` and `blind` are put in words when first read, by `words()`; it
    is equal to, hashes as, pickles as and serializes as the Verdict made with those words.
    `blind_spot`: whether `words()` gives a blind spot (known before it is said)."""

    def __init__(self, outcome: str, *args: Any, words: Words | None = None,
                 blind_spot: bool = False, **fields: Any) -> None:
        super().__init__(outcome, *args, **fields)
        if words is not None:  # else made with its words, as dataclasses.replace makes a copy
            state = self.__dict__
            del state["basis"], state["blind"]
            state["_words"], state["_blind_spot"] = words, blind_spot

    @classmethod
    def said_later(cls, outcome: str, words: Words, blind_spot: bool, **fields: Any) -> Worded:
        """Worded(outcome, words=words, blind_spot=blind_spot, **fields), its state put in
        place at once: a frozen dataclass's __init__ sets each field through
        object.__setattr__ (Worded(...): 3.1 us a verdict, this: 1.9 us, timeit, 2026-11-28;
        a Verdict made with its words 1.7 us, for the 10 000 of a sweep)."""
        if outcome not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {outcome!r}")
        unknown = fields.keys() - _DEFERRED_DEFAULTS.keys()
        if unknown:
            raise TypeError(f"Worded has no field(s) {sorted(unknown)}")
        made = object.__new__(cls)
        state = made.__dict__
        state["outcome"] = outcome
        state.update(_DEFERRED_DEFAULTS, **fields, _words=words, _blind_spot=blind_spot)
        return made

    def _said(self, name: str) -> Any:
        state = self.__dict__
        if name not in state:
            basis, blind = state["_words"]()
            # A copy with one of them changed (frozen.evolve) keeps it, and says the other.
            state.setdefault("basis", basis)
            state.setdefault("blind", blind)
        return state[name]

    def _put(self, name: str, value: Any) -> None:
        self.__dict__[name] = value  # Verdict.__init__'s, through object.__setattr__

    basis = property(lambda self: self._said("basis"),  # type: ignore[assignment]
                     lambda self, value: self._put("basis", value))
    blind = property(lambda self: self._said("blind"),  # type: ignore[assignment]
                     lambda self, value: self._put("blind", value))

    @property
    def has_blind_spot(self) -> bool:
        state = self.__dict__
        return bool(state["blind"]) if "blind" in state else state["_blind_spot"]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__dataclass_fields__)

    __hash__ = Verdict.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        # As the Verdict it says: `words` may be a closure, which pickle cannot carry.
        return Verdict.from_dict, (self.to_dict(),)


#: A Worded verdict's fields but its words, with their defaults (Worded.said_later).
_DEFERRED_DEFAULTS = {name: f.default for name, f in Verdict.__dataclass_fields__.items()
                      if name not in ("outcome", "basis", "blind")}
