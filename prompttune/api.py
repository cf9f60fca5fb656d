"""The Python API: what the CLI does, callable from a notebook.

Tasks can be built-in names, task files or `Task` objects (`Task.from_records(...)` for lists of
dicts or a DataFrame); spaces files or `SearchSpace` objects; objectives names or callables
`(gold, pred, n_classes) -> float`; the model a `Backend` object or the settings that build one
(`model=`, `backend=`, `dtype=`, ...: every `RunConfig` field is a keyword). Calls print nothing
and leave signal handlers alone unless `progress=True`.

Each function opens with an example on the synthetic oracle (a test device with known answers),
which `make test` runs.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend, loading
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.engine.evaluate import load_evaluation_task, run_evaluation
from prompttune.engine.study import resume_study, run_study
from prompttune.results.compare import CompareResult
from prompttune.results.evaluate import EvaluateConfig, EvaluationResult
from prompttune.results.finished_run import FinishedCompare, FinishedEvaluation, FinishedRun, read_finished
from prompttune.results.run import RunResult, TunedPrompt
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prompt_sources import parse_prompts, sample_space
from prompttune.search_spaces import SearchSpace
from prompttune.statistics import Objective
from prompttune.tasks.task import Task

if TYPE_CHECKING:
    import dspy

IN_MEMORY = "(in memory)"


def _task_settings(task: str | Path | Task, settings: dict[str, Any]) -> tuple[Task | None, dict[str, Any]]:
    """The config fields a task implies: its name or path, and for a Task object the sizes it has."""
    if isinstance(task, Task):
        sizes = {f"{split}_size": len(task.splits[split]) for split in ("train", "dev", "test")}
        return task, {**sizes, **settings, "task": task.name}
    return None, {**settings, "task": str(task)}


def _space_settings(space: str | Path | SearchSpace | None, settings: dict[str, Any]
                    ) -> tuple[SearchSpace | None, dict[str, Any]]:
    if isinstance(space, SearchSpace):
        return space, settings
    return None, {**settings, "space": None if space is None else str(space)}


def _objective_settings(objective: str | Objective, settings: dict[str, Any]
                        ) -> tuple[Objective | None, dict[str, Any]]:
    if isinstance(objective, str):
        return None, {**settings, "objective": objective}
    return objective, {**settings, "objective": f"custom:{getattr(objective, '__name__', 'callable')}"}


def optimize(task: str | Path | Task = "agnews", *, optimizer: str = RunConfig.model_fields["optimizer"].default,
             budget: int = RunConfig.model_fields["budget"].default,
             space: str | Path | SearchSpace | None = None, objective: str | Objective = "accuracy",
             backend: Backend | None = None, options: dict[str, Any] | None = None, record: bool = True,
             progress: bool = False, **settings: Any) -> RunResult:
    """Search `space` with `optimizer` under `budget` model calls, then let the held-out test split
    decide what ships. Returns the `RunResult`: `.verdict`, `.shipped` (`.render(example)` gives the
    exact text the model sees), `.dev_winner`, `.ledger`, `.save(path)`;
    `prompttune.predict(result, inputs)` labels an input, `prompttune.to_dspy(result)` makes a DSPy program.

    `record=False` writes no run directory. Any other `RunConfig` field is a keyword (`seed`,
    `split_seed`, `dev_size`, `model`, `dtype`, `alpha`, `runs_dir`, ...); `serve="generate"` declares that
    production lets the model answer (the verdict then generates; default: the task file's `serve:`, else
    `choice`), `check_generation=0` turns off the generation check that runs after a `choice` or `logprobs` verdict.

    >>> import prompttune
    >>> from prompttune.testing import SyntheticOracleBackend, demo_task
    >>> task = demo_task()  # a synthetic task and an oracle "model" with known answers: a test device
    >>> model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
    >>> result = prompttune.optimize(task, optimizer="random", budget=300, backend=model, record=False)
    >>> result.verdict.confirmed is not None, result.shipped.render({"text": "a red item"}).splitlines()[-1]
    (True, 'Label:')
    """
    task_object, fields = _task_settings(task, settings)
    space_object, fields = _space_settings(space, fields)
    objective_fn, fields = _objective_settings(objective, fields)
    config = RunConfig(optimizer=optimizer, budget=budget, optimizer_options=options or {}, **fields)
    return run_study(config, task=task_object, space=space_object, objective=objective_fn, backend=backend,
                     progress=progress, handle_signals=progress, record=record)


def resume(run_dir: str | Path, *, task: Task | None = None, space: SearchSpace | None = None,
           objective: Objective | None = None, backend: Backend | None = None, progress: bool = False) -> RunResult:
    """Finish an interrupted run (pass again the in-memory task, space or objective it ran on)."""
    return resume_study(Path(run_dir), task=task, space=space, objective=objective, backend=backend,
                        progress=progress, handle_signals=progress)


def load_run(run_dir: str | Path) -> FinishedRun | FinishedCompare | FinishedEvaluation:
    """Reopen a finished run from its directory, without a model: an optimize run as a `FinishedRun` (its config,
    the shipped, dev-winner and baseline prompts, the verdict (verdict.json) and the trials), a comparison as a
    `FinishedCompare` (its settings, summary.json and every arm-seed) and an evaluation as a `FinishedEvaluation`
    (its config, prompts, records and summary.json); `.kind` says which. A directory that is not a finished run
    is one line saying why.

    >>> import prompttune, tempfile
    >>> from prompttune.testing import SyntheticOracleBackend, demo_task
    >>> task = demo_task()
    >>> model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
    >>> result = prompttune.optimize(task, optimizer="random", budget=300, backend=model, runs_dir=tempfile.mkdtemp())
    >>> run = prompttune.load_run(result.run_dir)
    >>> run.confirmed, run.shipped.id == result.shipped.id, len(run.trials) == len(result.trials.load())
    (True, True, True)
    """
    return read_finished(Path(run_dir))


def predict(result: RunResult, inputs: Mapping[str, Any] | str) -> str | None:
    """The shipped prompt's label for one input, scored as the verdict scored the test split (the same rendering,
    demos, label words, offsets and scoring) on the run's backend: a {field: text} mapping, or the text itself for a
    task with one input field. None when a generated answer names no label. A backend the run closed is built again
    from its config and kept on `result` until `result.close()`.

    >>> import prompttune
    >>> from prompttune.testing import SyntheticOracleBackend, demo_task
    >>> task = demo_task()
    >>> model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
    >>> result = prompttune.optimize(task, optimizer="random", budget=300, backend=model, record=False)
    >>> prompttune.predict(result, "a red item") in task.labels
    True
    """
    fields = _input_fields(result, inputs)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    example = Example(f"predict-{digest}", fields, 0)  # the gold label is unknown and unused
    with closing(ResultCache()) as cache:
        evaluator = build_evaluator(result.config, _serving_backend(result), [example], result.train.values(), cache,
                                    BudgetLedger())
        record = evaluator.evaluate(result.verdict.shipped.spec, [example.id])[0]
    return None if record.pred is None else result.labels[record.pred]


def _serving_backend(result: RunResult) -> Backend:
    """The backend passed to the run, else the run's own built again from its config (the run closed it)."""
    if result.backend is not None:
        return result.backend
    if result.rebuilt is None:
        with loading(result.config, quietly=True):
            result.rebuilt = build_backend(result.config)
    return result.rebuilt


