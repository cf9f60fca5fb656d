"""The serving contract (issue #40, item 1), on the synthetic oracle: `serve: generate` ships no label offsets and
decides by generation, `choice` keeps offsets only where `logit_bias` reproduces them, the default `logprobs` says so
on the run's first line and checks generation by default, and old run directories still load and report."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import write_page
from prompttune.core.types import ChoiceRequest
from prompttune.engine import comparison, evaluate, study
from prompttune.engine.evaluate import run_evaluation
from prompttune.engine.setup import load_space
from prompttune.engine.study import checked_search, run_study
from prompttune.optimizers.registry import STRATEGIES, Reach, optimizer_entry
from prompttune.optimizers.strategy_contract import IncumbentSearch, TrialRequest, spec_candidate
from prompttune.reports.html_report import html_page
from prompttune.results.evaluate import EvaluateConfig
from prompttune.scoring.contract import (
    GENERATION,
    choice_bias,
    contract_line,
)
from prompttune.scoring.prompt_sources import NamedPrompt
from prompttune.scoring.serving import MIN_VALID_RATE, GenerationCheck, ServedPrompt
from prompttune.search_spaces.prompt import render, select_demos
from prompttune.tasks import load_run_task
from prompttune.testing import colours_task_file
from tests.support import CountingBackend, model_calls, oracle_config, oracle_for, task_of

README_TASK = Path(__file__).resolve().parent.parent / "examples" / "custom_task" / "reviews_with_prompt.yaml"
SIZES = ["--budget", "400", "--train-size", "60", "--dev-size", "60", "--test-size", "90"]


def generated_answer(text: str) -> str:
    """What the oracle "model" writes when it generates: after a bare 'Label:' cue it chats (label scores like
    that prompt, generation does not), with 'Choose the correct' it names the item's colour, else it names it for
    three items in four and a colour off the list for the rest; asked for an instruction, it writes one."""
    if "painted " not in text:
        return "Choose the correct colour of the item: red, green or blue."
    if text.rstrip().endswith("Label:"):
        return "Sure! Happy to help with that."
    colour = text.rsplit("painted ", 1)[1].split()[0]
    if "Choose the correct" in text or int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4:
        return f"It is {colour}."
    return "It is purple."


def generating_oracle(config: RunConfig) -> CountingBackend:
    backend = oracle_for(config)
    backend.inner.proposals = generated_answer
    return backend


def _optimize(capsys: pytest.CaptureFixture, tmp_path: Path, task: Path, *options: str) -> tuple[Path, str, str]:
    """`optimize` through the command line on the generating oracle: the run directory, stdout and stderr."""
    code = main(["optimize", "--task", str(task), *SIZES, "--runs-dir", str(tmp_path / "runs"), *options])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return (tmp_path / "runs" / "latest").resolve(), captured.out, captured.err


def _unwrapped(text: str) -> str:
    """Terminal output with rich's line wrapping undone."""
    return " ".join(text.split())


@pytest.fixture(autouse=True)
def _oracle_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(study, "build_backend", generating_oracle)


def _offsets(spec: dict) -> bool:
    return bool(spec.get("label_bias")) or bool(spec.get("calibrate"))


def _trials(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines() if line.strip()]


