"""Every DSPy arm's default plan spends the cap: compiled to the end (or to the cap) on a fake
model — the synthetic oracle behind the metered engine, answering at once with a label or a
proposal — with compare's default splits (train 1,000; dev 200 at a cap of 1,000, 300 at 2,000)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

dspy = pytest.importorskip("dspy")

from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.dspy_bridge.engine import MeteredEngine  # noqa: E402
from prompttune.engine.study import run_study  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.search_spaces.prompt import PromptSpec  # noqa: E402
from prompttune.testing import colours_task_file  # noqa: E402
from tests.support import oracle_for  # noqa: E402

FULL = 0.9  # compare flags an arm that spent less of the cap (fairness.FULL_SPEND)
DEV = {1000: 200, 2000: 300}  # compare's default dev split at each cap


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[int, RunConfig]:
    """compare's default splits at each cap, on a colours task large enough for them."""
    root = tmp_path_factory.mktemp("plans")
    task = str(colours_task_file(root, per_colour=470))
    return {cap: RunConfig(task=task, train_size=1000, dev_size=dev, test_size=60, runs_dir=str(root / "runs"))
            for cap, dev in DEV.items()}


@dataclass
class Compiled:
    ledger: BudgetLedger
    stopped: bool
    chosen: PromptSpec | None
    description: str
    engine: MeteredEngine


def compile_arm(config: RunConfig, arm: str, cap: int, options: dict | None = None, seed: int = 0,
                threads: int = 1) -> Compiled:
    """One arm-seed through the run engine, as compare runs a DSPy arm, on the oracle test device."""
    result = run_study(config.model_copy(update={"optimizer": arm, "budget": cap, "seed": seed,
                                                 "optimizer_options": {**(options or {}), "threads": threads}}),
                       backend=oracle_for(config), record=False)
    return Compiled(result.search_ledger, result.outcome.stopped_by_budget, result.dev_winner.spec,
                    result.outcome.notes[0], result.strategy.search_.engine)


@pytest.mark.parametrize("cap", [1000, 2000])
@pytest.mark.parametrize("arm", ["dspy-mipro", "dspy-bfrs", "dspy-gepa", "dspy-copro"])
def test_the_default_plan_spends_the_cap(configs, arm: str, cap: int) -> None:
    run = compile_arm(configs[cap], arm, cap)
    spent = run.ledger.calls / cap
    assert FULL <= spent <= 1.0, f"{arm} at {cap}: {run.ledger.calls} calls ({spent:.1%}); {run.description}"


def test_dspy_presets_are_options_and_spend_what_dspy_sets(configs) -> None:
    run = compile_arm(configs[1000], "dspy-mipro", 1000, {"auto": "light"})
    assert "preset auto='light', chosen by option (not sized to the cap" in run.description
    assert not run.stopped and run.ledger.calls < 0.7 * 1000  # light mode ends there, whatever the cap


def test_zero_shot_mipro_spends_the_cap_or_is_stopped_by_it(configs) -> None:
    """Held zero-shot (same-space mode), TPE draws instructions again less often than the estimate
    assumes; a plan that runs over is stopped by the cap near its end."""
    for cap in (1000, 2000):
        run = compile_arm(configs[cap], "dspy-mipro", cap, {"max_demos": 0})
        assert FULL * cap <= run.ledger.calls <= cap


@pytest.mark.parametrize("cap", [1000, 2000])
def test_simba_finishes_within_the_cap_but_cannot_be_sized_to_spend_it(configs, cap: int) -> None:
    """SIMBA's steps cost what its sampled programs and candidates do not share with programs
    already scored, which only the scores decide: sized so that its steps surely fit, it leaves
    much of the cap unspent, and its final validation — the only scoring of whole programs on its
    trainset — always runs."""
    run = compile_arm(configs[cap], "dspy-simba", cap)
    assert not run.stopped and run.chosen is not None and run.ledger.calls <= cap
    assert "SIMBA may leave much of the cap unspent" in run.description


@pytest.mark.parametrize("arm", ["dspy-copro", "dspy-gepa", "dspy-mipro", "dspy-simba"])
def test_a_compile_with_threads_spends_and_chooses_as_with_one(configs, arm: str) -> None:
    alone, threaded = compile_arm(configs[1000], arm, 1000), compile_arm(configs[1000], arm, 1000, threads=4)
    assert threaded.ledger.summary() == alone.ledger.summary()
    assert threaded.chosen == alone.chosen and threaded.stopped == alone.stopped
    assert max(threaded.engine.batches) == 4 and len(threaded.engine.batches) < len(alone.engine.batches) / 2
