"""The rules every comparison holds a change to (a pytest plugin module): --hpml-tolerance,
--hpml-alpha, --hpml-drift and --hpml-max-detectable, declared once here and read once per run
(rules_of); the comparison with the stored baseline, the comparison with a git ref measured now
and a save deciding on new levels all judge with the same Rules through the comparison engine
(pytest_hpml.compare.engine). The command line around saved runs takes the same rules as
arguments of its own, with the same defaults."""

from __future__ import annotations

import pytest

from pytest_hpml import policy
from pytest_hpml.compare import noise, verdicts
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.policy import significance
from pytest_hpml.session import add_option

RULES_KEY = pytest.StashKey[Rules]()


def rules_of(config: pytest.Config) -> Rules:
    """The run's verdict rules, from its options (read once)."""
    if RULES_KEY not in config.stash:
        opt = config.option
        config.stash[RULES_KEY] = Rules(opt.hpml_tolerance, opt.hpml_alpha, opt.hpml_drift,
                                        opt.hpml_max_detectable or None,
                                        bool(opt.hpml_strict_blind_spots))
    return config.stash[RULES_KEY]


def pytest_addoption(parser: pytest.Parser) -> None:
    # Rules of the outer run's comparison (rerun=False): a fresh process only measures.
    add_option(parser, "--hpml-tolerance", pin=True, rerun=False, type=policy.fraction,
               default=verdicts.DEFAULT_TOLERANCE, metavar="FRACTION",
               help="default relative change before a metric counts as changed "
                    f"({verdicts.DEFAULT_TOLERANCE})")
    add_option(parser, "--hpml-alpha", pin=True, rerun=False, type=significance,
               default=verdicts.DEFAULT_ALPHA, metavar="P",
               help="significance level of a verdict: a change must be this unlikely under "
                    f"the noise this machine has shown ({verdicts.DEFAULT_ALPHA})")
    add_option(parser, "--hpml-drift", pin=True, rerun=False, type=policy.fraction,
               default=noise.DEFAULT_DRIFT, metavar="FRACTION",
               help="drift of a time or a rate between occasions (the machine's speed an hour "
                    f"later) assumed until a metric's history holds saves of "
                    f"{noise.DRIFT_MIN_SAVES} occasions (those of one hour count once), from "
                    "which it is learned; where the baseline's other metrics learned more "
                    f"(their median), that is assumed ({noise.DEFAULT_DRIFT}; 0: none)")
    add_option(parser, "--hpml-max-detectable", pin=True, rerun=False, type=policy.fraction,
               default=verdicts.DEFAULT_MAX_DETECTABLE, metavar="FRACTION",
               help="a metric whose detectable change exceeds this is a blind spot, said in "
                    "the summary and the report with what would narrow it "
                    f"({verdicts.DEFAULT_MAX_DETECTABLE}; 0: never said)")
    add_option(parser, "--hpml-strict-blind-spots", pin=True, rerun=False, action="store_true",
               help="a comparison fails a metric whose detectable change exceeds "
                    "--hpml-max-detectable (a blind spot), saying what would narrow it: CI "
                    "that must see a change of that size fails where it cannot")
