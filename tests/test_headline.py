"""benchmarks/headline.py on the synthetic oracle, with a tiny table in place of the protocol's tasks: a dirty
checkout and a used cache are refused, the provenance lands in the run directory, a resume is logged with its
time, and the report holds the protocol's sections (partial said so)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import headline
from prompttune.engine import comparison
from prompttune.testing import colours_task_file
from tests.support import oracle_for


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A clean one-commit checkout standing in for prompttune's, with the tiny table and the oracle model."""
    repo = tmp_path / "repo"
    (repo / "docs" / "results").mkdir(parents=True)
    (repo / "docs" / "results" / "headline_protocol.md").write_text("protocol\n")
    (repo / "prompttune").mkdir()  # the package the record names: this checkout's
    (repo / "prompttune" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "protocol")
    runs = tmp_path / "runs"
    args = ["--task", str(colours_task_file(tmp_path)), "--budget", "300", "--train-size", "60", "--dev-size", "60",
            "--test-size", "90", "--seeds", "2", "--allow-underspend", "--check-generation", "30", "--mode", "native",
            "--runs-dir", str(runs),
            "--cache", str(runs / "headline-colours" / "cache.sqlite"), "--optimizers", "sh,sh-eta2=sh:eta=2,random"]
    monkeypatch.setattr(headline, "REPO", repo)
    monkeypatch.setattr(headline, "package_dir", lambda: repo / "prompttune")
    claims = (headline.ClaimSpec("primary", "sh", "random"), headline.ClaimSpec("secondary", "sh", "random", 0.03))
    monkeypatch.setattr(headline, "PROTOCOL", {"colours": headline.Headline(
        args, claims=claims, ablation=("sh", "sh-eta2"), seeds=2)})
    monkeypatch.setattr(comparison, "build_backend", oracle_for)
    return repo


