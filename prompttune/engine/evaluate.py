"""Evaluation runs (`evaluate`): score a set of intent-equivalent prompts on held-out data and measure how much
the wording alone matters (spread, CPS, rank agreement, POSIX), under one budget ledger.
"""

from __future__ import annotations

import time
from contextlib import closing
from typing import Iterator, Literal

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend
from prompttune.core.errors import BudgetExhausted, UserError
from prompttune.core.run_files import ACCURACY_PLOT, CACHE, write_evaluation, write_page, write_report
from prompttune.core.types import Record
from prompttune.engine.run_dir import open_run, run_label
from prompttune.engine.setup import check_paths, task_space
from prompttune.engine.study import run_versions
from prompttune.reports.evaluate_report import (
    plot_accuracies,
    posix_rows,
    print_summary,
    prompt_rows,
    record_rows,
    report_text,
    summary_facts,
)
from prompttune.reports.html_report import html_page
from prompttune.results.evaluate import (
    EnsembleResult,
    EvaluateConfig,
    EvaluationResult,
    PromptComparison,
    PromptScore,
    SettingResult,
)
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator, build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.per_class import class_figures
from prompttune.scoring.prediction import EnsemblePredictor, make_predictor
from prompttune.scoring.prompt_sources import NamedPrompt, load_prompts_file, sample_space
from prompttune.scoring.sensitivity import PosixResult, measure_posix
from prompttune.statistics.metrics import macro_f1
from prompttune.statistics.multiprompt import (
    rank_agreement,
    summarize_prompt_set,
    top_k_iou,
    top_two_gap,
)
from prompttune.statistics.stats import wilson_ci
from prompttune.tasks import SplitSizes, Task, load_task


def score_prompt(records: list[Record], n_classes: int) -> PromptScore:
    n = len(records)
    correct = sum(r.correct for r in records)
    valid = sum(r.valid for r in records)
    scores = [r.label_logprobs for r in records]
    gap = (float(np.median(top_two_gap(np.array(scores)))) if all(s is not None for s in scores)
           else None)
    return PromptScore(correct / n, wilson_ci(correct, n), valid / n, wilson_ci(valid, n),
                       correct / valid if valid else float("nan"), wilson_ci(correct, valid),
                       macro_f1([r.gold for r in records], [r.pred for r in records], n_classes), gap)


def load_evaluation_task(config: EvaluateConfig) -> Task:
    """The task with the configured split sizes and split seed (the same draw as `optimize`'s)."""
    return load_task(config.task, config.data_dir, SplitSizes(config.train_size, config.dev_size, config.test_size),
                     config.split_seed)


def load_prompts(config: EvaluateConfig, task: Task, given: list[NamedPrompt] | None = None) -> list[NamedPrompt]:
    """Exactly one source: prompts given in Python, a prompts file, or N candidates sampled from a space."""
    if given is not None:
        prompts = given
    elif (config.prompts is None) == (config.sample is None):
        raise UserError("give either --prompts FILE or --sample N (from --space FILE or the built-in space)")
    elif config.prompts is not None:
        if config.space is not None or config.prompt is not None:
            raise UserError(f"{'--space' if config.space is not None else '--prompt'} goes with --sample N, "
                            f"not with --prompts")
        prompts = load_prompts_file(config.prompts, task)
    else:
        prompts = sample_space(task_space(task, config.space, config.prompt), config.sample or 0, config.seed)
    if len(prompts) < 2:
        raise UserError(f"evaluate compares prompts: got {len(prompts)}, need at least 2")
    if config.ensemble is not None and config.ensemble > len(prompts):
        raise UserError(f"--ensemble {config.ensemble} is larger than the {len(prompts)} prompts")
    return prompts


def _tracked(progress: Progress, description: str, prompts: list[NamedPrompt]) -> Iterator[NamedPrompt]:
    bar = progress.add_task(description, total=len(prompts))
    for prompt in prompts:
        yield prompt
        progress.advance(bar)


def _evaluate_setting(evaluator: Evaluator, scoring: str, prompts: list[NamedPrompt], ids: list[str],
                      labels: list[str], margin: float, progress: Progress) -> SettingResult:
    predictor = make_predictor(scoring, evaluator)
    predictor.prefetch([p.spec for p in prompts])
    records = [predictor.predict(p.spec, ids)
               for p in _tracked(progress, f"{scoring} · {len(ids)} examples", prompts)]
    correct = np.array([[r.correct for r in rows] for rows in records], dtype=float)
    return SettingResult(scoring, records, [score_prompt(rows, len(labels)) for rows in records],
                         summarize_prompt_set(correct),
                         class_figures({p.name: rows for p, rows in zip(prompts, records)},
                                       {p.name: p.name for p in prompts}, labels, margin))


