"""pytest under torchrun or srun: the ranks of a job run one session together (a pytest
plugin module).

    torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT \\
        -m pytest -m data_parallel --hpml-report=report.md
    srun --ntasks-per-node=2 python -m pytest -m data_parallel --hpml-report=report.md

Every rank runs the whole session. The plugin makes them one run (once the run uses it):

- every rank must have collected the same tests in the same order, or every rank stops with
  a usage error naming the first difference (a shuffling plugin, --lf, files that differ);
- after each phase of a test (setup, call, teardown) the ranks' outcomes meet at rank 0; where
  some rank failed or skipped and the others passed, the test ends the same way on every rank,
  with one message naming the rank. Agreeing on setup keeps the others from entering a
  collective that a rank which skipped will never join;
- a test's records from every rank reach rank 0, which merges them (distributed.merge: the
  slowest rank's time where the ranks differ) and alone judges them and writes reports,
  exports and baselines; the other ranks measure and send, and take rank 0's judgement;
- the fresh processes of a comparison's confirmations and of a save run on every rank
  together, as a fresh job of the same shape: rank 0 says when, and every rank starts its own
  with the fresh job's variables instead of this job's (the fresh job's rank 0 writes the
  report rank 0 reads). A test whose ranks run collectives is measured again across the same
  ranks and nodes, never on rank 0 alone;
- a rank that is gone (killed, its node down), or alive and not done within
  --hpml-rank-timeout, ends the run on the others with a message naming it; rank 0's outputs
  hold the tests that finished.

The messages go through a TCPStore (pytest_hpml.distributed.channel), never through the job's
process group: that belongs to the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Generator
from typing import Any

import pytest

from pytest_hpml import rerun
from pytest_hpml.distributed import job as jobs
from pytest_hpml.distributed.channel import JobChannel, JobChannelError
from pytest_hpml.distributed.merge import merge_ranks
from pytest_hpml.machine import forkserver
from pytest_hpml.policy import positive
from pytest_hpml.results import Record
from pytest_hpml.session import add_option, run_of, xdist_workers

#: Seconds a rank waits for the others at a step of a test before the run ends.
DEFAULT_CAP = 300.0
#: Longest message kept of another rank's failure or skip.
WHY_CHARS = 300


def _why(report: pytest.TestReport) -> str:
    """One line on why a phase did not pass."""
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = getattr(crash, "message", None) or (report.longreprtext.strip().splitlines()
                                                   or [""])[-1]
    text = " ".join(str(text).split())
    return text[:WHY_CHARS] + (" ..." if len(text) > WHY_CHARS else "")


def agreement(outcomes: dict[int, dict[str, str]], when: str) -> dict[str, str | None]:
    """What the job makes of its ranks' outcomes of one phase: nothing where they agree (each
    keeps its own); else failed if any rank failed, skipped if some skipped, with one message
    naming the ranks."""
    kinds = {o["outcome"] for o in outcomes.values()}
    if len(kinds) == 1:
        return {"outcome": None, "message": None}
    odd = {r: o for r, o in sorted(outcomes.items()) if o["outcome"] != "passed"}
    outcome = "failed" if any(o["outcome"] == "failed" for o in odd.values()) else "skipped"
    named = "; ".join(f"rank {r} {o['outcome']} (" + (o["why"] or "no message") + ")"
                      for r, o in odd.items())
    passed = [r for r, o in sorted(outcomes.items()) if o["outcome"] == "passed"]
    return {"outcome": outcome,
            "message": f"the {when} of this test did not pass on every rank of the job: {named}, "
                       f"where rank(s) {', '.join(map(str, passed))} passed; it ends as "
                       f"{outcome} on every rank"}


def collection_difference(collected: dict[int, dict[str, Any]]) -> str | None:
    """Why the ranks cannot run one session together: the first rank whose tests differ from
    rank 0's; None when they all collected the same tests in the same order."""
    first = collected[0]["ids"]
    for rank, seen in sorted(collected.items()):
        ids = seen["ids"]
        if ids == first:
            continue
        pairs = enumerate(zip(first, ids, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(first), len(ids)))
        here = first[at] if at < len(first) else "nothing"
        there = ids[at] if at < len(ids) else "nothing"
        errors = f"; rank {rank} had {seen['errors']} error(s) during collection" \
            if seen["errors"] else ""
        return (f"rank {rank} of the job collected other tests than rank 0 ({len(ids)} and "
                f"{len(first)} tests; at #{at + 1} rank 0 has {here}, rank {rank} {there}"
                f"{errors}): every rank must run the same pytest command in the same checkout "
                "(a plugin that shuffles tests, a cache option such as --lf, or files that "
                "differ between nodes make them differ)")
    return None