def _input_fields(result: RunResult, inputs: Mapping[str, Any] | str) -> dict[str, str]:
    if isinstance(inputs, str):
        if len(result.input_fields) != 1:
            raise UserError(f"predict: this task has {len(result.input_fields)} input fields "
                            f"({', '.join(result.input_fields)}); pass a dict with each")
        return {result.input_fields[0]: inputs}
    if missing := [name for name in result.input_fields if name not in inputs]:
        raise UserError(f"predict: the input lacks the field(s) {', '.join(missing)}")
    return {name: str(inputs[name]) for name in result.input_fields}


def to_dspy(prompt: RunResult | TunedPrompt) -> "dspy.Predict":
    """A `dspy.Predict` program carrying a prompt's instruction and demos (a run's: its shipped prompt). DSPy
    renders it with its own adapter: `TunedPrompt.render`/`template` give the exact scored text."""
    from prompttune.dspy_bridge import require_dspy

    require_dspy("to_dspy()")
    from prompttune.dspy_bridge.program import ProgramMapping

    tuned = prompt.shipped if isinstance(prompt, RunResult) else prompt
    mapping = ProgramMapping.build(tuned.spec, list(tuned.input_fields), list(tuned.demos), [])
    return mapping.program(tuned.spec, list(tuned.demos))