def _one_line_refusal(argv: list[str], capsys) -> str:
    assert headline.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_headline_run_records_provenance_resumes_and_reports(repo: Path, tmp_path: Path, capsys) -> None:
    assert "not a headline" in _one_line_refusal(["agnews-typo"], capsys)
    (repo / "stray.txt").write_text("x")
    assert "is dirty (1 paths" in _one_line_refusal(["colours", "--jobs", "1"], capsys)
    assert not (tmp_path / "runs").exists()  # refused before anything ran
    (repo / "stray.txt").unlink()

    assert headline.main(["colours", "--jobs", "1"]) == 0
    capsys.readouterr()
    [run_dir] = (tmp_path / "runs").glob("*-compare")
    record = json.loads((run_dir / "headline.json").read_text())
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert (record["commit"], record["dirty"], record["allow_dirty"], record["cache_empty_at_start"]) == (
        commit, False, False, True)
    assert record["package"] == {"path": str(repo / "prompttune"), "checkout": str(repo.resolve()),
                                 "commit": commit, "dirty": False}
    assert record["machine"]["cpus"] > 0 and record["machine"]["platform"] and record["started"]
    assert record["command"].startswith("compare --task ") and record["command"].endswith("--jobs 1")
    assert record["resumes"] == []
    assert "holds entries already" in _one_line_refusal(["colours", "--jobs", "1"], capsys)  # a used cache

    # An interrupted run: one arm-seed unfinished, no summary. Its report says partial; the resume is logged.
    (run_dir / "summary.json").unlink()
    [unfinished] = [p for p in run_dir.glob("arms/*/arm.json") if json.loads(p.read_text())["arm"] == "random"
                    and json.loads(p.read_text())["seed"] == 1]
    unfinished.unlink()
    assert headline.main(["colours", "--report", str(run_dir)]) == 0
    partial = (repo / "docs" / "results" / "headline_colours.md").read_text()
    assert "**Partial**: not the headline (missing: random seed 1, the comparison's summary.json)" in partial
    for written in (repo / "docs" / "results").glob("headline_colours.*"):
        written.unlink()  # an uncommitted report would make the resume's checkout dirty
    assert headline.main(["colours", "--resume", str(run_dir), "--jobs", "1"]) == 0
    capsys.readouterr()
    [resumed] = json.loads((run_dir / "headline.json").read_text())["resumes"]
    assert resumed["at"] >= record["started"] and resumed["dirty"] is False

    assert headline.main(["colours", "--report", str(run_dir)]) == 0
    report = (repo / "docs" / "results" / "headline_colours.md").read_text()
    assert "Partial" not in report
    for section in ("## Provenance", f"- commit: {commit}", "- dirty: false", "- cache empty at start: true",
                    f"- imported package: `{repo / 'prompttune'}` at {commit} (the same commit), dirty: false",
                    "## What each arm searched", "| baseline (the task's prompt) | 2 |",
                    f"- resumes: {resumed['at']}", "- seen before: not a built-in task",
                    "- generation check: 30 test examples per arm and seed", "## Served by generation (descriptive)",
                    "## Mean guarded test accuracy per arm", "| sh-eta2 | 2 |",
                    "primary: colours: sh − random > 0 |", "secondary: colours: sh − random > 0.03 |",
                    "## Ablation: sh − sh-eta2 (descriptive)", "## Fairness checks", "headline_colours.png"):
        assert section in report, section
    assert (repo / "docs" / "results" / "headline_colours.png").is_file()
    saved = headline.task_result(repo / "docs" / "results" / "headline_colours.json")
    assert saved == headline.task_result(run_dir) and saved.missing == [] and saved.record["commit"] == commit
    assert sorted(saved.accuracies) == ["baseline", "random", "sh", "sh-eta2"] and all(
        sorted(seeds) == [0, 1] for seeds in saved.accuracies.values())
    served = report.split("## Served by generation (descriptive)")[1].split("## ")[0]
    assert [line.split(" | ")[:2] for line in served.splitlines() if line.startswith(("| sh", "| baseline"))] == [
        ["| baseline", "2"], ["| sh", "2"], ["| sh-eta2", "2"]]  # the baseline once per seed, then every arm-seed
    searched = report.split("## What each arm searched")[1].split("## ")[0]
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in searched.splitlines() if line.startswith("| sh")
            or line.startswith("| random")}
    assert set(rows) == {"sh", "sh-eta2", "random"} and all(row[3] == "0 of 2" for row in rows.values())
    assert all(row[4] == "– (writes none) |" for row in rows.values())  # grid searchers write no instruction
    assert "## Served by generation (descriptive)" in (run_dir / "report.md").read_text()

    # With spread between the claim's arms the claims are tested: one-sided t p and its BH p, printed as values.
    for path in run_dir.glob("arms/*/arm.json"):
        arm = json.loads(path.read_text())
        if arm["arm"] == "random":
            arm["confirmation"]["best_accuracy"] -= 0.3 + 0.1 * arm["seed"]
            path.write_text(json.dumps(arm))
    assert headline.main(["colours", "--report", str(run_dir)]) == 0
    claims = [line for line in (repo / "docs" / "results" / "headline_colours.md").read_text().splitlines()
              if line.startswith("| primary") or line.startswith("| secondary")]
    assert len(claims) == 2 and all("untested" not in line and line.endswith("| yes |") for line in claims), claims

    _git(repo, "commit", "-qm", "later", "--allow-empty")
    assert "resume at the same commit" in _one_line_refusal(["colours", "--resume", str(run_dir)], capsys)


def test_a_run_whose_imported_package_is_not_the_checkout_is_refused(repo: Path, tmp_path: Path, capsys,
                                                                     monkeypatch) -> None:
    """The record must name the code that ran: an editable install of another checkout is refused in one line."""
    elsewhere = tmp_path / "other" / "prompttune"
    elsewhere.mkdir(parents=True)
    monkeypatch.setattr(headline, "package_dir", lambda: elsewhere)
    assert f"the imported prompttune is {elsewhere}, not this checkout's" in _one_line_refusal(
        ["colours", "--jobs", "1"], capsys)
    assert not (tmp_path / "runs").exists()


