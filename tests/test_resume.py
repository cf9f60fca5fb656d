"""kill -9 or a signal at any point, then `--resume`: the same trials, shipped prompt, verdict and ledger
totals as an uninterrupted run, with nothing charged twice; for `optimize` and for `compare` (synthetic
oracle in a child process), and once for `optimize --budget 600` on the embedded model."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Callable

import pytest

from prompttune.backends.backend import Backend
from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.core.interrupt import RunInterrupted, StopRequest, interruption
from prompttune.core.run_files import ARM, TEST_LOOKS, VERDICT_REGISTRY, run_status
from prompttune.core.storage import JsonlStorage
from prompttune.engine import arm_executors, record_step
from prompttune.engine.comparison import CompareRequest, resume_compare, run_compare
from prompttune.engine.study import resume_study, run_study
from prompttune.engine.verdicts import Look, next_look_alpha
from prompttune.results.run import RunResult
from prompttune.scoring.cache import ResultCache
from tests.support import CountingBackend, comparison_outcome, oracle_config, oracle_for

REPO = Path(__file__).resolve().parent.parent


def _signal_when(folder: Path, argv: list[str], ready: Callable[[], bool], signum: signal.Signals,
                 extra_wait: float = 0.0) -> subprocess.Popen:
    """Start the child (`tests.resume_child`); send it `signum` once `ready()` (plus `extra_wait` s)."""
    child = subprocess.Popen([sys.executable, "-m", "tests.resume_child", str(folder), *argv], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None and not ready():
        time.sleep(0.005)
    time.sleep(extra_wait)
    assert child.poll() is None, "the child finished before it could be stopped"
    os.kill(child.pid, signum)
    return child


def _stop_optimize(folder: Path, optimizer: str, trials: int, signum: signal.Signals = signal.SIGKILL,
                   extra_wait: float = 0.0) -> tuple[Path, subprocess.Popen]:
    """An `optimize` child stopped by `signum` once its log holds `trials` lines; its run directory."""
    def logged() -> int:
        logs = list(folder.glob("runs/*/trials.jsonl"))
        return len(lines(logs[0])) if logs else 0
    child = _signal_when(folder, ["optimize", optimizer], lambda: logged() >= trials, signum, extra_wait)
    return next(folder.glob("runs/*")), child


def _assert_same_result(run_dir: Path, resumed: RunResult, whole: RunResult, interim_looks: int = 0) -> None:
    """Trials, shipped prompt, verdict and both ledgers' totals as in the uninterrupted run. After
    `interim_looks` interim verdicts (graceful stops) the final verdict tests at the α they left."""
    assert lines(run_dir / "trials.jsonl") == lines(whole.run_dir / "trials.jsonl")
    best, whole_best = (json.loads((d / "best_prompt.json").read_text()) for d in (run_dir, whole.run_dir))
    assert resumed.verdict.alpha == pytest.approx(whole.verdict.alpha / 2 ** interim_looks)
    if interim_looks:  # the same prompt ships; the verdict's wording names the smaller α
        assert best.pop("verdict") != whole_best.pop("verdict")
    else:
        assert resumed.verdict.summary() == whole.verdict.summary()
    assert best == whole_best
    # Nothing charged twice: the replayed calls were charged once, exactly as the first time.
    def totals(result: RunResult) -> list[tuple[int, int, int]]:
        return [(ledger.calls, ledger.prompt_tokens, ledger.completion_tokens)
                for ledger in (result.search_ledger, result.confirm_ledger)]
    assert totals(resumed) == totals(whole)
    assert resumed.search_ledger.calls <= resumed.search_ledger.cap_calls


def lines(path: Path) -> list[dict]:
    return JsonlStorage(path).load()


def _cached_keys(cache_file: Path) -> set[str]:
    """The keys of every model output a run's cache holds: the calls that run paid for."""
    with closing(sqlite3.connect(cache_file)) as db:
        return {key for (key,) in db.execute("SELECT key FROM results")}


