"""A large family's row's verdict from what the arrays of its shape found (a part of the compare
stage, used by compare/arrays.py): the outcome verdicts.py would give where it needs nothing
more, with its words said when they are read (verdict.Worded); which rows fresh processes
would measure again; what the family's tails hold; the words of a row's modes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pytest_hpml.compare import array_modes, array_noise, level_screen
from pytest_hpml.compare.basis import (
    NO_DIRECTION,
    bimodal_note,
    caught_words,
    not_caught,
    suspected,
    within_tolerance,
)
from pytest_hpml.compare.families import TAIL_MARGIN, Family, farthest_other_way
from pytest_hpml.compare.noise import Advice, Noise, blind_spot
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import SUSPECT, Rules
from pytest_hpml.results import Metric, Replicates, Verdict
from pytest_hpml.verdict import Worded


@dataclass(frozen=True)
class Asked:
    """What a judgement asks of a family's rows: its rules at the family's alpha, the fresh
    processes a suspicion may still get, and whether only new levels matter (a save's)."""

    family: Family
    rules: Rules
    alpha: float
    can_confirm: int
    advice: Advice
    levels_only: bool


def to_confirm(np: Any, noise: array_noise.Noises, change: Any, tol: Any, caught: Any,
               better: list[str | None], k: int, asked: Asked) -> Any:
    """Which rows detectable.confirms would measure again in fresh processes, where a
    worse change beyond the tolerance asks it (False elsewhere; `better`: each row's
    direction): asked of those rows at once (a 10 000-row sweep's compare built a Noise for
    half its rows to ask it, 0.05 s). A save confirms nothing, and asks nothing here."""
    confirmed = np.zeros(len(change), dtype=bool)
    if not asked.can_confirm:
        return confirmed
    lower = np.array([b == "lower" for b in better], dtype=bool)
    higher = np.array([b == "higher" for b in better], dtype=bool)
    worse = (lower & (change > tol)) | (higher & (change < -tol))
    if k > 1:
        return worse
    asks = np.flatnonzero(worse & ~caught)  # a caught change is the full judgement's anyway
    if len(asks):
        confirmed[asks] = noise.taken(asks).could_catch(
            np, change[asks], tol[asks], asked.alpha, asked.can_confirm)
    return confirmed


def verdict(m: Metric, old: Stored, noise: array_noise.Noises, j: int,
            levels: tuple[float, float, float], detectable: tuple[float, float, float, bool, bool],
            k: int, asked: Asked, confirmed: bool, tails: str | None, now: Replicates,
            note: Callable[[], str] | None = None) -> Verdict | None:
    """verdicts._verdict of an ordinary row (the `j`th of `noise`, measured `now`) whose
    `levels` are its stored and current medians and the change between them, and whose
    `detectable` change was taken with its shape's (its tolerance, the change detectable, that
    change without the tolerance, whether that is a blind spot, whether the change is beyond
    it), where it needs nothing more (None: the full judgement's); `confirmed`: whether a worse
    change is measured again (to_confirm); `tails`: what the family's tails say of the row's
    change, where they hold it (within_tails); `note`: what the evidence adds to the noise in
    words (its modes). The Noise is built only where the verdict's words are read."""
    baseline, current, c = levels
    tol, mdc, noisy, blind, caught = detectable
    alpha = asked.alpha
    basis: str | Callable[[str], str]  # its words, or a function of the noise's words
    if abs(c) <= tol:
        outcome, basis = "unchanged", partial(within_tolerance, tol)
    elif m.better is None:
        outcome, basis = "ambiguous", NO_DIRECTION  # a count, a size: never judged
    elif confirmed or caught:
        # Suspect, regressed or improved, then held within the family's tails where they hold
        # it (a 10 000-row sweep's single calls: half its rows), before the machine's moves are
        # weighed: that verdict needs nothing more. The rest is the full judgement's, and so is
        # every row whose spread between processes is unknown (a rank test, or `unconfirmed`).
        if tails is None or noise.between is None:
            return None
        worse = c > 0 if m.better == "lower" else c < 0
        if worse and asked.can_confirm:  # detectable.confirms: caught, or to be confirmed
            outcome, basis = SUSPECT, partial(suspected, c, k)
        else:
            outcome = "regressed" if worse else "improved"
            basis = partial(caught_words, c, mdc, baseline, now.values)
        return Worded.said_later(
            "ambiguous", partial(_held_words, basis, tails, noise, j, noisy, blind,
                                 asked.rules, alpha, asked.advice, note), True,
            unit=m.unit, baseline=baseline, current=current, change=c, mdc=mdc,
            accepted=old.last_accepted(), processes=k)
    elif asked.levels_only:
        return Verdict("ambiguous", unit=m.unit, baseline=baseline, current=current, change=c,
                       mdc=mdc, processes=k, basis=not_caught(c, mdc, level_screen.SCREENED),
                       accepted=old.last_accepted())
    else:
        outcome, basis = "ambiguous", partial(not_caught, c, mdc)
    # Said when read: most of a sweep's verdicts are counted, not shown (verdict.Worded).
    return Worded.said_later(
        outcome, partial(_words, basis, noise, j, noisy, blind, asked.rules, alpha,
                         asked.advice, note), blind,
        unit=m.unit, baseline=baseline, current=current, change=c, mdc=mdc,
        accepted=old.last_accepted(), processes=k)


def _words(basis: str | Callable[[str], str], noise: array_noise.Noises, j: int, noisy: float,
           blind: bool, rules: Rules, alpha: float, advice: Advice,
           note: Callable[[], str] | None = None) -> tuple[str, str | None]:
    """A verdict's basis (`basis` with the noise of the `j`th row of `noise` in words, and
    what `note` says) and its blind spot, where it has one (`noisy`: the detectable change
    without the tolerance)."""
    n = Noise(*noise.parts(j))
    said = basis if isinstance(basis, str) else basis(n.describe() + (note() if note else ""))
    return said, blind_spot(n, noisy, rules.max_detectable, alpha, advice) if blind else None


def _held_words(basis: Callable[[str], str], tails: str, noise: array_noise.Noises, j: int,
                noisy: float, blind: bool, rules: Rules, alpha: float, advice: Advice,
                note: Callable[[], str] | None = None) -> tuple[str, str]:
    """The words of a verdict the family's tails hold (Family.hold_within_tails): the verdict
    it was (`basis`, with the noise of the `j`th row of `noise` in words) and why it is held;
    its blind spot, or why it is held where it has none."""
    said, spot = _words(basis, noise, j, noisy, blind, rules, alpha, advice, note)
    return f"{said}; {tails}", spot or tails


def within_tails(np: Any, family: Family, changes: Any) -> list[str | None]:
    """Family.within_tails of each row's change (row_change: its mean log now less its stored
    one), taken on all the rows at once: what the verdict held says, None where the change
    lies beyond the family's tails (or they are not known)."""
    tails = family.tails("")
    if tails is None:
        return [None] * len(changes)
    up = changes > 0
    held = np.abs(changes) <= TAIL_MARGIN * np.where(up, farthest_other_way(tails, True),
                                                    farthest_other_way(tails, False))
    said = {way: family.tails_said(tails, way) for way in (True, False)}
    return [said[way] if kept else None for way, kept in zip(up.tolist(), held.tolist(),
                                                            strict=True)]


def bimodal(found: array_modes.Modes, j: int) -> str:
    """What the modes of the `j`th row of `found` add to its noise in words."""
    return bimodal_note(found.modal(j))