def test_combine_judges_every_task_s_claims_together(repo: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """--combine: one BH family over the tasks' claims; a task missing from the family makes it partial."""
    assert headline.main(["colours", "--jobs", "1"]) == 0
    capsys.readouterr()
    [run_dir] = (tmp_path / "runs").glob("*-compare")
    for path in run_dir.glob("arms/*/arm.json"):  # spread between the claim's arms, so the claims are tested
        arm = json.loads(path.read_text())
        if arm["arm"] == "random":
            arm["confirmation"]["best_accuracy"] -= 0.3 + 0.1 * arm["seed"]
            path.write_text(json.dumps(arm))
    alone = headline.combine_text([run_dir])
    assert "Partial family" not in alone and "One commit for every headline." in alone
    assert "Benjamini–Hochberg across these 2 claims" in alone
    assert len([line for line in alone.splitlines() if line.endswith("| yes |")]) == 2

    monkeypatch.setattr(headline, "PROTOCOL", {**headline.PROTOCOL, "other": headline.PROTOCOL["colours"]})
    assert "**Partial family**: not the headline (other: no run given)" in headline.combine_text([run_dir])
    assert "given twice" in _one_line_refusal(["--combine", str(run_dir), str(run_dir)], capsys)
    assert "give a headline, or --combine" in _one_line_refusal(["colours", "--combine", str(run_dir)], capsys)
    assert headline.main(["--combine", str(run_dir)]) == 0
    assert (repo / "docs" / "results" / "headline_claims.md").read_text() == headline.combine_text([run_dir])


def test_a_v2_headline_claims_against_the_baseline_and_its_family_is_judged_apart(repo: Path, tmp_path: Path,
                                                                                  capsys, monkeypatch) -> None:
    """Protocol v2's shape: claims against two arms and the baseline, no ablation, its own protocol and family page;
    one protocol's headlines are combined at a time, and no default is picked from v2."""
    assert headline.main(["colours", "--jobs", "1"]) == 0
    capsys.readouterr()
    [run_dir] = (tmp_path / "runs").glob("*-compare")
    v2 = headline.Headline(headline.PROTOCOL["colours"].args, claims=(
        headline.ClaimSpec("primary", "sh", "random"), headline.ClaimSpec("secondary", "sh", headline.BASELINE)),
        ablation=None, seeds=2, family="v2")
    monkeypatch.setattr(headline, "PROTOCOL", {**headline.PROTOCOL, "colours-v2": v2})
    run_v2 = tmp_path / "v2-compare"
    shutil.copytree(run_dir, run_v2)
    record = json.loads((run_v2 / "headline.json").read_text())
    (run_v2 / "headline.json").write_text(json.dumps({**record, "task": "colours-v2"}))
    family = headline.combine_text([run_v2])
    assert "Benjamini–Hochberg across these 2 claims" in family and "colours-v2: sh − baseline > 0 |" in family
    assert "[← protocol](headline_protocol_v2.md)" in family and "optimize's default" not in family
    assert "belong to protocols v1, v2" in _one_line_refusal(["--combine", str(run_dir), str(run_v2)], capsys)
    assert headline.main(["--combine", str(run_v2)]) == 0
    assert (repo / "docs" / "results" / "headline_claims_v2.md").read_text() == family
    assert headline.main(["colours-v2", "--report", str(run_v2)]) == 0
    report = (repo / "docs" / "results" / "headline_colours-v2.md").read_text()
    assert "[← protocol](headline_protocol_v2.md)" in report and "## Ablation" not in report
    baseline = next(line for line in report.splitlines() if line.startswith("| baseline (the task's prompt)"))
    runs = [json.loads(path.read_text()) for path in run_v2.glob("arms/*/arm.json")]
    per_seed = {run["seed"]: run["confirmation"]["baseline_accuracy"] for run in runs}
    assert baseline.endswith(" | ".join(f"{per_seed[seed]:.3f}" for seed in (0, 1)) + " |")


def test_combine_reads_a_saved_result_and_picks_the_default_only_for_a_whole_family(
        repo: Path, tmp_path: Path, monkeypatch) -> None:
    """A task's run directory is gone after its sitting: --combine reads the headline_<task>.json its report wrote,
    the same family as from the directory; the default is picked only when no task is missing."""
    assert headline.main(["colours", "--jobs", "1"]) == 0
    [run_dir] = (tmp_path / "runs").glob("*-compare")
    assert headline.main(["colours", "--report", str(run_dir)]) == 0
    saved = repo / "docs" / "results" / "headline_colours.json"
    assert headline.combine_text([saved]) == headline.combine_text([run_dir])
    monkeypatch.setattr(headline, "DEFAULT_CANDIDATES", ("random", "sh-eta2", "sh"))
    whole = headline.combine_text([saved])
    pick, scores = headline.default_pick([headline.task_result(saved)])
    assert f"\n{pick}: random {scores['random']:.3f}, sh-eta2 {scores['sh-eta2']:.3f}, sh {scores['sh']:.3f}" in whole
    monkeypatch.setattr(headline, "PROTOCOL", {**headline.PROTOCOL, "other": headline.PROTOCOL["colours"]})
    assert "Not chosen: the rule takes the whole family." in headline.combine_text([saved])
    saved.write_text("{}")
    with pytest.raises(headline.UserError, match="not a headline_<task>.json"):
        headline.task_result(saved)


def test_the_default_is_the_best_mean_over_tasks_and_a_near_tie_keeps_the_simpler() -> None:
    def result(task: str, reflect: float, nocal: float, sh: float) -> headline.TaskResult:
        return headline.TaskResult(task, "dir", {}, {"reflect": {1: reflect, 2: reflect}, "reflect-nocal": {1: nocal},
                                                     "sh": {1: sh, 2: sh}, "dspy-gepa": {1: 0.99}}, [])
    assert headline.default_pick([result("a", 0.80, 0.70, 0.60), result("b", 0.70, 0.65, 0.70)])[0] == "reflect"
    assert headline.default_pick([result("a", 0.804, 0.70, 0.80)])[0] == "sh"  # within 0.005: the simpler
    assert headline.default_pick([result("a", 0.81, 0.806, 0.80)])[0] == "reflect-nocal"
    assert headline.default_pick([headline.TaskResult("a", "dir", {}, {"dspy-gepa": {1: 0.9}}, [])]) is None


def test_seen_before_counts_the_test_examples_earlier_runs_drew(monkeypatch) -> None:
    """The report's "seen before": the headline's distinct test examples, and how many earlier runs (pool all, split
    seeds 0-12) drew into dev or test and into train; trec, whose file ships in a package."""
    run = {"task": "trec", "data_dir": None, "pool": "reporting", "split_seed": 100, "train_size": 1000,
           "dev_size": 300, "test_size": 1000}
    total, judged, trained = headline.seen_before(run, [100, 101])
    assert 1000 < total <= 2000 and 0 < judged <= total and 0 < trained <= total
    monkeypatch.setattr(headline, "EARLIER_SPLIT_SEEDS", range(0))
    assert headline.seen_before(run, [100, 101]) == (total, 0, 0)
    assert headline.seen_before({**run, "task": "my_task.csv"}, [100]) is None
    assert headline.in_first_headline(run, [100]) == len({ex for ex in _tests(run, 100)})  # its own draw: all of it
    second = {**run, "split_seed": 105, "test_size": 300}  # protocol v2's generate draws, same reporting half
    assert 0 < headline.in_first_headline(second, [105]) <= len(_tests(second, 105))


def _tests(run: dict, split_seed: int) -> set[str]:
    sizes = headline.SplitSizes(run["train_size"], run["dev_size"], run["test_size"])
    [draw] = headline.builtin_draws(run["task"], run["data_dir"], sizes, [split_seed], run["pool"])
    return {headline.example_text(ex) for ex in draw.splits["test"]}
