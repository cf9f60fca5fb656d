"""The headline comparisons, exactly as the protocols fix them, with their provenance.

Two frozen protocols, each one family of claims: v1 (docs/results/headline_protocol.md: agnews, sst2, trec under
`logprobs`; a headline is named by its task) and v2 (docs/results/headline_protocol_v2.md: the same tasks under
`choice` and `generate`; a headline is named TASK-CONTRACT, e.g. `sst2-choice`). `PROTOCOL` is the one table this
script takes `compare`'s arguments and each headline's claims from.

A new run refuses a dirty checkout (unless --allow-dirty, recorded), a cache that already holds entries, and an
imported `prompttune` that is not this checkout's; then it runs `compare` with the protocol's arguments and writes
`headline.json` in the comparison's run directory: commit, dirty, the imported package's path, commit and dirty
state, cache empty at start, date, machine, command. `--resume DIR` finishes an interrupted run at the same commit
and logs the resume with its time; `--report DIR` writes docs/results/headline_<name>.md from the arms finished so
far (a partial run is reported as partial) and headline_<name>.json, the figures the family needs, so that
`--combine` can judge headlines whose run directories ran in other sittings; `--combine DIR_OR_JSON...` judges one
protocol's family (every claim of its headlines, Benjamini–Hochberg together) and, for v1 once it is whole, picks
`optimize`'s default by that protocol's rule.
Why a script: a headline must be one invocation at one clean commit from an empty cache, and say so itself.

Run: PROMPTTUNE_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/headline.py NAME [--jobs 2]
     python benchmarks/headline.py NAME --resume RUN_DIR [--jobs 2]
     python benchmarks/headline.py NAME --report RUN_DIR
     python benchmarks/headline.py --combine RUN_DIR_OR_JSON...   # one protocol's headlines
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

import prompttune
from prompttune.cli import main as prompttune_main
from prompttune.comparing.variants import optimizer_of
from prompttune.core.errors import UserError
from prompttune.core.run_files import (
    ANYTIME_PLOT,
    HEADLINE,
    SUMMARY,
    finished_arms,
    read_config,
    read_headline,
    read_summary,
    write_headline,
)
from prompttune.optimizers.registry import INSTRUCTION, lookup
from prompttune.reports.compare_report import generation_lines
from prompttune.results.arms import ArmRun, load_arm_run
from prompttune.statistics.seeds import Claim, judge_claims, p_text
from prompttune.statistics.stats import t_interval
from prompttune.tasks.builtin import BUILTIN, builtin_draws
from prompttune.tasks.pools import example_text
from prompttune.tasks.task import SplitSizes

REPO = Path(__file__).resolve().parents[1]
SEEDS = 5
ALPHA = 0.05  # the protocol's q for Benjamini–Hochberg across the claims
EARLIER_SPLIT_SEEDS = range(13)  # every split seed a result used before the protocol (headline_protocol.md)
FIRST_HEADLINE_SEEDS = range(100, 105)  # protocol v1's split seeds, on the reporting pool
DEFAULT_CANDIDATES = ("sh", "reflect-nocal", "reflect")  # the protocol's candidates, simplest first
DEFAULT_TIE = 0.005  # a score within this of the best keeps the simpler candidate
Accuracies = dict[str, dict[int, float]]  # arm -> seed -> guarded test accuracy


@dataclass(frozen=True)
class ClaimSpec:
    """A pre-registered claim: `first` − `second` > `margin` in mean guarded test accuracy over seeds (`second` may be
    `BASELINE`: the task's prompt on the same test split)."""

    kind: str  # "primary" or "secondary"
    first: str
    second: str
    margin: float = 0.0


BASELINE = "baseline"  # the pseudo-arm of a claim against the task's prompt (its test accuracy per seed)


@dataclass(frozen=True)
class Headline:
    """One headline comparison: `compare`'s arguments, its pre-registered claims, the descriptive ablation pair (if
    any), and the protocol (family) it belongs to."""

    args: list[str]
    claims: tuple[ClaimSpec, ...] = (ClaimSpec("primary", "reflect", "dspy-gepa"),
                                     ClaimSpec("secondary", "reflect", "dspy-gepa", 0.03))
    ablation: tuple[str, str] | None = ("reflect", "reflect-nocal")
    seeds: int = SEEDS
    family: str = "v1"


FAMILIES = {"v1": ("headline_protocol.md", "headline_claims.md"),
            "v2": ("headline_protocol_v2.md", "headline_claims_v2.md")}  # protocol page, family page


def _protocol(task: str) -> Headline:
    """The protocol's "How it runs" command for `task` (without --jobs, which the script passes), in the contract
    the protocol measured (`logprobs`, the default when it ran; `choice` is the default since)."""
    return Headline(["--task", task, "--serve", "logprobs", "--pool", "reporting", "--mode", "native", "--native-demos", "4",
                     "--budget", "2000", "--train-size", "1000", "--dev-size", "300", "--test-size", "1000",
                     "--seed", "100", "--split-seed", "100", "--seeds", str(SEEDS), "--check-generation", "100",
                     "--cache", f"runs/headline-{task}/cache.sqlite",
                     "--optimizers", "reflect,reflect-nocal=reflect:calibration=off,sh,dspy-gepa,dspy-mipro"])


V2_TEST_SIZE = {"choice": 1000, "generate": 300}  # generate's verdicts generate every answer: see the v2 protocol
V2_CLAIMS = (ClaimSpec("primary", "reflect", "dspy-gepa"), ClaimSpec("primary", "reflect", "dspy-mipro"),
             ClaimSpec("secondary", "reflect", BASELINE))


def _protocol_v2(task: str, contract: str) -> Headline:
    """Protocol v2's command for `task` under `contract` (docs/results/headline_protocol_v2.md, "What runs")."""
    check = ["--check-generation", "100"] if contract == "choice" else ["--check-generation", "0"]
    return Headline(["--task", task, "--serve", contract, "--pool", "reporting", "--mode", "native", "--native-demos",
                     "4", "--budget", "2000", "--train-size", "1000", "--dev-size", "300",
                     "--test-size", str(V2_TEST_SIZE[contract]), "--seed", "105", "--split-seed", "105",
                     "--seeds", str(SEEDS), *check, "--cache", f"runs/headline-v2-{task}-{contract}/cache.sqlite",
                     "--optimizers", "reflect,sh,dspy-gepa,dspy-mipro"],
                    claims=V2_CLAIMS, ablation=None, family="v2")


PROTOCOL: dict[str, Headline] = {
    **{task: _protocol(task) for task in ("agnews", "sst2", "trec")},
    **{f"{task}-{contract}": _protocol_v2(task, contract) for contract in ("choice", "generate")
       for task in ("agnews", "sst2", "trec")}}


def _git(*args: str, where: Path | None = None) -> str:
    where = where or REPO
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"git {' '.join(args)} failed in {where}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


def checkout() -> tuple[str, list[str]]:
    """The commit and the paths `git status --porcelain` lists (tracked changes and untracked files alike)."""
    return _git("rev-parse", "HEAD"), _git("status", "--porcelain").splitlines()


def package_dir() -> Path:
    """Where the `prompttune` that runs was imported from (an editable install may point at another checkout)."""
    return Path(prompttune.__file__).resolve().parent


def package_provenance() -> dict[str, Any]:
    """The imported package's path, the checkout holding it, that checkout's commit and dirty state; refused (one
    line) unless that checkout is this script's: the record must name the code that ran."""
    path = package_dir()
    try:
        top = Path(_git("rev-parse", "--show-toplevel", where=path)).resolve()
    except UserError:
        top = None
    if top != REPO.resolve():
        raise UserError(f"the imported prompttune is {path}, not this checkout's ({REPO}): run with "
                        f"PYTHONPATH={REPO} so the record names the code that runs")
    changed = _git("status", "--porcelain", where=path).splitlines()
    return {"path": str(path), "checkout": str(top), "commit": _git("rev-parse", "HEAD", where=path),
            "dirty": bool(changed)}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _option(args: list[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args else default


def _headline(name: str) -> Headline:
    if name not in PROTOCOL:
        raise UserError(f"{name!r} is not a headline: one of {', '.join(PROTOCOL)} (docs/results/headline_protocol*.md)")
    return PROTOCOL[name]


def _read_record(run_dir: Path, task: str | None = None) -> dict[str, Any]:
    """The run's provenance; `task`, when given, must be the one it ran."""
    record = read_headline(run_dir)
    if record is None:
        raise UserError(f"{run_dir} holds no {HEADLINE}: not a run this script started")
    if task is not None and record["task"] != task:
        raise UserError(f"{run_dir} is the {record['task']} headline, not {task}'s")
    return record


def start(task: str, jobs: int, allow_dirty: bool) -> int:
    """A new headline run: refused on a dirty checkout or a used cache; provenance written when compare returns."""
    headline = _headline(task)
    commit, changed = checkout()
    if changed and not allow_dirty:
        raise UserError(f"the checkout at {commit[:7]} is dirty ({len(changed)} paths in `git status --porcelain`): "
                        "commit or stash them, or pass --allow-dirty (recorded)")
    package = package_provenance()
    cache = Path(_option(headline.args, "--cache", ""))
    if cache.is_file() and cache.stat().st_size > 0:
        raise UserError(f"cache {cache} holds entries already: the headline starts from an empty cache; move it away")
    cache.parent.mkdir(parents=True, exist_ok=True)  # the protocol's runs/headline-TASK/ is new at the first start
    runs = Path(_option(headline.args, "--runs-dir", "runs"))
    before = set(runs.glob("*-compare"))
    argv = ["compare", *headline.args, "--jobs", str(jobs)]
    record = {"task": task, "command": "compare " + shlex.join(argv[1:]), "commit": commit, "dirty": bool(changed),
              "dirty_paths": changed, "allow_dirty": allow_dirty, "cache": str(cache), "cache_empty_at_start": True,
              "package": package, "started": _now(),
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count()}, "resumes": []}
    try:
        return prompttune_main(argv)
    finally:  # written however compare ends (finished, interrupted, failed): the run directory is the record
        if made := sorted(set(runs.glob("*-compare")) - before):
            write_headline(made[-1], record)


def resume(task: str, run_dir: Path, jobs: int) -> int:
    """Finish an interrupted headline run at its own commit; the resume is logged, with its time, before it runs."""
    record = _read_record(run_dir, task)
    commit, changed = checkout()
    if commit != record["commit"]:
        raise UserError(f"{run_dir} ran at {record['commit'][:7]}; this checkout is at {commit[:7]}: resume at the "
                        "same commit")
    package = package_provenance()
    record["resumes"].append({"at": _now(), "dirty": bool(changed), "jobs": jobs, "package": package})
    write_headline(run_dir, record)
    return prompttune_main(["compare", "--resume", str(run_dir), "--jobs", str(jobs)])


def _accuracies(runs: list[ArmRun]) -> Accuracies:
    """Each arm's guarded test accuracy per seed: what ships after the verdict, the unit every claim compares; and
    the baseline's (`BASELINE`), which every arm of a seed tests on the same examples."""
    found: Accuracies = {}
    for run in runs:
        found.setdefault(run.arm, {})[run.seed] = run.confirmation.best_accuracy
        found.setdefault(BASELINE, {}).setdefault(run.seed, run.confirmation.baseline_accuracy)
    return found


def _interval(values: list[float], bounds: tuple[float, float]) -> str:
    if len(values) < 2:
        return "n/a (one seed)"
    low, high = t_interval(values, bounds)
    return f"[{low:.3f}, {high:.3f}]"


def _diffs(accuracies: Accuracies, pair: tuple[str, str]) -> list[float]:
    first, second = (accuracies.get(arm, {}) for arm in pair)
    return [first[seed] - second[seed] for seed in sorted(set(first) & set(second))]


def _claims(name: str, headline: Headline, accuracies: Accuracies) -> list[Claim]:
    """The headline's pre-registered claims, in the protocol's order; not yet judged."""
    return [Claim(name, c.first, c.second, c.margin, _diffs(accuracies, (c.first, c.second))) for c in headline.claims]


def _claim_table(claims: list[Claim]) -> list[str]:
    """Judged claims as a markdown table, each named by its kind in the protocol."""
    lines = ["| claim | seeds | mean difference | 95% CI | p | BH p | holds |",
             "| --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for claim in claims:
        kind = next(c.kind for c in _headline(claim.task).claims
                    if (c.first, c.second, c.margin) == (claim.first, claim.second, claim.margin))
        diffs = claim.diffs
        p = "untested (no spread)" if claim.p is None else p_text(claim.p)
        p_bh = "–" if claim.p_bh is None else p_text(claim.p_bh)
        holds = "yes" if claim.p_bh is not None and claim.p_bh < ALPHA else "no"
        lines.append(f"| {kind}: {claim.name} | {len(diffs)} | {mean(diffs) if diffs else float('nan'):+.3f} | "
                     f"{_interval(diffs, (-1.0, 1.0))} | {p} | {p_bh} | {holds} |")
    return lines


def _arm_runs(run_dir: Path) -> list[ArmRun]:
    return [load_arm_run(arm) for arm in finished_arms(run_dir)]


def _missing(headline: Headline, run_dir: Path, accuracies: Accuracies) -> list[str]:
    """Why the run is not yet the headline: arm-seeds missing, too few seeds, no summary (empty: complete)."""
    config = read_config(run_dir)
    seeds = list(config["seeds"])
    missing = [f"{arm} seed {seed}" for arm in config["optimizers"] for seed in seeds
               if seed not in accuracies.get(arm, {})]  # the baseline is read from every arm-seed
    if len(seeds) < headline.seeds:
        missing.append(f"{headline.seeds - len(seeds)} seeds never planned")
    if not (run_dir / SUMMARY).is_file():
        missing.append(f"the comparison's {SUMMARY}")
    return missing


def seen_before(run: dict[str, Any], seeds: list[int]) -> tuple[int, int, int] | None:
    """The headline's distinct test examples over its seeds, and how many of them an earlier run drew: into dev or
    test, and into train (pool "all", split seeds 0-12, the sizes the headline asks for, the defaults the earlier
    results used). The partition is new, the examples are not: the report says what was seen before.
    None for a task that is not built in (no earlier run drew it)."""
    if run["task"] not in BUILTIN:
        return None
    sizes = SplitSizes(run["train_size"], run["dev_size"], run["test_size"])
    tests = _test_texts(run, seeds)
    earlier = [draw.splits for draw in builtin_draws(run["task"], run["data_dir"], sizes, EARLIER_SPLIT_SEEDS, "all")]
    judged = {example_text(ex) for splits in earlier for split in ("dev", "test") for ex in splits[split]}
    trained = {example_text(ex) for splits in earlier for ex in splits["train"]}
    return len(tests), len(tests & judged), len(tests & trained)


def in_first_headline(run: dict[str, Any], seeds: list[int]) -> int:
    """How many of the run's distinct test examples the first headline (protocol v1: reporting pool, split seeds
    100-104, test 1000) also tested on: a v2 run draws from the same reporting half."""
    first = builtin_draws(run["task"], run["data_dir"], SplitSizes(1000, 300, 1000), FIRST_HEADLINE_SEEDS, "reporting")
    return len(_test_texts(run, seeds) & {example_text(ex) for draw in first for ex in draw.splits["test"]})


def _test_texts(run: dict[str, Any], seeds: list[int]) -> set[str]:
    """The distinct test examples (normalized text) of the run's seeds, drawn as the run drew them."""
    sizes = SplitSizes(run["train_size"], run["dev_size"], run["test_size"])
    reported = builtin_draws(run["task"], run["data_dir"], sizes, range(run["split_seed"], run["split_seed"] + len(seeds)),
                             run["pool"])
    return {example_text(ex) for draw in reported for ex in draw.splits["test"]}


def _seen_line(run: dict[str, Any], seeds: list[int], family: str) -> str:
    if (seen := seen_before(run, seeds)) is None:
        return "- seen before: not a built-in task (no earlier run drew it)"
    total, judged, trained = seen
    first = (f"; {in_first_headline(run, seeds)} were test examples of the first headline (protocol v1, split seeds "
             f"{FIRST_HEADLINE_SEEDS.start}-{FIRST_HEADLINE_SEEDS.stop - 1})" if family != "v1" else "")
    return (f"- seen before: of the {total} distinct test examples over the {len(seeds)} seeds, {judged} were in an "
            f"earlier run's dev or test draw and {trained} in an earlier train draw (pool all, split seeds "
            f"{EARLIER_SPLIT_SEEDS.start}-{EARLIER_SPLIT_SEEDS.stop - 1}, train {run['train_size']} / dev "
            f"{run['dev_size']} / test {run['test_size']} where the task holds them){first}")


def _package_line(record: dict[str, Any]) -> str:
    package = record.get("package")
    if package is None:
        return "- imported package: not recorded (runs started before the record named it)"
    same = "the same commit" if package["commit"] == record["commit"] else f"**not** the checkout's {record['commit'][:12]}"
    return (f"- imported package: `{package['path']}` at {package['commit']} ({same}), dirty: "
            f"{str(package['dirty']).lower()}")


def searched_lines(run_dir: Path, runs: list[ArmRun], arms: list[str]) -> list[str]:
    """What each arm was allowed to change: the comparison's coverage (searched, held at the baseline), how many of
    its shipped prompts carry label offsets, and the model that wrote its instructions."""
    if not (run_dir / SUMMARY).is_file():
        return []
    coverage = {a["arm"]: a["coverage"] for a in read_summary(run_dir)["arms"]}
    config = read_config(run_dir)
    writer = config["run"]["proposer_model"] or config["run"]["model"]
    rows = []
    for arm in arms:
        shipped = [r.best for r in runs if r.arm == arm]
        offsets = sum(bool(spec.label_bias) or spec.calibrate for spec in shipped)
        writes = lookup(optimizer_of(arm, config["options"])).reach.writes
        rows.append(f"| {arm} | {', '.join(coverage[arm]['searched'])} | {', '.join(coverage[arm]['held']) or '–'} | "
                    f"{offsets} of {len(shipped)} | {f'`{writer}`' if INSTRUCTION in writes else '– (writes none)'} |")
    return ["## What each arm searched", "",
            "From the comparison's coverage plan (`--mode native`: every arm searches the space and adds what it "
            "brings itself); label offsets: the shipped prompts that carry them (calibration), of the seeds "
            "finished; writer: the model that wrote the arm's instructions.", "",
            "| arm | searched | held at the baseline | shipped with label offsets | writer |",
            "| --- | --- | --- | --- | --- |", *rows, ""]


def report_text(result: TaskResult, runs: list[ArmRun]) -> str:
    """The headline report of a finished or partial run (`runs`, its arm-seeds): provenance, what each arm searched,
    per-arm table, claims, ablation."""
    name, run_dir, record, accuracies = result.task, Path(result.run_dir), result.record, result.accuracies
    headline = _headline(name)
    protocol_page, family_page = FAMILIES[headline.family]
    config = read_config(run_dir)
    arms, seeds = list(config["optimizers"]), list(config["seeds"])
    lines = [f"# Headline: {name}", "", f"[← protocol]({protocol_page})", ""]
    if result.missing:
        lines += [f"**Partial**: not the headline (missing: {', '.join(result.missing)}).", ""]
    resumes = "; ".join(r["at"] + (" (dirty checkout)" if r["dirty"] else "") for r in record["resumes"]) or "none"
    lines += ["## Provenance", "", f"- command: `{record['command']}`", f"- commit: {record['commit']}",
              f"- dirty: {str(record['dirty']).lower()}" + (" (--allow-dirty)" if record["allow_dirty"] else ""),
              _package_line(record),
              f"- cache empty at start: {str(record['cache_empty_at_start']).lower()} ({record['cache']})",
              f"- date: {record['started']}",
              f"- machine: {record['machine']['platform']}, {record['machine']['cpus']} CPUs",
              f"- resumes: {resumes}", f"- run directory: `{run_dir}`", _seen_line(config["run"], seeds, headline.family),
              "- every headline start, aborted ones included: [headline_runs/README.md](headline_runs/README.md)",
              f"- generation check: {checked} test examples per arm and seed (descriptive; below the claims)"
              if (checked := config["run"]["check_generation"])
              else "- generation check: not run (the comparison's config holds check_generation 0)", ""]
    lines += searched_lines(run_dir, runs, arms)
    lines += ["## Mean guarded test accuracy per arm", "",
              "| arm | seeds | mean | 95% CI (Student-t) | " + " | ".join(f"seed {s}" for s in seeds) + " |",
              "| --- | ---: | ---: | --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for arm in [BASELINE, *arms]:
        scores = accuracies.get(arm, {})
        values = list(scores.values())
        cells = " | ".join(f"{scores[s]:.3f}" if s in scores else "–" for s in seeds)
        label = "baseline (the task's prompt)" if arm == BASELINE else arm
        lines.append(f"| {label} | {len(values)} | {mean(values):.3f} | {_interval(values, (0.0, 1.0))} | {cells} |"
                     if values else f"| {label} | 0 | – | – | {cells} |")
    lines += ["", "## Claims", "",
              f"One-sided paired t over seeds, Benjamini–Hochberg across this headline's {len(headline.claims)} claims "
              f"only: the protocol's family is every claim of its headlines, judged together in [{family_page}]"
              f"({family_page}) (`--combine`).", "",
              *_claim_table(judge_claims(_claims(name, headline, accuracies)))]
    if headline.ablation:
        ablation = _diffs(accuracies, headline.ablation)
        lines += ["", f"## Ablation: {headline.ablation[0]} − {headline.ablation[1]} (descriptive)", ""]
        lines.append(f"Mean difference {mean(ablation):+.3f}, 95% CI {_interval(ablation, (-1.0, 1.0))}, per seed "
                     f"{', '.join(f'{d:+.3f}' for d in ablation)}." if ablation else "No seed has both arms yet.")
    lines += ["", *generation_lines(runs, arms)]
    if (run_dir / SUMMARY).is_file():
        summary = read_summary(run_dir)
        lines += ["", "## Fairness checks", "",
                  *(f"- {'ok' if k['ok'] else 'FAILED'}: {k['claim']} ({k['detail']})" for k in summary["fairness"])]
    if (run_dir / ANYTIME_PLOT).is_file():
        lines += ["", f"![anytime](headline_{name}.png)"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class TaskResult:
    """What the family needs of one task's run: its provenance, guarded accuracies and what it still lacks.
    Saved beside the report (docs/results/headline_<task>.json), so tasks run in different sittings, whose run
    directories are gone, can be judged together."""

    task: str
    run_dir: str
    record: dict[str, Any]
    accuracies: Accuracies
    missing: list[str]

    def to_json(self) -> str:
        accuracies = {arm: {str(seed): value for seed, value in seeds.items()} for arm, seeds in self.accuracies.items()}
        return json.dumps({"task": self.task, "run_dir": self.run_dir, "record": self.record,
                           "accuracies": accuracies, "missing": self.missing}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TaskResult:
        saved = json.loads(text)
        return cls(saved["task"], saved["run_dir"], saved["record"],
                   {arm: {int(seed): value for seed, value in seeds.items()} for arm, seeds in saved["accuracies"].items()},
                   list(saved["missing"]))


def task_result(source: Path) -> TaskResult:
    """A task's result from its run directory, or from the headline_<task>.json its report wrote."""
    if source.is_file():
        try:
            return TaskResult.from_json(source.read_text(encoding="utf-8"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{source} is not a headline_<task>.json that --report wrote ({exc})") from None
    return _result_of(source, _arm_runs(source))


def _result_of(run_dir: Path, runs: list[ArmRun], task: str | None = None) -> TaskResult:
    """The result of the run in `run_dir`, whose arm-seeds are `runs`; `task`, when given, must be the one it ran."""
    record = _read_record(run_dir, task)
    accuracies = _accuracies(runs)
    return TaskResult(record["task"], str(run_dir), record, accuracies,
                      _missing(_headline(record["task"]), run_dir, accuracies))


def report(task: str, run_dir: Path) -> Path:
    """docs/results/headline_<task>.md (and its plot), and headline_<task>.json for --combine, from the run."""
    out = REPO / "docs" / "results" / f"headline_{task}.md"
    runs = _arm_runs(run_dir)
    result = _result_of(run_dir, runs, task)
    out.write_text(report_text(result, runs), encoding="utf-8")
    out.with_suffix(".json").write_text(result.to_json(), encoding="utf-8")
    if (run_dir / ANYTIME_PLOT).is_file():
        shutil.copyfile(run_dir / ANYTIME_PLOT, out.with_suffix(".png"))
    return out


def default_pick(results: list[TaskResult]) -> tuple[str, dict[str, float]] | None:
    """The protocol's rule: each candidate's mean over tasks of its mean over seeds; within DEFAULT_TIE of the best,
    the simplest candidate (DEFAULT_CANDIDATES' order). None when no candidate ran on every task."""
    scores = {arm: mean(mean(r.accuracies[arm].values()) for r in results) for arm in DEFAULT_CANDIDATES
              if all(r.accuracies.get(arm) for r in results)}
    if not scores:
        return None
    best = max(scores.values())
    return next(arm for arm in scores if scores[arm] >= best - DEFAULT_TIE), scores


def combine_text(sources: list[Path]) -> str:
    """One protocol's family: every claim of its headlines, Benjamini–Hochberg-adjusted together. Fewer headlines than
    the protocol's, or a partial one, make the family partial, and the page says so; a whole v1 family also gets
    the default optimizer by that protocol's rule."""
    results: dict[str, TaskResult] = {}
    for source in sources:
        result = task_result(source)
        if result.task in results:
            raise UserError(f"{result.task} is given twice ({results[result.task].run_dir} and {result.run_dir}): one "
                            "run per headline")
        results[result.task] = result
    families = {_headline(name).family for name in results}
    if len(families) != 1:
        raise UserError(f"the runs given belong to protocols {', '.join(sorted(families))}: combine one protocol's "
                        "headlines at a time")
    [family] = families
    protocol_page, _ = FAMILIES[family]
    gaps = [f"{name}: no run given" for name, h in PROTOCOL.items() if h.family == family and name not in results]
    gaps += [f"{name}: {', '.join(result.missing)}" for name, result in results.items() if result.missing]
    claims = judge_claims([claim for name, result in results.items()
                           for claim in _claims(name, _headline(name), result.accuracies)])
    lines = ["# Headline claims: every headline together", "", f"[← protocol]({protocol_page})", ""]
    if gaps:
        lines += [f"**Partial family**: not the headline ({'; '.join(gaps)}). Benjamini–Hochberg below runs over "
                  "the claims present only.", ""]
    commits = {result.record["commit"] for result in results.values()}
    lines += ["| headline | run directory | commit | dirty | imported package's commit | cache empty at start |",
              "| --- | --- | --- | --- | --- | --- |",
              *(f"| {name} | `{result.run_dir}` | {result.record['commit'][:12]} | "
                f"{str(result.record['dirty']).lower()} | "
                f"{result.record['package']['commit'][:12] if 'package' in result.record else 'not recorded'} | "
                f"{str(result.record['cache_empty_at_start']).lower()} |"
                for name, result in results.items()),
              "", "One commit for every headline." if len(commits) == 1
              else f"**{len(commits)} commits**: the headlines ran at different commits.", "",
              f"One-sided paired t over seeds per claim; Benjamini–Hochberg across these {len(claims)} claims, q = "
              f"{ALPHA}. A claim holds when its BH p is below {ALPHA}.", "", *_claim_table(claims), ""]
    if family != "v1":
        return "\n".join(lines) + "\n"
    lines += ["## optimize's default (the protocol's rule)", ""]
    if gaps:
        lines.append("Not chosen: the rule takes the whole family.")
    elif (picked := default_pick(list(results.values()))) is None:
        lines.append(f"Not chosen: none of {', '.join(DEFAULT_CANDIDATES)} ran on every task.")
    else:
        pick, scores = picked
        lines.append(f"{pick}: " + ", ".join(f"{arm} {score:.3f}" for arm, score in scores.items()) + " (mean over "
                     f"tasks of each candidate's mean guarded test accuracy; within {DEFAULT_TIE} of the best, the "
                     "simplest candidate).")
    return "\n".join(lines) + "\n"


def combine(sources: list[Path]) -> Path:
    """The family page (docs/results/headline_claims.md for v1, headline_claims_v2.md for v2) from the headlines'
    run directories or saved results."""
    family = _headline(task_result(sources[0]).task).family
    out = REPO / "docs" / "results" / FAMILIES[family][1]
    out.write_text(combine_text(sources), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", metavar="NAME", help=f"a headline: one of {', '.join(PROTOCOL)}")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--combine", nargs="+", metavar="RUN_DIR_OR_JSON",
                      help="judge one protocol's claims together (BH over the family): docs/results/headline_claims*.md; "
                           "each headline's run directory or the headline_<name>.json its --report wrote")
    what.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted headline run at its commit")
    what.add_argument("--report", metavar="RUN_DIR", help="write docs/results/headline_<task>.md from the run")
    parser.add_argument("--jobs", type=int, default=2, help="arm-seeds at once (the protocol's 2)")
    parser.add_argument("--allow-dirty", action="store_true", help="start on a dirty checkout (recorded)")
    args = parser.parse_args(argv)
    if (args.task is None) != bool(args.combine):
        print("error: give a headline, or --combine with the headlines' run directories (and no headline)",
              file=sys.stderr)
        return 2
    try:
        if args.combine:
            print(combine([Path(d) for d in args.combine]))
            return 0
        if args.report:
            print(report(args.task, Path(args.report)))
            return 0
        if args.resume:
            return resume(args.task, Path(args.resume), args.jobs)
        return start(args.task, args.jobs, args.allow_dirty)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