@pytest.mark.parametrize("optimizer,share,extra_wait", [
    ("sh", 0.0, 0.0),       # at the first trial
    ("sh", 0.5, 0.0),       # mid-search
    ("random", 1.0, 0.15),  # after the search, during the held-out verdict
    ("mipro", 0.5, 0.0),    # after its proposer calls
    ("reflect", 0.5, 0.0),  # mid-race: its generator replays from the cache
])
def test_kill_9_then_resume_gives_the_uninterrupted_result(tmp_path: Path, optimizer: str, share: float,
                                                           extra_wait: float, capsys) -> None:
    config = oracle_config(tmp_path / "whole", optimizer=optimizer)
    whole = run_study(config, backend=oracle_for(config))
    trials = max(1, round(share * len(JsonlStorage(whole.run_dir / "trials.jsonl").load())))
    run_dir, child = _stop_optimize(tmp_path / "killed", optimizer, trials, extra_wait=extra_wait)
    child.communicate()
    assert not (run_dir / "verdict.json").exists()
    assert main(["report", str(run_dir)]) == 2
    assert f"`optimize --resume {run_dir}` finishes it" in capsys.readouterr().err
    resumed = resume_study(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole)
    assert len(lines(run_dir / "trials.interrupted.jsonl")) >= trials
    assert resumed.resumed and resumed.resumed.calls_replayed > 0
    # Each kind of call (proposer calls included) replayed from the cache or made live, once.
    by_kind = resumed.search_ledger.calls_by_kind
    assert {k: by_kind[k] + by_kind[f"{k} (shared cache)"] for k in whole.search_ledger.calls_by_kind} == \
        dict(whole.search_ledger.calls_by_kind)
    if optimizer == "mipro":
        assert by_kind["propose (shared cache)"] == whole.search_ledger.calls_by_kind["propose"] > 0
    assert "Resumed after an interruption" in (run_dir / "report.md").read_text()


def test_a_torn_last_line_is_skipped_and_a_finished_run_is_not_resumed(tmp_path: Path, capsys) -> None:
    log = tmp_path / "trials.jsonl"
    log.write_text('{"number": 0}\n{"number": 1, "scor')
    assert JsonlStorage(log).load() == [{"number": 0}]
    config = oracle_config(tmp_path)
    done = run_study(config, backend=oracle_for(config))
    assert main(["optimize", "--resume", str(done.run_dir)]) == 2
    assert "finished already" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_search_reports_the_best_so_far_then_resume_finishes_the_run(
        tmp_path: Path, signum: signal.Signals, capsys) -> None:
    config = oracle_config(tmp_path / "whole", optimizer="sh")
    whole = run_study(config, backend=oracle_for(config))
    trials = len(lines(whole.run_dir / "trials.jsonl")) // 2
    run_dir, child = _stop_optimize(tmp_path / "stopped", "sh", trials, signum)
    _, stderr = child.communicate(timeout=120)
    # One line says how to finish the run; no traceback.
    assert child.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: stopped by {signum.name} after the trial in flight; the report of the best candidate so far, "
        f"with its interim held-out verdict, is {run_dir / 'report.md'}; finish the run with "
        f"`optimize --resume {run_dir}`")
    # The trial in flight was finished, the search stopped there, and the best so far was tested on test.
    stopped = lines(run_dir / "trials.jsonl")
    assert trials <= len(stopped) < len(lines(whole.run_dir / "trials.jsonl"))
    facts = json.loads((run_dir / "verdict.json").read_text())
    assert run_status(run_dir) == "interrupted" and facts["ledgers"]["search"]["calls"] == stopped[-1]["budget_spent"]
    assert interruption(run_dir)["reason"] == f"stopped by {signum.name} after the trial in flight"
    assert facts["ledgers"]["confirm"]["calls"] >= config.test_size
    assert "Interrupted and resumable" in (run_dir / "report.md").read_text()
    assert main(["report", str(run_dir)]) == 0
    assert "Interrupted and resumable" in (run_dir / "report.html").read_text()

    resumed = resume_study(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole, interim_looks=1)
    assert lines(run_dir / "trials.interrupted.jsonl") == stopped
    assert run_status(run_dir) == "finished" and not interruption(run_dir)
    report = (run_dir / "report.md").read_text()
    assert "Interrupted and resumable" not in report
    assert f"Resumed after an interruption (stopped by {signum.name} after the trial in flight)" in report
    assert main(["optimize", "--resume", str(run_dir)]) == 2
    assert "finished already" in capsys.readouterr().err