def test_serve_generate_ships_no_offsets_and_decides_by_generation(capsys, tmp_path: Path) -> None:
    run_dir, out, err = _optimize(capsys, tmp_path, colours_task_file(tmp_path), "--serve", "generate")
    assert _unwrapped(err).startswith(contract_line("generate", declared=True))  # the run's first line
    assert "serve generate, verdict scored by generation: baseline test accuracy" in out
    trials = _trials(run_dir)
    assert trials and not any(_offsets(t.get("spec", {})) for t in trials)  # reflect raced no calibrated twin
    for name in ("best_prompt", "dev_winner", "baseline_prompt"):
        assert not _offsets(json.loads((run_dir / f"{name}.json").read_text())["spec"])
    assert json.loads((run_dir / "best_prompt.json").read_text())["serve"] == "generate"
    assert json.loads((run_dir / "config.json").read_text())["serve"] == "generate"
    facts = json.loads((run_dir / "verdict.json").read_text())
    assert facts["serve"] == "generate" and facts["verdict"]["scored_by"] == "generation"
    # The search scored every candidate by generation itself: no label-score proxy, no finalists rescored after it.
    search = facts["ledgers"]["search"]
    assert facts["finalists"] is None and "score" not in search["calls_by_kind"]
    assert search["calls"] <= 400 and search["calls_by_kind"]["generate"] > 0
    assert facts["ledgers"]["confirm"]["calls_by_kind"] == {"generate": facts["ledgers"]["confirm"]["calls"]}
    check = facts["generation_check"]
    assert check["by_verdict"] and {p["role"] for p in check["prompts"]} >= {"baseline"}
    report = (run_dir / "report.md").read_text()
    assert "Serving contract **`serve: generate`**" in report
    assert "The search scored every candidate by generation too" in report
    assert "## Served by generation (the verdict, `serve: generate`)" in report and "valid responses (generation)" in report
    assert "Finalists rescored" not in report
    assert "serve: generate" in (run_dir / "report.html").read_text()


def test_the_same_run_under_logprobs_races_calibrated_twins(capsys, tmp_path: Path) -> None:
    """The control of the test above: under `logprobs`, reflect's trials carry label offsets."""
    run_dir, _, err = _optimize(capsys, tmp_path, colours_task_file(tmp_path), "--check-generation", "0",
                                "--serve", "logprobs")
    assert _unwrapped(err).startswith(contract_line("logprobs", declared=True))
    assert contract_line("choice", declared=False).endswith(
        "set `serve: generate` if production lets the model answer, `serve: logprobs` if it reads the labels' "
        "log-probabilities")
    assert any(_offsets(t.get("spec", {})) for t in _trials(run_dir))


def test_the_generate_verdict_equals_evaluate_serve_generate_on_the_same_test_ids(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, serve="generate", budget=400)
    result = run_study(config, backend=generating_oracle(config))
    verdict = result.verdict
    prompts = [NamedPrompt(role, candidate.spec, role) for role, candidate in
               (("baseline", verdict.baseline), ("dev winner", verdict.dev_winner))]
    evaluation = run_evaluation(EvaluateConfig(task=config.task, serve="generate", split="test",
                                               train_size=config.train_size, dev_size=config.dev_size,
                                               test_size=config.test_size, runs_dir=str(tmp_path / "evaluate")),
                                backend=generating_oracle(config), prompts=prompts)
    assert evaluation.example_ids == list(verdict.test_ids)
    [setting] = evaluation.settings
    assert setting.scoring == "generate"
    leader = verdict.leader_confirmation
    assert [score.accuracy for score in setting.scores] == [leader.baseline_accuracy, leader.best_accuracy]
    served = {p.role: p for p in result.generation_check.prompts}
    assert setting.scores[0].valid_rate == served["baseline"].valid_rate


def test_the_default_contract_checks_generation_by_default_and_warns(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, optimizer="random")
    assert config.serve is None and config.check_generation == 100
    backend = generating_oracle(config)
    result = run_study(config, backend=backend)
    assert result.config.serve == "choice"
    check = result.generation_check
    assert check is not None and check.n == 90 and not check.by_verdict  # the whole 90-example test split
    assert backend.calls == model_calls(result) and check.calls > 0  # outside the budget: its own ledger
    assert result.verdict.shipped.spec.output_template == "Label: {}"  # label scores like the chatty cue
    report = (result.run_dir / "report.md").read_text()
    assert "**if served by generation: valid 0%, accuracy 0%" in report
    assert "**Warning: the shipped prompt served by generation: only 0% of its generated answers" in report
    assert "declare `serve: generate`" in report


