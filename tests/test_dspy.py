"""The DSPy bridge: DSPy's calls are charged to the arm's ledger, the cap stops DSPy, and the
program it chose is confirmed by prompttune like every other arm's winner."""

from __future__ import annotations

from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")

from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.commands.compare import run_compare  # noqa: E402
from prompttune.commands.export import export  # noqa: E402
from prompttune.compare.dspy_arm import exact_label, mipro_plan  # noqa: E402
from prompttune.dspy_bridge.adapter import PromptSpecAdapter  # noqa: E402
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine  # noqa: E402
from prompttune.dspy_bridge.program import ProgramMapping  # noqa: E402
from prompttune.evaluation.cache import ResultCache  # noqa: E402
from prompttune.evaluation.evaluator import Evaluator  # noqa: E402
from prompttune.evaluation.ledger import BudgetLedger  # noqa: E402
from prompttune.evaluation.metered_cache import MeteredCache  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402
from tests.support import (  # noqa: E402
    CountingBackend,  # noqa: E402
    oracle_config,
    oracle_for,
    task_of,
)


def _bridge(tmp_path: Path, cap: int):
    config = oracle_config(tmp_path)
    task, backend, ledger = task_of(config), oracle_for(config), BudgetLedger(cap_calls=cap)
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    evaluator = Evaluator(backend, visible, {e.id: e for e in task.splits["train"]},
                          MeteredCache(ResultCache(), ledger), ledger)
    base = default_space(task).default_candidate().spec
    mapping = ProgramMapping.build(base, task.input_fields, task.splits["train"], task.splits["dev"])
    engine = MeteredEngine(evaluator)
    lm = dspy.LM("prompttune/oracle", engine=engine, cache=False, num_retries=0, max_tokens=96)
    return task, backend, ledger, mapping, dspy.context(lm=lm, adapter=PromptSpecAdapter(mapping, engine))


def test_every_dspy_call_is_charged_and_the_cap_stops_dspy_evaluate(tmp_path: Path) -> None:
    task, backend, ledger, mapping, context = _bridge(tmp_path, cap=12)
    program = mapping.program(mapping.base, task.splits["train"][:2])
    devset = [mapping.example(e) for e in task.splits["dev"][:10]]
    with context:
        assert dspy.Predict("question -> answer")(question="Name a colour.").answer.startswith("Name the colour")
        assert dspy.Evaluate(devset=devset, metric=exact_label, num_threads=1)(program).score >= 0
        assert ledger.calls == backend.calls == 11
        assert dict(ledger.calls_by_kind) == {"propose": 1, "score": 10}
        # DSPy's Evaluate catches Exception per example; the stop must pass through it anyway.
        with pytest.raises(BudgetStop):
            dspy.Evaluate(devset=[mapping.example(e) for e in task.splits["dev"][10:20]], metric=exact_label,
                          num_threads=1)(program)
    assert ledger.calls == backend.calls == 12


def test_a_program_and_its_promptspec_describe_the_same_prompt(tmp_path: Path) -> None:
    task, _, _, mapping, _ = _bridge(tmp_path, cap=1)
    demos = task.splits["train"][3:6]
    spec = mapping.base.with_updates(instruction="Pick one of {labels}.", demo_ids=tuple(e.id for e in demos))
    program = mapping.program(spec, demos)
    assert program.signature.instructions == "Pick one of red, green, blue."
    assert mapping.spec_of(program) == spec.with_updates(instruction="Pick one of red, green, blue.")
    assert mapping.spec_of(mapping.program(mapping.base, [])) == mapping.base  # keeps its {labels}


def test_mipro_settings_follow_the_cap() -> None:
    lm = dspy.utils.DummyLM([])
    assert "mode 'light'" in mipro_plan(lm, 2000, 300, 0, {}).description
    small = mipro_plan(lm, 600, 60, 0, {})
    assert "below light" in small.description and small.compile_kwargs["num_trials"] >= 1
    assert mipro_plan(lm, 600, 60, 0, {"num_trials": 4}).compile_kwargs["num_trials"] == 4


def test_dspy_bfrs_arm_stopped_by_the_cap_keeps_its_best_full_dev_program(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, budget=150, dev_size=50)
    result = run_compare(config, ["random", "dspy-bfrs"], [0], {}, backend=oracle_for(config), mode="native")
    run = result.runs[1]
    assert run.stopped_by_budget and run.search.calls <= 150
    assert run.foreign_calls >= 50  # the zero-shot program is the baseline random already scored
    assert run.best_dev is not None and run.anytime and run.anytime[-1][1] == run.best_dev
    assert run.confirmation.n == config.test_size and all(check.ok for check in result.checks)
    assert (run.run_dir / "dspy_program.json").is_file() and "stopped by the cap" in " ".join(run.notes)


@pytest.mark.integration
def test_dspy_on_the_real_model_is_charged_capped_and_confirmed(data_dir: Path, tmp_path: Path) -> None:
    config = oracle_config(tmp_path).model_copy(update={
        "task": "agnews", "data_dir": str(data_dir), "budget": 30, "train_size": 20, "dev_size": 12,
        "test_size": 20})
    backend = CountingBackend(build_backend(config))
    result = run_compare(config, ["dspy-bfrs"], [0], {}, backend=backend, mode="native")
    run = result.runs[0]
    # Zero-shot and labeled-only programs (12 dev calls each), then bootstrapping until the cap.
    assert run.stopped_by_budget and run.search.calls == 30 and run.best_dev is not None
    # One arm, fresh cache: every charged call reached the model; then baseline + winner on test.
    assert backend.calls == run.search.calls + run.confirm_calls
    assert run.confirmation.n == 20 and all(check.ok for check in result.checks)
    written = export(run.run_dir, "dspy", tmp_path / "exported")
    assert [p.name for p in written] == ["program.json", "program.py"]
