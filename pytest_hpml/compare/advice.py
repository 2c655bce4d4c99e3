"""What narrows a blind spot, said in the options of the comparison's path: against the stored
baseline (more processes in saves and confirmations, more saves, or the base commit measured
now), against a git ref measured now (more processes on each side), or between two report
files (reports of runs with more processes). A verdict names only options that would change
something: a fix the run already has is said as such, never advised again."""

from __future__ import annotations


class Advice:
    """What narrows a blind spot on a comparison's path, in the options of that path: a
    comparison with the stored baseline, with a git ref measured now, or of two report files
    each says its own (the base class says it in words, naming no option)."""

    def processes(self, needed: int, before: int, now: int) -> str:
        """`needed` processes on each side would bring the detectable change under the limit;
        the stored side holds `before`, this run `now`."""
        return f"more processes: {needed} on each side would bring it under the limit"

    def unknown_spread(self) -> str:
        """One process on each side: the spread between processes is unknown."""
        return "more processes on each side would show the spread between them"

    def drift(self) -> str:
        """The drift between occasions dominates the noise."""
        return "the drift between occasions dominates: more occasions would teach it"

    def nothing(self) -> str:
        return ("no number of processes up to 20 would: longer samples (--hpml-max-time), a "
                "quieter machine, or a larger problem size")


class StoredAdvice(Advice):
    """What narrows a blind spot against the stored baseline: saves of more processes, more
    confirmations, or the base commit measured now."""

    def __init__(self, confirm: int, processes: int) -> None:
        self.confirm = confirm
        self.save_processes = processes

    def processes(self, needed: int, before: int, now: int) -> str:
        ways = []
        if needed > before:
            ways.append(f"saves of {needed} processes (--hpml-baseline-processes={needed})"
                        if needed > self.save_processes else
                        f"{needed} processes in the stored runs (each save adds "
                        f"{self.save_processes}: more saves)")
        if needed > now:
            ways.append(f"--hpml-confirm={needed - 1}" if needed - 1 > self.confirm else
                        f"the confirmations a suspected regression gets (--hpml-confirm="
                        f"{self.confirm}) already measure {self.confirm + 1} processes")
        return (f"more processes: {needed} on each side would bring it under the limit ("
                + "; ".join(ways) + ")") if ways else \
            f"more processes: {needed} on each side would bring it under the limit"

    def unknown_spread(self) -> str:
        return ("more processes: saves with --hpml-baseline-processes=3 or more learn the "
                "spread between them; or longer samples (--hpml-max-time)")

    def drift(self) -> str:
        return ("the drift between occasions dominates: more saves on other occasions teach "
                "it, or --hpml-compare-ref measures the base commit now, beside this one")


class RefAdvice(Advice):
    """What narrows a blind spot against REF measured now: more processes on each side."""

    def __init__(self, processes: int, every_test: bool) -> None:
        self.processes_given = processes
        self.every_test = every_test

    def processes(self, needed: int, before: int, now: int) -> str:
        more = (f"--hpml-compare-ref-processes={needed}" if needed > self.processes_given
                else f"the {self.processes_given} processes on each side that a suspected test "
                     "gets")
        if not self.every_test and max(before, now) <= 1:
            more += " (with --hpml-compare-ref-all, every test gets them)"
        return f"more processes: {needed} on each side would bring it under the limit ({more})"

    def unknown_spread(self) -> str:
        return ("more processes on each side: --hpml-compare-ref-all (every test measured "
                f"again) with --hpml-compare-ref-processes={max(3, self.processes_given)}")

    def drift(self) -> str:  # pragma: no cover - both sides share one occasion: no drift
        return "more processes on each side (--hpml-compare-ref-processes)"


class ReportAdvice(Advice):
    """What narrows a blind spot between two report files: runs of more processes."""

    def processes(self, needed: int, before: int, now: int) -> str:
        return (f"more processes: reports of runs measured in {needed} processes each (a "
                f"save's report with --hpml-baseline-processes={needed} holds them)")

    def unknown_spread(self) -> str:
        return ("more processes: each report holds one process per metric; reports of saves "
                "(--hpml-save-baseline --hpml-report=run.json) hold several")