def test_the_generation_warning_thresholds() -> None:
    def check(valid: float, accuracy: float, verdict: float) -> GenerationCheck:
        return GenerationCheck(100, "label log-probabilities", (ServedPrompt("shipped", "c", valid, accuracy, verdict, ()),))

    assert check(0.95, 0.80, 0.84).serving_warning() is None
    assert "only 89%" in check(0.89, 0.80, 0.80).serving_warning()
    assert "6 points off" in check(0.99, 0.80, 0.86).serving_warning()
    assert check(0.9, 0.7, 0.7).headline().startswith("if served by generation: valid 90%, accuracy 70%")
    assert MIN_VALID_RATE == 0.9


def test_the_task_files_contract_is_used_unless_the_command_line_sets_one(capsys, tmp_path: Path) -> None:
    task = colours_task_file(tmp_path)
    task.write_text(task.read_text() + "serve: generate\n")
    run_dir, _, err = _optimize(capsys, tmp_path, task, "--optimizer", "random")
    assert _unwrapped(err).startswith(contract_line("generate", declared=True))
    assert json.loads((run_dir / "config.json").read_text())["serve"] == "generate"
    run_dir, _, err = _optimize(capsys, tmp_path, task, "--optimizer", "random", "--scoring", "logit")  # the alias
    assert _unwrapped(err).startswith(contract_line("logprobs", declared=True))
    assert json.loads((run_dir / "verdict.json").read_text())["serve"] == "logprobs"


def test_scoring_is_an_alias_and_one_field_decides() -> None:
    assert RunConfig(scoring="generate").serve == "generate"
    assert RunConfig(scoring="calibrated").contract == "logprobs" and RunConfig(scoring="logit").scoring == "logit"
    assert RunConfig(serve="generate").scoring == "generate" and RunConfig().contract == "choice"
    assert "scoring" not in RunConfig(scoring="logit").model_dump()
    with pytest.raises(ValueError, match="scoring 'generate' means serve 'generate', but serve is 'choice'"):
        RunConfig(scoring="generate", serve="choice")


