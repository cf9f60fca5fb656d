"""`evaluate` end to end on a custom task with the synthetic oracle: outputs, ledger, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompttune.core.errors import UserError
from prompttune.engine.evaluate import run_evaluation
from prompttune.results.evaluate import EvaluateConfig
from prompttune.tasks import SplitSizes, load_task
from prompttune.testing import SyntheticOracleBackend
from tests.support import CountingBackend

COLOURS = ["red", "green", "blue"]
PROMPTS = """label_words: [red, green, blue]
prompts:
  - name: good
    template: "Item: {text}\\nColour:"
  - name: fair
    template: "Which colour ({labels})? {text}\\nAnswer:"
  - name: poor
    template: "{text}\\nIt is"
  - name: chance
    template: "Text: {text}\\nLabel:"
"""
ACCURACY = {"Colour:": 0.9, "Answer:": 0.7, "It is": 0.5, "Label:": 0.34}


def _task_file(tmp_path: Path) -> Path:
    rows = [f"item {i:03d} is painted {c} all over,{c}" for i in range(40) for c in COLOURS]
    (tmp_path / "colours.csv").write_text("text,colour\n" + "\n".join(rows) + "\n")
    path = tmp_path / "colours.yaml"
    path.write_text("name: colours\ndata: colours.csv\ntext_columns: [text]\nlabel_column: colour\n"
                    "labels: {red: [red], green: [green], blue: [blue]}\n")
    (tmp_path / "prompts.yaml").write_text(PROMPTS)
    return path


def _oracle(config: EvaluateConfig) -> CountingBackend:
    task = load_task(config.task, config.data_dir, SplitSizes(config.train_size, config.dev_size, config.test_size),
                     config.seed)
    examples = [e for split in task.splits.values() for e in split]

    def accuracy_of(text: str) -> float:
        return next((a for key, a in ACCURACY.items() if text.endswith(key)), 0.34)

    # The oracle answers content-free probes (they name no example) with a flat distribution.
    return CountingBackend(SyntheticOracleBackend(examples, accuracy_of, proposals=lambda text: f" {len(text) % 7} red"))


def _config(tmp_path: Path, **changes) -> EvaluateConfig:
    fields = dict(task=str(_task_file(tmp_path)), prompts=str(tmp_path / "prompts.yaml"), train_size=20,
                  dev_size=10, test_size=60, runs_dir=str(tmp_path / "runs"))
    return EvaluateConfig(**{**fields, **changes})


def test_evaluate_writes_the_run_directory_and_charges_every_call(tmp_path: Path) -> None:
    config = _config(tmp_path, calibrate=True, ensemble=2, posix=True, posix_size=3)
    backend = _oracle(config)
    result = run_evaluation(config, backend=backend)
    run = result.run_dir
    assert run.name.endswith("-colours-evaluate-s0")
    for name in ("config.json", "cache.sqlite", "prompts.jsonl", "records.jsonl", "summary.json",
                 "posix.jsonl", "accuracy.png", "report.md"):
        assert (run / name).is_file(), name
    logit, calibrated = result.settings
    assert [s.accuracy for s in logit.scores][0] > [s.accuracy for s in logit.scores][3]
    assert logit.summary.spread == pytest.approx(max(logit.summary.accuracies) - min(logit.summary.accuracies))
    # 4 prompts × 60 (logit) + 4 × 3 content-free + POSIX 4 × 3 generations + 4 × 3 re-scorings
    assert result.ledger.calls == backend.calls == 240 + 12 + 12 + 12
    assert dict(result.ledger.calls_by_kind) == {"score": 240, "content-free": 12, "generate": 12, "posix": 12}
    assert len(result.ensembles or []) == 2 and result.posix is not None
    report = (run / "report.md").read_text()
    for phrase in ("accuracy", "Wilson", "v (valid rate)", "a (accuracy of valid)", "spread (max − min)",
                   "MaxP", "AvgP", "CPS", "std", "Kendall's W", "Friedman", "logit vs calibrated",
                   "Top-3 IoU", "Spearman ρ", "Template ensembles", "POSIX", "ψ =", "top-two",
                   "quantiles", "276 model calls", "tokens", "Item: {text}"):
        assert phrase in report, phrase
    page = (run / "report.html").read_text()
    for phrase in ("<h2>Per-prompt accuracy", "<h2>Per prompt — calibrated", "<h2>Sensitivity to the wording",
                   "Kendall&#x27;s W", "Top-two label log-probability gap", "POSIX ψ =", "data:image/png;base64,"):
        assert phrase in page, phrase
    lines = (run / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 4 * 60 and {"pred", "gold", "label_logprobs"} <= set(json.loads(lines[0]))
    assert json.loads((run / "summary.json").read_text())["ledger"]["calls"] == 276
    again = run_evaluation(config.model_copy(update={"cache": str(run / "cache.sqlite")}), backend=backend)
    assert again.ledger.calls == 0 and backend.calls == 276


def test_sampling_from_the_built_in_space_and_the_budget_cap(tmp_path: Path) -> None:
    config = _config(tmp_path, prompts=None, sample=3, split="dev")
    result = run_evaluation(config, backend=_oracle(config))
    assert len(result.prompts) == 3 and len({p.spec for p in result.prompts}) == 3
    assert len(result.example_ids) == 10 and result.ledger.calls == 30
    with pytest.raises(UserError, match="budget exhausted after 120 calls"):
        capped = _config(tmp_path, budget=150)
        run_evaluation(capped, backend=_oracle(capped))


def test_sampling_from_a_space_file(data_dir: Path, tmp_path: Path) -> None:
    space = Path(__file__).resolve().parent.parent / "examples" / "spaces" / "agnews.yaml"
    config = EvaluateConfig(task="agnews", data_dir=str(data_dir), space=str(space), sample=4, train_size=40,
                            dev_size=10, test_size=20, runs_dir=str(tmp_path))
    result = run_evaluation(config, backend=_oracle(config))
    assert len({p.spec for p in result.prompts}) == 4 and all("=" in p.source for p in result.prompts)
    assert "sampled from space" in (result.run_dir / "report.md").read_text()
