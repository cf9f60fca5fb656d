"""Outages with `--backend openai`: a server killed mid-run and restarted loses nothing (a real llama.cpp
server); one that never returns stops the run at the deadline, resumably, with nothing paid twice
(fake servers, prompttune/testing/fake_openai.py, for exact counts and short deadlines)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from rich.console import Console

from prompttune.backends.capabilities import CONSTRAINT_FORMS
from prompttune.backends.openai_backend import OpenAIBackend
from prompttune.backends.transformers_setup import EMBEDDED_MODEL, embedded_model_path
from prompttune.cli import EXIT_UNAVAILABLE, main
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable
from prompttune.core.storage import JsonlStorage
from prompttune.engine.study import run_study
from prompttune.results.run import RunResult
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.search_spaces import default_space
from prompttune.testing import synthetic_task
from prompttune.testing.fake_openai import FakeServer
from prompttune.testing.llama_server import LlamaServer
from tests.support import oracle_config

PROBES = 2  # completions the backend's start-up probe sends (next-token, then echo)
RUN_PROBES = PROBES + len(CONSTRAINT_FORMS)  # and the constraint forms a run asks about (Backend.capabilities)
LABELS = 3  # the colours task: an echo-mode scored example is one request per label


def _quiet() -> Console:
    return Console(stderr=True, quiet=True)


def _trials(run_dir: Path) -> list[dict]:
    return JsonlStorage(run_dir / "trials.jsonl").load()


def _cache_entries(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "cache.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def _same_run(run_dir: Path, whole: RunResult) -> None:
    """Trials, shipped prompt, verdict and ledger totals equal those of the uninterrupted run."""
    assert _trials(run_dir) == _trials(whole.run_dir)
    assert json.loads((run_dir / "best_prompt.json").read_text()) == json.loads(
        (whole.run_dir / "best_prompt.json").read_text())
    facts, whole_facts = (json.loads((d / "verdict.json").read_text()) for d in (run_dir, whole.run_dir))
    assert facts["verdict"] == whole_facts["verdict"]
    for ledger in ("search", "confirm"):
        assert {k: facts["ledgers"][ledger][k] for k in ("calls", "prompt_tokens", "completion_tokens")} == \
               {k: whole_facts["ledgers"][ledger][k] for k in ("calls", "prompt_tokens", "completion_tokens")}


def test_calls_answered_before_an_outage_are_kept_and_not_paid_for_again(tmp_path: Path,
                                                                        fakes: list[FakeServer]) -> None:
    task = synthetic_task()
    examples = {e.id: e for e in task.splits["dev"][:20]}
    spec = default_space(task).default_candidate().spec
    fakes.append(FakeServer(die_after=PROBES + 5))
    cache = ResultCache(tmp_path / "cache.sqlite")

    def evaluator(url: str, ledger: BudgetLedger, view: ResultCache | MeteredCache) -> Evaluator:
        backend = OpenAIBackend([url], "fake", concurrency=1, timeout=0.5, retries=1, backoff_base=0.01,
                                quarantine_base=0.2)
        return Evaluator(backend, examples, {}, view, ledger)

    cut = BudgetLedger()
    with pytest.raises(BackendUnavailable):
        evaluator(fakes[0].url, cut, cache).outputs(spec, list(examples), "generate")
    answered = fakes[0].completions - PROBES
    assert answered >= 5 and len(cache) == answered  # every answered call is in the cache
    assert cut.calls == answered and cut.tokens > 0  # and charged; the calls never answered are not
    fakes.append(FakeServer(port=fakes[0].port))  # back on the same address
    ledger = BudgetLedger()
    outputs = evaluator(fakes[1].url, ledger, MeteredCache(cache)).outputs(spec, list(examples), "generate")
    assert [o.text for o in outputs] == ["x" * 16] * 20
    assert fakes[1].completions - PROBES == 20 - answered  # the server is asked only for the rest
    assert ledger.calls == 20  # and each call is charged exactly once


@contextlib.contextmanager
def _fails_if_still_running_after(seconds: int) -> Iterator[None]:
    """A hang (the bug this guards against) becomes a failure instead of a stuck suite."""
    def fail(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _colours_config(folder: Path, url: str, **changes: object) -> RunConfig:
    """Three trials of 20 dev examples (one candidate beats the baseline on dev, so two go to test), scored by the
    fake server's label log-probs (it decodes no constrained choice)."""
    return oracle_config(folder, backend="openai", base_url=[url], optimizer="sh", budget=60, train_size=20, dev_size=20,
                         test_size=20, split_seed=1, serve="logprobs", **changes)