@pytest.mark.parametrize("argv,message", [
    (["--serve", "generate", "--scoring", "logit"], "--scoring logit means --serve logprobs, not generate"),
    (["--scoring", "sample"], "unknown --scoring 'sample'"),
])
def test_contradicting_contract_options_are_one_line(capsys, tmp_path: Path, argv: list[str], message: str) -> None:
    assert main(["optimize", "--task", str(colours_task_file(tmp_path)), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_old_run_directory_without_serve_loads_and_reports(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, optimizer="random", check_generation=0)
    result = run_study(config, backend=generating_oracle(config))
    path = result.run_dir / "config.json"
    old = json.loads(path.read_text())
    del old["serve"]
    path.write_text(json.dumps({**old, "scoring": "logit"}))  # as runs wrote it before the contract
    assert RunConfig.model_validate_json(path.read_text()).contract == "logprobs"
    (result.run_dir / "report.html").unlink()
    write_page(result.run_dir, html_page(result.run_dir))
    assert "serve logprobs" in (result.run_dir / "report.html").read_text()


def test_compare_and_evaluate_state_the_contract(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = colours_task_file(tmp_path)
    monkeypatch.setattr(comparison, "build_backend", generating_oracle)
    assert main(["compare", "--task", str(task), "--optimizers", "random,reflect", "--seeds", "1", "--serve",
                 "generate", *SIZES, "--runs-dir", str(tmp_path / "compare")]) == 0
    compare_dir, = (tmp_path / "compare").glob("*-colours-compare")
    report = (compare_dir / "report.md").read_text()
    assert "serving contract `serve: generate`" in report and "held-out verdict scored by generation" in report
    assert "serve generate (verdicts by generation)" in (compare_dir / "report.html").read_text()
    for arm_config in compare_dir.rglob("config.json"):
        run = json.loads(arm_config.read_text())
        assert run.get("serve", run.get("run", {}).get("serve")) == "generate"
    for trials in compare_dir.rglob("trials.jsonl"):
        assert not any(_offsets(t.get("spec", {})) for t in _trials(trials.parent))
    (tmp_path / "prompts.yaml").write_text("- 'Item: {text}\nColour:'\n- 'Item: {text}\nLabel:'\n")
    # evaluate builds its model from the shared settings, without split sizes: the oracle over the same draw.
    monkeypatch.setattr(evaluate, "build_backend", lambda _: generating_oracle(oracle_config(tmp_path)))
    capsys.readouterr()
    assert main(["evaluate", "--task", str(task), "--prompts", str(tmp_path / "prompts.yaml"), "--serve", "generate",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--runs-dir",
                 str(tmp_path / "evaluate")]) == 0
    assert "generate accuracy" in capsys.readouterr().out
    evaluate_dir = next((tmp_path / "evaluate").glob("*-evaluate-*"))
    assert "Serving contract `serve: generate`" in (evaluate_dir / "report.md").read_text()
    assert "serve generate, scored by generation" in (evaluate_dir / "report.html").read_text()


class LabelsSharingAFirstToken(CountingBackend):
    """Every label continuation starts with the same token: no `logit_bias` can shift one label apart."""

    def first_tokens(self, texts):
        return [7] * len(texts)


def test_choice_keeps_offsets_only_where_logit_bias_reproduces_them(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, serve="choice", check_generation=0)
    one_token = run_study(config, backend=oracle_for(config))  # the oracle's labels are one token each
    assert any(_offsets(t.get("spec", {})) for t in one_token.trials.load())
    two_tokens = LabelsSharingAFirstToken(oracle_for(config).inner)
    messages: list[str] = []

    class Console:
        quiet = False

        def print(self, text: str, **_: object) -> None:
            messages.append(str(text))

    result = run_study(config.model_copy(update={"runs_dir": str(tmp_path / "two")}), backend=two_tokens,
                       console=Console())  # type: ignore[arg-type]
    assert not any(_offsets(t.get("spec", {})) for t in result.trials.load())
    assert not _offsets(json.loads((result.run_dir / "best_prompt.json").read_text())["spec"])
    assert sum("logit_bias cannot shift the labels apart" in m for m in messages) == 1  # said once


class OffersCalibratedTwin(IncumbentSearch):
    """Test double: asks for a batch-calibrated copy of the baseline, as any optimizer might."""

    name = "offers-calibrated-twin"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.twin = spec_candidate(self.baseline.spec.with_updates(label_bias=(0.5, -0.2, -0.3)), "t")
        self.asks = iter([self.baseline, self.twin])

    def ask(self) -> TrialRequest | None:
        candidate = next(self.asks, None)
        return None if candidate is None else TrialRequest(candidate, tuple(self.context.dev_ids))

    def ranking(self):
        return [self.twin, self.baseline]


def test_the_driver_refuses_label_offsets_under_generate_for_any_optimizer(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STRATEGIES, "offers-calibrated-twin", optimizer_entry(OffersCalibratedTwin, Reach(lists=True)))
    config = oracle_config(tmp_path, optimizer="offers-calibrated-twin", serve="generate")
    result = run_study(config, backend=generating_oracle(config))
    assert result.outcome.rejected == {"offsets": 1}
    assert [t["candidate_id"] for t in result.trials.load()] == [result.baseline.id]
    assert result.verdict.shipped.id == result.baseline.id
    assert "carried label offsets the serving contract cannot apply" in (result.run_dir / "report.md").read_text()


def test_reflect_refuses_calibration_asked_for_under_generate(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, serve="generate", optimizer_options={"calibration": "batch"})
    with pytest.raises(UserError, match="reflect: --option calibration=batch races calibrated prompts"):
        run_study(config, backend=generating_oracle(config))


def test_the_readme_example_runs_under_serve_generate_and_a_budget_error_names_the_budget_to_pass(
        tmp_path: Path) -> None:
    """The README's 120-row example under serve generate: --budget 120 left reflect's search 60 calls once the
    finalists' rescoring was kept back, too few to race on 20 dev examples. The search now generates itself and
    keeps nothing back, so 120 runs; a budget below a check names the --budget that passes."""
    def check(budget: int) -> None:
        config = RunConfig(task=str(README_TASK), serve="generate", budget=budget,
                           train_size=30, dev_size=30, test_size=30, runs_dir=str(tmp_path))
        task = load_run_task(config)
        checked_search(config, task, load_space(config, task))

    check(120)
    with pytest.raises(UserError, match=r"reflect: the budget 79 cannot race .* raise --budget to at least 80$"):
        check(79)
    with pytest.raises(UserError, match="one full dev evaluation needs 30 calls; raise --budget to at least 30 or"):
        check(29)


def test_the_generation_settings_are_pinned_in_one_place(tmp_path: Path) -> None:
    from prompttune.scoring.evaluator import COT_MAX_NEW_TOKENS, MAX_NEW_TOKENS

    assert (GENERATION.temperature, MAX_NEW_TOKENS, COT_MAX_NEW_TOKENS) == (0.0, GENERATION.max_tokens,
                                                                           GENERATION.cot_max_tokens)
    assert "exactly one label" in GENERATION.extraction
    with pytest.raises(ValueError, match="--serve generate pins generation at 16 new tokens"):
        EvaluateConfig(serve="generate", max_new_tokens=32)
    assert EvaluateConfig(serve="generate").scoring == "generate" and EvaluateConfig(serve="choice").scoring == "choice"
    assert load_run_task(oracle_config(tmp_path)).serve is None


@pytest.mark.integration
def test_serve_generate_with_the_embedded_model(data_dir: Path, tmp_path: Path, embedded_model) -> None:
    """The real model under `serve: generate`: no trial carries offsets, the search and the verdict generate, and
    `evaluate --serve generate` makes the same requests (its cache is the run's) and gives the verdict's accuracies
    on the same test examples."""
    config = RunConfig(task="agnews", data_dir=str(data_dir), serve="generate", optimizer="random", budget=80,
                       train_size=10, dev_size=10, test_size=8, runs_dir=str(tmp_path))
    result = run_study(config, backend=embedded_model)
    assert not any(_offsets(t.get("spec", {})) for t in result.trials.load())
    assert result.finalists is None and result.ledger.calls_by_kind.keys() <= {"generate", "propose", "critique"}
    assert result.confirm_ledger.calls_by_kind.keys() == {"generate"}
    verdict = result.verdict
    prompts = [NamedPrompt(role, candidate.spec, role) for role, candidate in
               (("baseline", verdict.baseline), ("dev winner", verdict.dev_winner))]
    evaluation = run_evaluation(EvaluateConfig(task="agnews", data_dir=str(data_dir), serve="generate", split="test",
                                               train_size=10, dev_size=10, test_size=8,
                                               runs_dir=str(tmp_path / "evaluate"),
                                               cache=str(result.run_dir / "cache.sqlite")),
                                backend=embedded_model, prompts=prompts)
    assert evaluation.ledger.calls_by_kind.keys() <= {"generate"}  # the same requests: the run's answers
    assert evaluation.example_ids == list(verdict.test_ids)
    leader = verdict.leader_confirmation
    assert [s.accuracy for s in evaluation.settings[0].scores] == [leader.baseline_accuracy, leader.best_accuracy]
    assert "valid responses (generation)" in (result.run_dir / "report.md").read_text()


@pytest.mark.integration
def test_serve_choice_with_the_embedded_model(data_dir: Path, tmp_path: Path, embedded_model) -> None:
    """The real model under `serve: choice`: reflect searches and the verdict confirms by constrained decoding (no
    label-score call at all), its calibrated twins carry first-token logit_bias offsets, and every test record's
    label is the one the backend's constrained decoding gives for that prompt."""
    config = RunConfig(task="agnews", data_dir=str(data_dir), serve="choice", budget=160, train_size=16,
                       dev_size=24, test_size=12, runs_dir=str(tmp_path))
    result = run_study(config, backend=embedded_model)
    assert result.ledger.calls_by_kind.keys() <= {"choice", "propose", "critique"}
    assert result.confirm_ledger.calls_by_kind.keys() == {"choice"}
    assert any(t.get("spec", {}).get("label_bias") for t in result.trials.load())  # calibrated twins were raced
    verdict = result.verdict
    test = {ex.id: ex for ex in task_of(config).splits["test"]}
    shipped = verdict.shipped.spec
    demos = select_demos(shipped, {ex.id: ex for ex in task_of(config).splits["train"]})
    prompts = [render(shipped, test[i], demos) for i in verdict.test_ids]
    requests = [ChoiceRequest(embedded_model.to_text(p), p.label_continuations, choice_bias(shipped)) for p in prompts]
    assert [r.pred for r in verdict.records[verdict.shipped.id]] == [c.choice for c in embedded_model.choose(requests)]
    assert "constrained decoding" in (result.run_dir / "report.md").read_text()


def test_under_generate_reflect_critiques_what_the_model_wrote(tmp_path: Path) -> None:
    """The search generates, so reflect's critic reads the answers the model wrote, invalid ones included, not
    label margins that generation never shows."""
    def answer(text: str) -> str:  # half the items answered off the list, whatever the prompt
        if "painted " not in text:
            return "Name the colour of the item."
        colour = text.rsplit("painted ", 1)[1].split()[0]
        return "Sure, a purple one." if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 2 else f"It is {colour}."

    config = oracle_config(tmp_path, serve="generate", budget=400)
    backend = oracle_for(config)
    backend.inner.proposals = answer
    asked: list[str] = []
    generate = backend.generate

    def watched(requests):
        asked.extend(r.text for r in requests)
        return generate(requests)

    backend.generate = watched  # type: ignore[method-assign]
    run_study(config, backend=backend)
    critiques = [text for text in asked if "fails to label these" in text or "labels these texts as" in text]
    assert critiques and any("the model answered 'Sure, a purple one.'" in t for t in critiques)
    assert not any(" nats)" in t for t in critiques)


class PlainTextOnly(CountingBackend):
    """A target without a chat template: chat prompts cannot reach it as the model's template lays them out."""

    @property
    def renders_chat(self) -> bool:
        return False


def test_serve_generate_searches_the_chat_template_where_the_target_renders_one(tmp_path: Path) -> None:
    generate, logprobs = (oracle_config(tmp_path, serve=serve) for serve in ("generate", "logprobs"))
    chat = [d for d in load_space(generate, task_of(generate)).dimensions if d.name == "chat"]
    assert [d.values for d in chat] == [(False, True)]  # the baseline's setting first: the baseline is unchanged
    assert "chat" not in [d.name for d in load_space(logprobs, task_of(logprobs)).dimensions]
    (tmp_path / "space.yaml").write_text("name: colours-words\ninstructions: ['', 'Name the colour: {labels}.']\n")
    spaced = generate.model_copy(update={"space": str(tmp_path / "space.yaml")})
    assert "chat" not in [d.name for d in load_space(spaced, task_of(spaced)).dimensions]  # a space file says itself

    result = run_study(generate, backend=PlainTextOnly(generating_oracle(generate).inner))
    assert result.outcome.rejected.get("chat", 0) > 0
    assert not any(t.get("dimensions", {}).get("chat") for t in result.trials.load())  # no chat prompt scored
    assert "used a chat template the target does not render" in (result.run_dir / "report.md").read_text()