def test_a_second_signal_or_one_outside_the_search_stops_at_once() -> None:
    request = StopRequest("optimize --resume runs/x")
    with pytest.raises(RunInterrupted, match="stopped at once by SIGTERM.*`optimize --resume runs/x`"):
        request.handle(signal.SIGTERM, None)
    with request.during_search():
        request.handle(signal.SIGINT, None)
        assert request() and request.signal == "SIGINT"
        with pytest.raises(RunInterrupted, match="stopped at once by SIGINT"):
            request.handle(signal.SIGINT, None)


class SignallingBackend(CountingBackend):
    """Sends this process `signals` once `after` requests have reached the model, as a user pressing
    Ctrl-C (twice, for two signals) at that point of the run."""

    def __init__(self, inner: CountingBackend, after: int, signals: tuple[signal.Signals, ...]) -> None:
        super().__init__(inner)
        self.after, self.pending = after, list(signals)

    def score(self, requests):
        return self._signal_after(super().score(requests))

    def choose(self, requests):
        return self._signal_after(super().choose(requests))

    def _signal_after(self, outputs):
        while self.calls >= self.after and self.pending:
            signal.raise_signal(self.pending.pop(0))
        return outputs


@pytest.mark.parametrize("phase", ["search", "verdict"])
def test_a_signal_that_stops_at_once_marks_the_run_closes_its_cache_and_resume_finishes_it(
        tmp_path: Path, phase: str, monkeypatch) -> None:
    config = oracle_config(tmp_path / "whole", optimizer="sh", check_generation=0)  # the verdict's calls come last
    whole_backend = oracle_for(config)
    whole = run_study(config, backend=whole_backend)
    verdict_calls = whole.confirm_ledger.calls
    # Mid-search a second signal overrides the graceful first; during the verdict one is enough.
    after, signals = ((whole_backend.calls - verdict_calls) // 2, (signal.SIGINT, signal.SIGINT)) if phase == "search" \
        else (whole_backend.calls - verdict_calls // 2, (signal.SIGTERM,))
    closed: list[ResultCache] = []
    close = ResultCache.close
    monkeypatch.setattr(ResultCache, "close", lambda cache: (closed.append(cache), close(cache)))
    stopped = oracle_config(tmp_path / "stopped", optimizer="sh", check_generation=0)
    with pytest.raises(RunInterrupted, match=f"stopped at once by {signals[-1].name}.*optimize --resume") as stop:
        run_study(stopped, backend=SignallingBackend(oracle_for(stopped), after, signals), handle_signals=True)
    run_dir = next(Path(stopped.runs_dir).iterdir())
    assert stop.value.reason == f"stopped at once by {signals[-1].name}"
    assert interruption(run_dir)["reason"] == stop.value.reason and run_status(run_dir) == "interrupted"
    assert not (run_dir / "verdict.json").exists() and len(closed) == 1  # the run's cache
    resumed = resume_study(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole)
    assert run_status(run_dir) == "finished"


@pytest.mark.parametrize("writing", ["write_report", "write_page"])  # before verdict.json, after it
def test_a_run_stopped_while_its_report_is_written_resumes_to_its_recorded_final_verdict(
        tmp_path: Path, monkeypatch, writing: str) -> None:
    """The final look was made and recorded, then a signal stopped the run: the resume reuses that look at its
    α (it spent no more), ships the prompt it confirmed, and logs no second verdict on the test split."""
    config = oracle_config(tmp_path / "whole", optimizer="sh")
    whole = run_study(config, backend=oracle_for(config))
    assert whole.verdict.confirmed is not None  # a confirmed prompt: what a resume at α − α = 0 replaced
    write = getattr(record_step, writing)
    monkeypatch.setattr(record_step, writing, lambda *args: signal.raise_signal(signal.SIGTERM))
    stopped = oracle_config(tmp_path / "stopped", optimizer="sh")
    with pytest.raises(RunInterrupted, match="stopped at once by SIGTERM"):
        run_study(stopped, backend=oracle_for(stopped), handle_signals=True)
    run_dir = next(path for path in Path(stopped.runs_dir).iterdir() if path.is_dir())
    assert run_status(run_dir) == "interrupted"
    assert [look["kind"] for look in lines(Path(stopped.runs_dir) / VERDICT_REGISTRY)] == ["final"]
    monkeypatch.setattr(record_step, writing, write)
    resumed = resume_study(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole)
    assert resumed.verdict.alpha == config.alpha and resumed.verdict.shipped.id == whole.verdict.shipped.id
    assert [look["kind"] for look in lines(Path(stopped.runs_dir) / VERDICT_REGISTRY)] == ["final"]
    assert len(json.loads((run_dir / TEST_LOOKS).read_text())) == 1 and resumed.test_looks == 1
    assert run_status(run_dir) == "finished" and (run_dir / "report.html").is_file()


def test_only_interim_looks_spend_alpha_and_a_recorded_final_look_is_reused() -> None:
    def look(kind: str, alpha: float) -> Look:
        return Look("run", "colours", 0, 90, "hash", kind, alpha, "decision", "shipped", 0.0)
    interim = look("interim", 0.025)
    assert next_look_alpha([interim], 0.05, interim=False) == pytest.approx(0.025)  # the rest
    assert next_look_alpha([interim, look("final", 0.025)], 0.05, interim=False) == pytest.approx(0.025)
    assert next_look_alpha([look("final", 0.05)], 0.05, interim=False) == 0.05  # not α − α = 0
    assert next_look_alpha([look("final", 0.05), look("interim", 0.0)], 0.05, interim=False) == 0.05  # older runs


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_a_compare_stopped_midway_resumes_without_rerunning_a_finished_arm(tmp_path: Path, monkeypatch, capsys,
                                                                          signum: signal.Signals) -> None:
    config = oracle_config(tmp_path / "whole")
    whole_backend = oracle_for(config)
    whole = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend=whole_backend))
    folder = tmp_path / "killed"

    def one_arm_finished_the_next_midway() -> bool:
        arms = [a for a in folder.glob("runs/*-compare/arms/*") if a.is_dir()]
        running = [a for a in arms if not (a / ARM).is_file() and (a / "trials.jsonl").is_file()]
        return len(arms) > len(running) and any(len(lines(a / "trials.jsonl")) >= 2 for a in running)
    child = _signal_when(folder, ["compare", "random,sh"], one_arm_finished_the_next_midway, signum)
    _, stderr = child.communicate(timeout=120)
    compare_dir = next(folder.glob("runs/*-compare"))
    if signum == signal.SIGINT:  # the arm in flight finished its trial and wrote its interim report
        assert child.returncode == 130 and stderr.strip().splitlines()[-1] == (
            f"interrupted: comparison stopped; the arms finished so far are kept: finish it with "
            f"`compare --resume {compare_dir}`")
        assert [run_status(d) for d in compare_dir.glob("arms/*/") if not (d / ARM).is_file()] == ["interrupted"]
    finished = {d: (d / "trials.jsonl").stat().st_mtime_ns for d in compare_dir.glob("arms/*/") if (d / ARM).is_file()}
    assert finished and len(finished) < 4 and not (compare_dir / "summary.json").exists()
    paid = _cached_keys(compare_dir / "cache.sqlite")
    assert main(["report", str(compare_dir)]) == 2
    assert f"`compare --resume {compare_dir}` finishes it" in capsys.readouterr().err

    started: list[tuple[str, int]] = []
    run_arm = arm_executors.run_arm
    monkeypatch.setattr(arm_executors, "run_arm", lambda bench, arm, seed, resume_dir=None: started.append((arm, seed))
                        or run_arm(bench, arm, seed, resume_dir))
    backend = oracle_for(config)
    resumed = resume_compare(compare_dir, backend=backend)
    # Finished arms were read back, untouched; only the others ran.
    read_back = {(r.arm, r.seed) for r in resumed.runs if r.run_dir in finished}
    assert len(read_back) == len(finished) and not read_back & set(started)
    assert sorted(read_back | set(started)) == [("random", 0), ("random", 1), ("sh", 0), ("sh", 1)]
    assert all((d / "trials.jsonl").stat().st_mtime_ns == mtime for d, mtime in finished.items())
    # Nothing computed twice: the model answered exactly the calls the killed comparison had not cached.
    # (An interim verdict after SIGINT may have tested a candidate the whole run never tested: not needed.)
    needed = _cached_keys(whole.run_dir / "cache.sqlite")
    assert whole_backend.calls == len(needed)
    assert backend.calls == len(needed - paid)
    # ... and every arm spent, chose and shipped exactly what it did uninterrupted.
    assert [(r.arm, r.seed, r.search.calls, r.search.tokens, r.best) for r in resumed.runs] == [
        (r.arm, r.seed, r.search.calls, r.search.tokens, r.best) for r in whole.runs]
    assert comparison_outcome(compare_dir) == comparison_outcome(whole.run_dir)
    assert main(["compare", "--resume", str(compare_dir)]) == 2
    assert main(["optimize", "--resume", str(compare_dir)]) == 2
    assert main(["compare", "--resume", str(whole.runs[0].run_dir)]) == 2


