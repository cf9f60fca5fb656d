"""Every DSPy arm's default plan spends the cap: compiled to the end (or to the cap) on a fake
model — the synthetic oracle behind the metered engine, answering at once with a label or a
proposal — with compare's default splits (train 1,000; dev 200 at a cap of 1,000, 300 at 2,000)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

dspy = pytest.importorskip("dspy")

from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.dspy_bridge.adapter import PromptSpecAdapter  # noqa: E402
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine  # noqa: E402
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS, Sizes, Tools  # noqa: E402
from prompttune.dspy_bridge.program import ProgramMapping  # noqa: E402
from prompttune.evaluation.cache import ResultCache  # noqa: E402
from prompttune.evaluation.evaluator import Evaluator  # noqa: E402
from prompttune.evaluation.ledger import BudgetLedger  # noqa: E402
from prompttune.evaluation.metered_cache import MeteredCache  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402
from prompttune.search_spaces.prompt import PromptSpec  # noqa: E402
from tests.support import colours_task_file, oracle_for, task_of  # noqa: E402

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
    """One arm-seed compile as compare's `run_dspy_arm` sets it up: the arm's ledger and cache view,
    the train split in the seed's order, the valset drawn from dev with the seed."""
    task = task_of(config)
    train, dev = task.splits["train"], task.splits["dev"]
    settings = DSPY_OPTIMIZERS[arm](cap, Sizes(len(train), len(dev)), options or {})
    ledger = BudgetLedger(cap_calls=cap)
    evaluator = Evaluator(oracle_for(config), {e.id: e for e in [*train, *dev]}, {e.id: e for e in train},
                          MeteredCache(ResultCache()), ledger)
    baseline = default_space(task).default_candidate().spec
    mapping = ProgramMapping.build(baseline, task.input_fields, train, dev)
    rng = np.random.default_rng(seed)
    trainset = [mapping.example(train[i]) for i in rng.permutation(len(train))]
    valset = [mapping.example(dev[i]) for i in rng.permutation(len(dev))[:settings.valset_size]]
    engine = MeteredEngine(evaluator, seed=seed, threads=threads, linger=0.002)
    lm = dspy.LM("prompttune/oracle", engine=engine, cache=False, num_retries=0, max_tokens=96)
    adapter = PromptSpecAdapter(mapping, engine)
    tools = Tools(lm, adapter, engine, mapping, seed, trainset, valset)
    program, stopped = None, False
    with dspy.context(lm=lm, adapter=adapter, num_threads=1):
        try:
            program = settings.compile(mapping.program(baseline, []), tools)
        except BudgetStop:
            stopped = True
    chosen = None if program is None else mapping.spec_of(program)
    return Compiled(ledger, stopped, chosen, settings.description, engine)


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