def reachable_address(job: jobs.Job) -> str:
    """This node's address as the job's other nodes reach it: the one it uses to reach the
    job's store."""
    try:
        family = socket.getaddrinfo(job.master_addr, job.master_port or 1)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((job.master_addr, job.master_port or 1))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


class JobRun:
    """This rank's part in a pytest job: registered as a plugin once the run uses pytest-hpml."""

    def __init__(self, config: pytest.Config, job: jobs.Job, channel: JobChannel) -> None:
        self.config = config
        self.job = job
        self.channel = channel
        self.index: dict[str, int] = {}  # node id -> its place in the (agreed) collection
        self.broken: str | None = None  # why the job stopped, once it did
        self._current: int | None = None  # the test being judged (rank 0)
        self._commands = 0  # commands rank 0 posted for the test being judged

    @property
    def primary(self) -> bool:
        return self.job.rank == 0

    def _break(self, session: pytest.Session, report: pytest.TestReport | None,
               message: str) -> None:
        """A peer is gone or stuck: this rank stops after the current test."""
        if self.broken is None:
            self.broken = message
            run_of(self.config).say_once(f"the job stopped: {message}")
        session.shouldstop = f"hpml: the job stopped: {message}"
        if report is not None and report.outcome != "failed":
            report.outcome = "failed"
            report.longrepr = f"hpml: the job stopped: {message}"

    def pytest_report_header(self) -> str:
        role = ("gathers every rank's records, judges them and writes the outputs"
                if self.primary else "measures and sends its records to rank 0")
        return (f"hpml: rank {self.job.rank} of a {self.job.world_size}-rank job on "
                f"{self.job.nodes} node(s) ({self.job.launcher}): {role}")

    # -- the same tests on every rank -----------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        ids = [item.nodeid for item in session.items]
        self.index = {nodeid: i for i, nodeid in reversed(list(enumerate(ids)))}
        try:
            gathered = self.channel.gather("collected", json.dumps(
                {"ids": ids, "errors": session.testsfailed}), "the collection")
            if gathered is not None:
                problem = collection_difference({r: json.loads(v) for r, v in
                                                 gathered.items()})
                self.channel.post("collected/job", problem or "")
            problem = self.channel.read("collected/job", "rank 0's check of the collection")
        except JobChannelError as exc:
            raise pytest.UsageError(f"the ranks of this job did not all reach the start of "
                                    f"the tests: {exc}") from None
        if problem:
            raise pytest.UsageError(problem.decode())

    # -- one outcome per test phase --------------------------------------------------------
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo) -> Generator[None, Any, Any]:
        # trylast: inside recording's wrapper, so the agreed outcome is what gets judged.
        report = yield
        if self.broken is None and item.nodeid in self.index:
            self._agree(item, report)
        return report

    def _agree(self, item: pytest.Item, report: pytest.TestReport) -> None:
        key = f"t{self.index[item.nodeid]}/{report.when}"
        mine = {"outcome": report.outcome, "why": "" if report.passed else _why(report)}
        what = f"the {report.when} of {item.nodeid}"
        try:
            gathered = self.channel.gather(key, json.dumps(mine), what)
            if gathered is not None:
                self.channel.post(f"{key}/job", json.dumps(agreement(
                    {r: json.loads(v) for r, v in gathered.items()}, report.when)))
            decided = json.loads(self.channel.read(f"{key}/job",
                                                   f"rank 0's agreement on {what}"))
        except JobChannelError as exc:
            self._break(item.session, report, str(exc))
            return
        outcome, message = decided["outcome"], decided["message"]
        if outcome is None or report.outcome == outcome:
            if outcome == "failed":
                report.sections.append(("hpml: the job's ranks", message))
            return
        if outcome == "failed":
            report.outcome = "failed"
            report.longrepr = f"hpml: {message}"
        elif report.passed:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0) + 1,
                               f"Skipped: {message}")

    # -- records to rank 0, judged there ---------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_hpml_judge(self, item: pytest.Item, report: pytest.TestReport,
                          records: list[Record]) -> Generator[None, Any, Any]:
        if self.broken is not None or item.nodeid not in self.index:
            return (yield)
        seq = self.index[item.nodeid]
        try:
            gathered = self.channel.gather(f"t{seq}/records", json.dumps(
                [r.to_dict() for r in records]), f"the records of {item.nodeid}")
        except JobChannelError as exc:
            self._break(item.session, report, str(exc))
            gathered = None
        if gathered is not None:
            records[:] = merge_ranks({r: [Record.from_dict(d) for d in json.loads(v)]
                                      for r, v in gathered.items()})
        self._current, self._commands = seq, 0
        try:
            result = yield  # rank 0 judges (comparing); the others do not (session.judges)
        finally:
            if self.primary and self.broken is None:
                self._post_judgement(seq, report)
        if not self.primary and self.broken is None:
            self._follow(item, report, seq)
        return result

    def _post_judgement(self, seq: int, report: pytest.TestReport) -> None:
        message = report.longreprtext if report.failed else ""
        self.channel.post(f"t{seq}/cmd/{self._commands}", json.dumps(
            {"do": "judged", "outcome": report.outcome, "message": message}))

    def _follow(self, item: pytest.Item, report: pytest.TestReport, seq: int) -> None:
        """Wait for rank 0's judgement, starting this rank's part of each fresh job it asks
        for on the way."""
        for command in range(10_000):
            try:
                posted = self.channel.read(
                    f"t{seq}/cmd/{command}", f"rank 0's judgement of {item.nodeid}",
                    cap=self.channel.cap + forkserver.PROCESS_TIMEOUT)
            except JobChannelError as exc:
                self._break(item.session, report, str(exc))
                return
            order = json.loads(posted)
            if order["do"] == "rerun":
                self._rerun_here(item, order)
                continue
            if order["outcome"] == "failed" and report.outcome != "failed":
                report.outcome = "failed"
                report.longrepr = ("hpml: rank 0, which judges for the job, failed this "
                                   f"test:\n{order['message']}")
            return

    # -- fresh processes on every rank together --------------------------------------------
    def _fresh_variables(self, address: str, port: int) -> dict[str, str]:
        return jobs.fresh_job_variables(self.job, address, port)

    def _rerun_here(self, item: pytest.Item, order: dict[str, Any]) -> None:
        """This rank's part of the fresh job rank 0 started: the same tests, this rank."""
        variables = self._fresh_variables(order["address"], order["port"])
        rerun.run_fresh(self.config, order["nodeids"], 1, together=False,
                        place=rerun.Place(environ=lambda env: {**env, **variables}))

    @contextlib.contextmanager
    def fresh_job(self, nodeids: list[str]) -> Generator[dict[str, str], None, None]:
        """Around rank 0's fresh process: a fresh job whose store this process holds while it
        runs, every other rank asked to start its own part of it; yields the variables of rank
        0's part."""
        if self.broken is not None:
            raise RuntimeError(f"not started: the job stopped ({self.broken})")
        import torch.distributed as dist

        address = reachable_address(self.job)
        server = dist.TCPStore(address, 0, self.job.world_size, is_master=True,
                               wait_for_workers=False)
        try:
            self.channel.post(f"t{self._current}/cmd/{self._commands}", json.dumps(
                {"do": "rerun", "address": address, "port": server.port,
                 "nodeids": list(nodeids)}))
            self._commands += 1
            yield self._fresh_variables(address, server.port)
        finally:
            del server

    # -- the end ---------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
        try:
            self.channel.leave(f"stopped: {self.broken}" if self.broken else (
                "interrupted: Ctrl-C or SIGTERM, as torchrun's agent sends when another rank of "
                "its node failed" if interrupted else "finished"))
        except (JobChannelError, RuntimeError):
            pass

    def pytest_unconfigure(self) -> None:
        # After the terminal summary: every rank has said all it has to say.
        try:
            self.channel.finish_together()
        finally:
            self.channel.close()


