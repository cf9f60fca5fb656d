"""The one run-directory opener (`prompttune.engine.run_dir`): config.json written whole or not at all, and
every backend a command builds closed when it ends, finished or failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.core.errors import UserError
from prompttune.engine import evaluate
from prompttune.engine.evaluate import run_evaluation
from prompttune.engine.run_dir import open_run
from prompttune.results.evaluate import EvaluateConfig
from tests.support import CountingBackend, colours_task_file, oracle_config, oracle_for

SIZES = {"train_size": 60, "dev_size": 60, "test_size": 90}


class ClosingBackend(CountingBackend):
    """Remembers whether the command closed it."""

    closed = False

    def close(self) -> None:
        self.closed = True


def _fail_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text write stops half-way with a full disk."""
    def half_then_full(path: Path, text: str, *args: object, **kwargs: object) -> int:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)


def test_a_write_that_fails_leaves_no_partial_config_json(tmp_path, monkeypatch) -> None:
    config = oracle_config(tmp_path)
    with open_run(config, oracle_for(config)) as run:
        _fail_midway(monkeypatch)
        with pytest.raises(OSError):
            run.directory(config.runs_dir, "colours-random-s0", config.model_dump_json(indent=2))
    made = [path for path in Path(config.runs_dir).iterdir() if path.is_dir()]
    assert len(made) == 1 and not (made[0] / "config.json").exists()


def test_a_failed_rewrite_on_resume_keeps_the_old_config_json_whole(tmp_path, monkeypatch) -> None:
    config = oracle_config(tmp_path)
    with open_run(config, oracle_for(config)) as run:
        run_dir = run.directory(config.runs_dir, "colours-random-s0", config.model_dump_json(indent=2))
        before = (run_dir / "config.json").read_text()
        _fail_midway(monkeypatch)
        with pytest.raises(OSError):
            run.directory(config.runs_dir, "ignored", config.model_copy(update={"seed": 7}).model_dump_json(), run_dir)
    assert (run_dir / "config.json").read_text() == before


def test_a_backend_the_opener_builds_is_closed_and_a_passed_one_is_left_open(tmp_path) -> None:
    config = oracle_config(tmp_path)
    built, passed = ClosingBackend(oracle_for(config)), ClosingBackend(oracle_for(config))
    with open_run(config, build=lambda _: built) as run:
        assert run.backend is built and not run.passed
    with open_run(config, passed) as run:
        assert run.backend is passed and run.passed
    assert built.closed and not passed.closed


def _evaluate_config(tmp_path: Path, **changes: object) -> EvaluateConfig:
    return EvaluateConfig(task=str(colours_task_file(tmp_path)), sample=3, runs_dir=str(tmp_path / "runs"),
                          **SIZES, **changes)


def _closing_oracle(monkeypatch: pytest.MonkeyPatch) -> list[ClosingBackend]:
    built: list[ClosingBackend] = []

    def build(config):
        built.append(ClosingBackend(oracle_for(config.model_copy(update=SIZES))))
        return built[-1]

    monkeypatch.setattr(evaluate, "build_backend", build)
    return built


def test_evaluate_closes_the_backend_it_built(tmp_path, monkeypatch) -> None:
    built = _closing_oracle(monkeypatch)
    result = run_evaluation(_evaluate_config(tmp_path))
    assert len(built) == 1 and built[0].closed
    assert (result.run_dir / "config.json").is_file()


def test_evaluate_closes_the_backend_it_built_when_it_fails(tmp_path, monkeypatch) -> None:
    built = _closing_oracle(monkeypatch)
    with pytest.raises(UserError, match="budget exhausted"):
        run_evaluation(_evaluate_config(tmp_path, budget=10))
    assert len(built) == 1 and built[0].closed