def _processes_under(pid: int) -> set[int]:
    """The processes `pid` started, and theirs (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError):  # gone meanwhile
            continue
    found, todo = set(), [pid]
    while todo:
        found.update(new := children.get(todo.pop(), []))
        todo.extend(new)
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie that no one has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the worker processes in /proc (Linux)")
@pytest.mark.parametrize("executor", ["process", "ray"])
def test_compare_jobs_stops_every_worker_on_the_first_sigint_and_resumes(tmp_path: Path, executor: str) -> None:
    """`compare --jobs 2` stops as `--jobs 1` does: a first SIGINT, to the main process alone, stops every worker's
    arm after its trial in flight (interim report, resumable), and the comparison exits with code 130, no worker
    left behind; `--resume` then ends as an uninterrupted comparison. With `--executor ray` the workers are Ray's
    (a local Ray the comparison starts and shuts down), told through its stop flag."""
    if executor == "ray":
        pytest.importorskip("ray")
    config = oracle_config(tmp_path / "whole")
    whole = run_compare(CompareRequest(config, ["random"], [0, 1, 2], {}, backend=oracle_for(config)))
    folder = tmp_path / "stopped"

    def one_arm_finished_another_midway() -> bool:  # two workers, three arm-seeds of five trials each
        arms = [a for a in folder.glob("runs/*-compare/arms/*") if a.is_dir()]
        running = [a for a in arms if not (a / ARM).is_file() and (a / "trials.jsonl").is_file()]
        finished = [a for a in arms if (a / ARM).is_file()]  # not an arm whose first trial is still to come
        return bool(finished) and any(2 <= len(lines(a / "trials.jsonl")) <= 3 for a in running)
    child = _signal_when(folder, ["compare", "random", "--jobs", "2", "--seeds", "3", "--executor", executor],
                         one_arm_finished_another_midway, signal.SIGINT)
    signalled, processes = time.monotonic(), _processes_under(child.pid)  # two workers, a resource tracker (or Ray's)
    _, stderr = child.communicate(timeout=60)
    compare_dir = next(folder.glob("runs/*-compare"))
    assert child.returncode == 130 and time.monotonic() - signalled < 10, stderr  # a few seconds, on a busy machine
    assert stderr.strip().splitlines()[-1] == (f"interrupted: comparison stopped; the arms finished so far are kept: "
                                               f"finish it with `compare --resume {compare_dir}`")
    assert len(processes) >= 2
    deadline = time.monotonic() + 2  # the resource tracker leaves once the main process has gone
    while time.monotonic() < deadline and any(_alive(pid) for pid in processes):
        time.sleep(0.02)
    assert not [pid for pid in processes if _alive(pid)], "a process of the comparison outlived it"
    arms = list(compare_dir.glob("arms/*/"))
    stopped = [d for d in arms if not (d / ARM).is_file()]
    assert stopped and len(stopped) < len(arms) and {run_status(d) for d in stopped} == {"interrupted"}
    assert "stopped by SIGINT after the trial in flight" in {interruption(d)["reason"] for d in stopped}
    paid = _cached_keys(compare_dir / "cache.sqlite")

    backend = oracle_for(config)
    resumed = resume_compare(compare_dir, backend=backend)
    assert backend.calls == len(_cached_keys(whole.run_dir / "cache.sqlite") - paid)  # nothing paid twice
    assert [(r.arm, r.seed, r.search.calls, r.search.tokens, r.best) for r in resumed.runs] == [
        (r.arm, r.seed, r.search.calls, r.search.tokens, r.best) for r in whole.runs]
    assert comparison_outcome(compare_dir) == comparison_outcome(whole.run_dir)


def test_a_dspy_arm_left_unfinished_compiles_again_and_pays_its_calls_once(tmp_path: Path) -> None:
    pytest.importorskip("dspy")
    config = oracle_config(tmp_path, budget=150, dev_size=50)
    # Native mode: the default space declares no demos, which is all dspy-bfrs chooses. The resume must
    # read the mode back from the comparison's config.json, or it refuses the arm. The arm stops at its
    # cap in mid-evaluation with DSPy's 32 threads: the evaluation is paid for in its devset's order, so
    # the compile asks again exactly what it paid for, whichever threads asked first.
    whole = run_compare(CompareRequest(config, ["dspy-bfrs"], [0], {}, backend=oracle_for(config), mode="native"))
    arm = whole.runs[0]
    # What a kill leaves after the arm's last file but before its arm.json: an unfinished arm.
    (arm.run_dir / ARM).unlink()
    (whole.run_dir / "summary.json").unlink()
    backend = oracle_for(config)
    again = resume_compare(whole.run_dir, backend=backend).runs[0]
    assert backend.calls == 0  # every call it makes again is in the shared cache ...
    assert (again.search.calls, again.search.tokens, again.best, again.confirmation) == (  # ... and charged once
        arm.search.calls, arm.search.tokens, arm.best, arm.confirmation)
    # A finished run not yet saved as an arm starts again in a new directory, as a prompttune arm does.
    assert again.run_dir != arm.run_dir and lines(again.run_dir / "trials.jsonl") == lines(arm.run_dir / "trials.jsonl")


@pytest.mark.integration
def test_kill_9_mid_search_on_the_real_model_then_resume_gives_the_uninterrupted_result(
        data_dir: Path, tmp_path: Path, embedded_model: Backend) -> None:
    """The issue's bar on a small scale: `optimize --task agnews` on the embedded model, killed with SIGKILL
    mid-search (after 3 of its 6 trials) and resumed, equals an uninterrupted run, and no paid call is made or
    charged twice. The kill needs trials, not large ones: 20 dev examples each, 20 test examples."""
    dev = 20
    sizes = {"train_size": 50, "dev_size": dev, "test_size": 20}  # random search: 6 trials of 20 dev calls
    argv = ["optimize", "--task", "agnews", "--optimizer", "random", "--data-dir", str(data_dir),
            "--budget", str(6 * dev), *(f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()),
            "--runs-dir", str(tmp_path / "killed")]

    def logged() -> int:
        logs = list((tmp_path / "killed").glob("*/trials.jsonl"))
        return len(lines(logs[0])) if logs else 0
    child = subprocess.Popen([sys.executable, "-m", "prompttune", *argv], cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while child.poll() is None and logged() < 3 and time.time() < deadline:
        time.sleep(0.05)
    assert child.poll() is None, "the run finished before it could be killed"
    child.kill()
    child.wait()
    run_dir = next((tmp_path / "killed").iterdir())
    paid = _cached_keys(run_dir / "cache.sqlite")
    assert 3 <= logged() < 6 and len(paid) >= 3 * dev

    config = RunConfig(task="agnews", optimizer="random", data_dir=str(data_dir), budget=6 * dev,
                       runs_dir=str(tmp_path / "whole"), **sizes)
    backend = CountingBackend(embedded_model)  # build_backend(config), as the child loaded it (same model_id)
    whole = run_study(config, backend=backend)
    made = backend.calls
    resumed = resume_study(run_dir, backend=backend)
    _assert_same_result(run_dir, resumed, whole)
    # Every call the killed run paid for was replayed and charged once (the totals above), none recomputed:
    # the model answered exactly the calls the killed run had not paid for.
    assert resumed.resumed.calls_replayed == len(paid)
    assert backend.calls - made == made - len(paid)