def _ensembles(evaluator: Evaluator, base: Literal["logit", "calibrated"], prompts: list[NamedPrompt],
               k: int, ids: list[str], n_classes: int, seed: int) -> list[EnsembleResult]:
    """Disjoint ensembles of k prompts (seeded shuffle); members' records come from the cache."""
    order = np.random.default_rng(seed).permutation(len(prompts))
    predictor = EnsemblePredictor(evaluator, base=base)
    results = []
    for g in range(len(prompts) // k):
        members = tuple(int(i) for i in sorted(order[g * k:(g + 1) * k]))
        records = predictor.predict([prompts[i].spec for i in members], ids)
        member_acc = tuple(float(np.mean([r.correct for r in predictor.base.predict(prompts[i].spec, ids)]))
                           for i in members)
        results.append(EnsembleResult(members, score_prompt(records, n_classes), member_acc))
    return results


def run_evaluation(config: EvaluateConfig, backend: Backend | None = None, console: Console | None = None,
                   progress: bool = False, task: Task | None = None,
                   prompts: list[NamedPrompt] | None = None) -> EvaluationResult:
    """Score every prompt under every setting, then ensembles and POSIX; write the run directory.
    `task` replaces the task `config` names (in-memory data), `prompts` its prompt source (templates
    given in Python); `progress` shows bars and the summary. A backend the run builds is closed when it ends."""
    started = time.time()
    console = console or Console(stderr=True, quiet=not progress)
    settings = config.settings()
    task = task or load_evaluation_task(config)
    prompts = load_prompts(config, task, prompts)
    check_paths(config.runs_dir, config.cache)
    run_config = config.run_config()
    with open_run(run_config, backend, build=build_backend, quietly=not progress) as run:
        run_dir = run.directory(run_config.runs_dir, run_label(run_config, task.name), config.model_dump_json(indent=2))
        ledger = BudgetLedger(cap_calls=config.budget)
        examples = task.splits[config.split]
        ids = [ex.id for ex in examples]
        with closing(ResultCache(config.cache or run_dir / CACHE)) as cache:
            evaluator = build_evaluator(run_config, run.backend, examples, task.splits["train"], cache, ledger,
                                        scoring=settings[0], max_new_tokens=config.max_new_tokens)
            results, ensembles, posix = _score(config, evaluator, settings, prompts, ids, task.labels, console,
                                              progress)
        comparison = None
        if len(results) == 2:
            a, b = ([s.accuracy for s in r.scores] for r in results)
            k = min(config.top_k, len(prompts))
            comparison = PromptComparison(results[0].scoring, results[1].scoring, k, top_k_iou(a, b, k),
                                          rank_agreement(a, b))
        result = EvaluationResult(run_dir, config, task, prompts, ids, results, comparison,
                                  ensembles, _ensemble_base(settings) if ensembles is not None else None, posix,
                                  ledger, run.backend.model_id, time.time() - started,
                                  run_versions(run_config, run.backend, passed=run.passed))
        record_evaluation(result)
    if progress:
        print_summary(result, console)
    return result


def record_evaluation(result: EvaluationResult) -> None:
    """Everything a reader or a later script needs, next to config.json and the cache, then report.md and the
    page, which reads the files written before it."""
    run_dir = result.run_dir
    write_evaluation(run_dir, prompt_rows(result), record_rows(result), posix_rows(result), summary_facts(result))
    plot_accuracies(result, run_dir / ACCURACY_PLOT)
    write_report(run_dir, report_text(result))
    write_page(run_dir, html_page(run_dir))


def _ensemble_base(settings: list[str]) -> Literal["logit", "calibrated"]:
    """What ensemble members average: calibrated scores where the run computes them, else raw logits."""
    return "calibrated" if "calibrated" in settings else "logit"


def _score(config: EvaluateConfig, evaluator: Evaluator, settings: list[str], prompts: list[NamedPrompt],
           ids: list[str], labels: list[str], console: Console, progress: bool
           ) -> tuple[list[SettingResult], list[EnsembleResult] | None, PosixResult | None]:
    """Every prompt under every setting, then the ensembles and POSIX asked for, under the run's one ledger; a
    spent budget is one line naming what to lower."""
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), console=console, disable=not progress) as bars:
            results = [_evaluate_setting(evaluator, scoring, prompts, ids, labels, config.class_loss_margin, bars)
                       for scoring in settings]
        ensembles = (None if config.ensemble is None else _ensembles(
            evaluator, _ensemble_base(settings), prompts, config.ensemble, ids, len(labels), config.seed))
        posix = None
        if config.posix:
            posix_ids = ids[:config.posix_size]
            console.print(f"POSIX: {len(prompts)} prompts × {len(posix_ids)} examples, every greedy "
                          f"response re-scored under every prompt…")
            posix = measure_posix(evaluator, [p.spec for p in prompts], posix_ids)
    except BudgetExhausted as exc:
        raise UserError(f"budget exhausted after {evaluator.ledger.calls} calls ({exc}); raise --budget or lower "
                        f"--test-size/--posix-size (--cache FILE reuses outputs on a rerun)") from None
    return results, ensembles, posix