def evaluate(task: str | Path | Task = "agnews", *, prompts: str | Path | Sequence[str] | None = None,
             sample: int | None = None, space: str | Path | SearchSpace | None = None,
             backend: Backend | None = None, progress: bool = False, **settings: Any) -> EvaluationResult:
    """Score a set of intent-equivalent prompts (a prompts file, a list of templates with `{field}`
    placeholders, or `sample` candidates of a space) on one split, and measure how much the wording
    alone matters. Any other `EvaluateConfig` field is a keyword (`split`, `scoring`, `calibrate`, ...).

    >>> import prompttune, tempfile
    >>> from prompttune.testing import SyntheticOracleBackend, demo_task
    >>> task = demo_task()
    >>> model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
    >>> result = prompttune.evaluate(task, prompts=["Colour: {text}\\nAnswer:", "Colour: {text}\\nLabel:"],
    ...                              backend=model, runs_dir=tempfile.mkdtemp())
    >>> [round(score.accuracy, 3) for score in result.settings[0].scores]
    [0.567, 0.9]
    """
    task_object, fields = _task_settings(task, settings)
    given = None
    if isinstance(space, SearchSpace) or (prompts is not None and not isinstance(prompts, (str, Path))):
        fields["prompts"] = IN_MEMORY
        task_object = task_object or load_evaluation_task(EvaluateConfig(**fields))
        given = (sample_space(space.bind(task_object.splits["train"]), sample or 0, fields.get("seed", 0))
                 if isinstance(space, SearchSpace) else parse_prompts(list(prompts or []), task_object))
    else:
        fields.update(prompts=None if prompts is None else str(prompts), sample=sample,
                      space=None if space is None else str(space))
    config = EvaluateConfig(**fields)
    return run_evaluation(config, backend=backend, progress=progress, task=task_object, prompts=given)


def compare(task: str | Path | Task = "agnews", *, optimizers: Sequence[str] = ("random", "sh"), seeds: int = 5,
            budget: int = 2000, mode: Literal["same-space", "native"] = "same-space",
            options: dict[str, dict[str, Any]] | None = None, backend: Backend | None = None,
            progress: bool = False, **settings: Any) -> CompareResult:
    """Run every optimizer (prompttune's and DSPy's `dspy-*` arms) at `seeds` seeds, each seed on its
    own data draw, under the same cap, model and dimensions, and compare their held-out results with
    the checks that keep it fair. Any other `RunConfig` field is a keyword; `check_generation=N` (default 0 here)
    serves each arm-seed's shipped prompt by generation on N test examples, descriptively.

    >>> import prompttune, tempfile
    >>> from prompttune.testing import SyntheticOracleBackend, demo_task
    >>> task = demo_task()
    >>> model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
    >>> c = prompttune.compare(task, optimizers=["random", "sh"], seeds=2, budget=150, backend=model,
    ...                        runs_dir=tempfile.mkdtemp())
    >>> [(s.arm, round(s.guarded.accuracy, 2)) for s in c.summaries], all(check.ok for check in c.checks)
    ([('random', 0.9), ('sh', 0.9)], True)
    """
    data, fields = _task_settings(task, settings)
    check_generation = fields.pop("check_generation", 0)  # compare checks generation only when asked
    config = RunConfig(budget=budget, **fields)
    return run_compare(CompareRequest(config, list(optimizers), list(range(config.seed, config.seed + seeds)),
                                      options or {}, mode=mode, check_generation=check_generation, data=data,
                                      backend=backend, progress=progress))