def test_a_server_that_never_returns_stops_the_run_resumably(tmp_path: Path, fakes: list[FakeServer],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    fakes.append(FakeServer(varied=True))
    whole = run_study(_colours_config(tmp_path / "whole", fakes[0].url), console=_quiet())
    whole_requests = fakes[0].completions - RUN_PROBES
    config = _colours_config(tmp_path / "cut", fakes[0].url, timeout=1.0, retries=2)  # deadline: 2 s
    fakes.append(FakeServer(varied=True, die_after=RUN_PROBES + whole_requests // 2))
    arguments = ["optimize", "--task", config.task, "--backend", "openai", "--base-url", fakes[1].url,
                 "--timeout", "1", "--retries", "2", "--runs-dir", config.runs_dir, *(
                     f"--{name.replace('_', '-')}={getattr(config, name)}"
                     for name in ("optimizer", "budget", "train_size", "dev_size", "test_size", "split_seed", "serve"))]
    capsys.readouterr()
    with _fails_if_still_running_after(120):
        assert main(arguments) == EXIT_UNAVAILABLE
    waited = time.monotonic() - fakes[1].stopped_at
    assert 2.0 <= waited < 4.5, f"the run ended {waited:.2f} s after the server went away"
    [run_dir] = Path(config.runs_dir).iterdir()
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert re.fullmatch(re.escape(f"error: no server answered for 2 s: {fakes[1].url} (health check: ConnectError: ")
                        + ".+" + re.escape(f"); the run is kept: finish it with `optimize --resume {run_dir}` once "
                                           "a server answers"), stderr.strip().splitlines()[-1])
    assert not (run_dir / "verdict.json").exists()
    cached = _cache_entries(run_dir)

    fakes.append(FakeServer(varied=True, port=fakes[1].port))  # the server comes back
    assert main(["optimize", "--resume", str(run_dir)]) == 0
    _same_run(run_dir, whole)
    # Nothing paid twice: the resumed session asked the server only for what the cache lacked.
    assert fakes[2].completions - RUN_PROBES == whole_requests - LABELS * cached
    facts = json.loads((run_dir / "verdict.json").read_text())
    counts = facts["servers"][fakes[1].url]  # both sessions of the run
    assert counts["requests"] == fakes[1].completions + fakes[2].completions - 2 * RUN_PROBES
    assert counts["quarantines"] >= 1
    report = (run_dir / "report.md").read_text()
    assert "Resumed after an interruption (no server answered for 2 s" in report and "## Servers" in report


# --- a real llama.cpp server, killed and started again mid-run -----------------------------------

@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    server = LlamaServer(embedded_model_path())
    server.start()
    yield server
    server.stop()


def _small_config(folder: Path, url: str) -> RunConfig:
    """One baseline and one candidate on 10 dev examples, 10 test examples: about 50 requests. The
    deadline (20 s x 3) leaves a loaded machine time to restart the server."""
    return oracle_config(folder, optimizer="random", backend="openai", base_url=[url], model=EMBEDDED_MODEL,
                         budget=20, train_size=10, dev_size=10, test_size=10, timeout=20.0, retries=3)


@pytest.mark.integration
def test_a_llama_server_killed_and_restarted_mid_run_loses_nothing(tmp_path: Path, llama: LlamaServer) -> None:
    whole = run_study(_small_config(tmp_path / "whole", llama.url), console=_quiet())
    config = _small_config(tmp_path / "cut", llama.url)
    failed: list[BaseException] = []
    finished = threading.Event()

    def outage() -> None:
        """Kill the server once the first trial is logged, start it again a second later."""
        try:
            while not finished.is_set():
                logs = list(Path(config.runs_dir).glob("*/trials.jsonl"))
                if logs and JsonlStorage(logs[0]).load():
                    llama.kill()
                    time.sleep(1.0)
                    llama.start()
                    return
                time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001  (re-raised in the test's thread)
            failed.append(exc)

    watcher = threading.Thread(target=outage)
    watcher.start()
    try:
        result = run_study(config, console=_quiet())
    finally:
        finished.set()
        watcher.join()
    assert not failed, failed
    _same_run(result.run_dir, whole)
    assert result.search_ledger.calls == _trials(whole.run_dir)[-1]["budget_spent"] == whole.search_ledger.calls
    assert _cache_entries(result.run_dir) == _cache_entries(whole.run_dir)  # nothing lost, nothing twice
    counts = result.servers[llama.url]
    assert counts["quarantines"] >= 1 and counts["readmissions"] >= 1 and counts["retries"] >= 1, counts
    assert counts["failures"] == 0
