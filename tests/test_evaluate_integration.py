"""`evaluate` end to end with the real embedded model on real AG News data (about a minute)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from prompttune.backends.backend import Backend
from prompttune.cli import main
from prompttune.core.config import BackendConfig
from prompttune.engine import evaluate as prompt_set
from tests.support import CountingBackend

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parent.parent / "examples" / "prompts" / "agnews_prompts.yaml"


def test_evaluate_agnews_real_model(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    embedded_model: Backend) -> None:
    shipped = yaml.safe_load(SHIPPED.read_text())
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(yaml.safe_dump({**shipped, "prompts": shipped["prompts"][:6]}))
    backends: list[CountingBackend] = []

    def counting_backend(config):  # the default model, which the session has loaded already
        assert {name: getattr(config, name) for name in BackendConfig.model_fields} == BackendConfig().model_dump()
        backends.append(CountingBackend(embedded_model))
        return backends[-1]

    monkeypatch.setattr(prompt_set, "build_backend", counting_backend)
    code = main(["evaluate", "--task", "agnews", "--data-dir", str(data_dir), "--prompts", str(prompts),
                 "--test-size", "30", "--train-size", "20", "--dev-size", "20", "--calibrate", "--ensemble", "5",
                 "--posix", "--posix-size", "1", "--max-new-tokens", "4", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0
    [run] = (tmp_path / "runs").glob("*-agnews-evaluate-s0")
    assert (run / "accuracy.png").stat().st_size > 10_000
    report = (run / "report.md").read_text()
    for phrase in ("95% CI (Wilson)", "v (valid rate)", "a (accuracy of valid)", "spread (max − min)", "MaxP",
                   "AvgP", "CPS", "std", "Kendall's W", "Friedman χ²", "logit vs calibrated", "Top-3 IoU",
                   "Spearman ρ", "Template ensembles (K = 5", "POSIX", "ψ =", "Top-two label log-probability gap",
                   "quantiles", "model calls", "tokens"):
        assert phrase in report, phrase
    summary = json.loads((run / "summary.json").read_text())
    # 6 prompts × (30 test examples + 3 content-free probes + 1 POSIX generation + 1 POSIX re-scoring)
    assert summary["ledger"]["calls"] == backends[0].calls == 6 * (30 + 3 + 1 + 1)
    logit = summary["settings"]["logit"]
    assert len(logit["accuracies"]) == 6 and 0.25 < logit["avg_p"] <= 1.0
    assert summary["posix"] > 0