JOB_KEY = pytest.StashKey[JobRun]()


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-rank-timeout", pin=True, type=positive(float),
               default=DEFAULT_CAP, metavar="SECONDS",
               help="under torchrun or srun: the longest a rank waits for the others at a "
                    "test's setup, call or teardown (or for rank 0's judgement) before the run "
                    f"ends, naming the ranks that did not answer ({DEFAULT_CAP:g})")


def _engage(config: pytest.Config, job: jobs.Job) -> None:
    if xdist_workers(config):
        raise pytest.UsageError(f"-n under {job.launcher}: every rank is already one process "
                                "of the job; leave -n out")
    if getattr(config.option, "hpml_compare_ref", None):
        raise pytest.UsageError(f"--hpml-compare-ref under {job.launcher}: it measures the ref "
                                "in fresh single processes; run it outside the job")
    os.environ.update(jobs.torch_variables(os.environ))  # srun: torch's names, for env://
    try:
        channel = JobChannel(job, config.option.hpml_rank_timeout)
    except RuntimeError as exc:
        raise pytest.UsageError(f"cannot reach the job's store at {job.master_addr}:"
                                f"{job.master_port} ({exc})") from None
    run = config.stash[JOB_KEY] = JobRun(config, job, channel)
    config.stash[rerun.FRESH_JOB] = run.fresh_job
    config.pluginmanager.register(run, f"hpml-job-{id(config)}")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        job = jobs.current_job()
    except ValueError as exc:
        raise pytest.UsageError(f"this process has the variables of a torchrun or srun rank, "
                                f"but {exc}") from None
    if job is not None and job.world_size > 1:
        run_of(config).when_used(lambda: _engage(config, job))
