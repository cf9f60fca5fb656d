"""The DSPy bridge: DSPy's calls are charged to the arm's ledger, the cap stops DSPy, each DSPy
optimizer runs with the settings its documentation recommends (sized to the cap where DSPy leaves
that open), and the program it chose is confirmed by prompttune like every other arm's winner."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")

from dspy.utils.exceptions import AdapterParseError  # noqa: E402

from prompttune.backends.backend import Backend  # noqa: E402
from prompttune.cli import main  # noqa: E402
from prompttune.core.errors import UserError  # noqa: E402
from prompttune.core.types import Record  # noqa: E402
from prompttune.dspy_bridge import DSPY_ARMS  # noqa: E402
from prompttune.dspy_bridge.adapter import PromptSpecAdapter  # noqa: E402
from prompttune.dspy_bridge.arm import Sizes, exact_label  # noqa: E402
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine  # noqa: E402
from prompttune.dspy_bridge.gepa import feedback_text  # noqa: E402
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS  # noqa: E402
from prompttune.dspy_bridge.program import ProgramMapping  # noqa: E402
from prompttune.engine.comparison import CompareRequest, check_compare, run_compare  # noqa: E402
from prompttune.export.writers import export  # noqa: E402
from prompttune.optimizers.proposer import LABEL_CLAUSE, Proposer  # noqa: E402
from prompttune.optimizers.registry import lookup  # noqa: E402
from prompttune.scoring.cache import ResultCache  # noqa: E402
from prompttune.scoring.evaluator import Evaluator  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.scoring.metered_cache import MeteredCache  # noqa: E402
from prompttune.scoring.metering import Meter  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402
from prompttune.testing import colours_task_file  # noqa: E402
from tests.support import CountingBackend, oracle_config, oracle_for, task_of  # noqa: E402


def _bridge(tmp_path: Path, cap: int, seed: int = 0):
    config = oracle_config(tmp_path)
    task, backend, ledger = task_of(config), oracle_for(config), BudgetLedger(cap_calls=cap)
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    evaluator = Evaluator(backend, visible, {e.id: e for e in task.splits["train"]},
                          MeteredCache(ResultCache()), ledger)
    base = default_space(task).default_candidate().spec
    mapping = ProgramMapping.build(base, task.input_fields, task.splits["train"], task.splits["dev"])
    engine = MeteredEngine(evaluator, seed=seed)
    lm = dspy.LM("prompttune/oracle", engine=engine, cache=False, num_retries=0, max_tokens=96)
    return task, backend, ledger, mapping, dspy.context(lm=lm, adapter=PromptSpecAdapter(mapping, engine))


class RecordingBackend(CountingBackend):
    """Counts requests and keeps every generation request (its temperature and seed)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.generated = []

    def generate(self, requests):
        self.generated += requests
        return super().generate(requests)


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


def _samples(tmp_path: Path, seed: int, n: int = 3) -> tuple[list[str], BudgetLedger, CountingBackend]:
    _, backend, ledger, _, context = _bridge(tmp_path / f"s{seed}", cap=50, seed=seed)
    with context:
        sampled = dspy.Predict("question -> answer", n=n, temperature=1.0)(question="Name a colour.")
        greedy = [dspy.Predict("question -> answer")(question="Name a colour.").answer for _ in range(2)]
    assert greedy[0] == greedy[1]  # asked twice, generated and charged once
    return sampled.completions.answer, ledger, backend


def test_sampled_proposals_are_seeded_distinct_and_each_one_charged(tmp_path: Path) -> None:
    texts, ledger, backend = _samples(tmp_path, seed=0)
    assert len(set(texts)) == 3  # DSPy's n samples of one request differ...
    assert ledger.calls_by_kind["propose"] == backend.calls == 4  # ...each is charged, the greedy reply once
    assert _samples(tmp_path, seed=0)[0] == texts  # the same arm seed draws the same texts
    assert set(_samples(tmp_path, seed=1)[0]).isdisjoint(texts)  # another seed, other texts


def test_a_proposal_is_cached_under_its_temperature_and_seed(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend, ledger = oracle_for(config), BudgetLedger()
    proposer = Proposer(backend, Meter(MeteredCache(ResultCache()), ledger))
    asks = [(0.0, 0), (1.0, 7), (1.0, 7), (1.0, 8), (1.4, 7), (0.0, 0)]
    replies = [proposer.complete("Write an instruction.", 32, temperature=t, seed=s) for t, s in asks]
    assert backend.calls == ledger.calls == 4 and replies[1] == replies[2] and replies[0] == replies[5]
    assert len({replies[1], replies[3], replies[4]}) == 3


def test_a_program_and_its_promptspec_describe_the_same_prompt(tmp_path: Path) -> None:
    task, _, _, mapping, _ = _bridge(tmp_path, cap=1)
    demos = task.splits["train"][3:6]
    spec = mapping.base.with_updates(instruction="Pick one of {labels}.", demo_ids=tuple(e.id for e in demos))
    program = mapping.program(spec, demos)
    assert program.signature.instructions == "Pick one of red, green, blue."
    assert mapping.spec_of(program) == spec.with_updates(instruction="Pick one of red, green, blue.")
    assert mapping.spec_of(mapping.program(mapping.base, [])) == mapping.base  # keeps its {labels}


def test_a_dspy_instruction_that_drops_the_labels_gets_them_back(tmp_path: Path) -> None:
    _, _, _, mapping, _ = _bridge(tmp_path, cap=1)
    assert mapping.spec("Say which colour the item is.", []).instruction == \
        "Say which colour the item is." + LABEL_CLAUSE
    assert mapping.spec("Is it red, green or blue?", []).instruction == "Is it red, green or blue?"


def test_a_reply_without_field_markers_fills_the_first_text_field(tmp_path: Path) -> None:
    _, _, _, mapping, _ = _bridge(tmp_path, cap=1)
    signature = dspy.Signature("basic_instruction -> proposed_instruction, proposed_prefix_for_output_field")
    adapter = PromptSpecAdapter(mapping, None)
    assert adapter.parse(signature, " Name the colour. ") == {"proposed_instruction": "Name the colour.",
                                                              "proposed_prefix_for_output_field": ""}
    with pytest.raises(AdapterParseError):  # not all text: no guessing
        adapter.parse(dspy.Signature("question -> advice: dict[str, str]"), "be careful")


def test_gepa_feedback_names_gold_prediction_invalid_output_and_label_scores() -> None:
    labels = ("red", "green", "blue")

    def record(pred, logprobs=None, text=None):
        return Record("x", 1, pred, logprobs, text, 10, 1, False)

    assert feedback_text(record(1), labels) == "Correct: the answer 'green' is the correct label."
    wrong = feedback_text(record(2, (-2.0, -1.5, -0.2)), labels)
    assert wrong.startswith("Wrong: the answer was 'blue', the correct label is 'green'.")
    assert wrong.endswith("log-probabilities: blue -0.20, green -1.50, red -2.00.")
    assert "output 'purple' names none of the labels (red, green, blue)" in feedback_text(record(None, None, "purple"),
                                                                                           labels)


def test_dspy_settings_follow_dspy_and_the_cap() -> None:
    assert set(DSPY_ARMS) == set(DSPY_OPTIMIZERS)
    for arm in DSPY_ARMS:  # the options same-space mode holds an arm with are options it takes
        for options in lookup(arm).reach.holds.values():
            DSPY_OPTIMIZERS[arm](100_000, Sizes(1000, 300), dict(options))
    # MIPROv2: auto=None with as many candidates as the cap pays for at MIPROv2's recommended trials (16),
    # then trials until its estimate reaches 1.1x the cap (it spends less than the estimate; the cap stops it).
    sized = DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {})
    assert sized.valset_size == 100 and (sized.num_candidates, sized.num_trials) == (11, 19)
    assert "auto=None sized to the cap" in sized.description and "estimated 1085 calls" in sized.description
    assert "past the cap, which stops it near its end" in sized.description
    huge = DSPY_OPTIMIZERS["dspy-mipro"](100_000, Sizes(1000, 300), {})  # trials stop once they add no calls
    assert huge.num_candidates == huge.MOST_CANDIDATES and huge.num_trials < 10_000
    roomier = DSPY_OPTIMIZERS["dspy-mipro"](2000, Sizes(1000, 300), {})
    assert roomier.num_candidates > sized.num_candidates and roomier.num_trials > sized.num_trials
    # DSPy's presets stay available, chosen by option and described as such.
    light = DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {"auto": "light"})
    assert light.valset_size == 100 and "preset auto='light', chosen by option" in light.description
    assert "10 trials" in light.description and (light.num_candidates, light.num_trials) == (None, None)
    medium = DSPY_OPTIMIZERS["dspy-mipro"](5000, Sizes(1000, 300), {"auto": "medium", "valset_size": 300})
    assert medium.valset_size == 300 and "12 demo sets" in medium.description
    given = DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {"num_candidates": 4, "num_trials": 6})
    assert (given.num_candidates, given.num_trials) == (4, 6) and "given" in given.description
    with pytest.raises(UserError, match="auto=null takes both num_candidates and num_trials, or neither"):
        DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {"num_candidates": 4})
    with pytest.raises(UserError, match="auto=light sets num_candidates and num_trials itself"):
        DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {"auto": "light", "num_trials": 4})
    with pytest.raises(UserError, match="dspy-mipro: unknown option 'num_trails'"):
        DSPY_OPTIMIZERS["dspy-mipro"](1000, Sizes(1000, 300), {"num_trails": 4})
    # BFRS: (n + 3) programs on a 100-example valset, n + 1 bootstraps of about 8 calls.
    assert DSPY_OPTIMIZERS["dspy-bfrs"](1000, Sizes(1000, 300), {}).candidates == 6
    assert DSPY_OPTIMIZERS["dspy-bfrs"](100_000, Sizes(1000, 300), {}).candidates == 16  # DSPy's default
    # GEPA: its metric budget is the cap; a stopper ends it when a rejected iteration no longer fits.
    gepa = DSPY_OPTIMIZERS["dspy-gepa"](1000, Sizes(1000, 300), {})
    assert gepa.max_metric_calls == 1000 and gepa.iteration == 7
    # COPRO: the plan that spends most with depth >= 2 (depth 1 refines nothing), the wider on a tie.
    copro = DSPY_OPTIMIZERS["dspy-copro"](1000, Sizes(1000, 300), {})
    assert (copro.breadth, copro.depth) == (3, 3)  # 908 calls; 9 x 1 would spend as much and refine nothing
    assert (DSPY_OPTIMIZERS["dspy-copro"](2000, Sizes(1000, 300), {}).breadth,
            DSPY_OPTIMIZERS["dspy-copro"](2000, Sizes(1000, 300), {}).depth) == (9, 2)  # 1,817 calls (10 x 1: 1,009)
    roomy = DSPY_OPTIMIZERS["dspy-copro"](4000, Sizes(1000, 300), {})
    assert (roomy.breadth, roomy.depth) == (10, 3)  # DSPy's own, the most it runs
    assert DSPY_OPTIMIZERS["dspy-copro"](250, Sizes(1000, 300), {}).depth == 1  # 2 x 2 needs 403
    assert DSPY_OPTIMIZERS["dspy-simba"](5000, Sizes(1000, 300), {}).steps == 8


@pytest.mark.parametrize("arm,cap,message", [
    ("dspy-copro", 200, "dspy-copro needs at least 201 calls (breadth 2, depth 1 on a 100-example valset); "
                        "the cap is 200: raise --budget to at least 201"),
    # 107 calls would still fail: a full evaluation of the 150-example dev split needs 150
    ("dspy-gepa", 106, "dspy-gepa needs at least 107 calls (the seed program on a 100-example valset and one "
                       "reflection on 3 train examples); the cap is 106: raise --budget to at least 150"),
    ("dspy-simba", 400, "dspy-simba needs at least 406 calls (1 step of 6 candidates on mini-batches of 32, "
                        "validated on 100 train examples); the cap is 400: raise --budget to at least 406"),
])
def test_an_arm_the_cap_cannot_pay_for_is_one_line_before_any_model_call(arm: str, cap: int, message: str,
                                                                          tmp_path: Path) -> None:
    config = oracle_config(tmp_path, budget=cap, train_size=120, dev_size=150)
    backend = oracle_for(config)
    with pytest.raises(UserError) as error:
        run_compare(CompareRequest(config, ["random", arm], [0], {}, backend=backend))
    assert str(error.value) == message and backend.calls == 0
    assert not (tmp_path / "runs").exists()


def test_the_cli_names_the_arm_its_minimum_and_the_cap(capsys, tmp_path: Path) -> None:
    code = main(["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", "random,dspy-copro",
                 "--budget", "100", "--train-size", "60", "--dev-size", "60", "--test-size", "60",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "error: dspy-copro needs at least 121 calls (breadth 2, depth 1 on a 60-example " \
                                "valset); the cap is 100: raise --budget to at least 121"


def test_under_serve_generate_the_arm_names_the_budget_to_pass(tmp_path: Path) -> None:
    """The search's cap is the whole budget under serve generate too (it keeps nothing back): the error names the
    --budget that pays for the arm's smallest run."""
    def check(budget: int) -> None:
        config = oracle_config(tmp_path, budget=budget, train_size=120, dev_size=150, serve="generate")
        check_compare(CompareRequest(config, ["random", "dspy-copro"], [0], {}))

    with pytest.raises(UserError) as error:
        check(200)
    assert str(error.value) == ("dspy-copro needs at least 201 calls (breadth 2, depth 1 on a 100-example valset); "
                                "the cap is 200: raise --budget to at least 201")
    check(201)


def _arm(tmp_path: Path, arm: str, budget: int, backend_for=oracle_for, options: dict | None = None,
         mode: str = "same-space", **sizes):
    config = oracle_config(tmp_path, budget=budget, **sizes)
    backend = RecordingBackend(backend_for(config).inner)
    # allow_underspend: spend at tiny caps is not what these tests are about
    result = run_compare(CompareRequest(config, [arm], [0], {arm: options} if options else {}, backend=backend,
                                        mode=mode, allow_underspend=True))
    run = result.runs[0]
    # Held out and capped: the verdict scored test, the ledger never passed the cap, every check passed.
    assert run.search.calls <= budget and run.confirmation.n == config.test_size
    assert all(check.status != "failed" for check in result.checks), [k for k in result.checks if not k.ok]
    trials = [json.loads(line) for line in (run.run_dir / "trials.jsonl").read_text().splitlines()]
    return run, backend, trials


def test_dspy_mipro_validates_on_a_drawn_valset_and_samples_its_proposals(tmp_path: Path) -> None:
    def label_free(config):
        oracle = oracle_for(config)
        oracle.inner.proposals = lambda text: "Say which colour it is."
        return oracle

    run, backend, trials = _arm(tmp_path, "dspy-mipro", 500, label_free, train_size=100, dev_size=150)
    assert trials and all(t["n"] == 100 for t in trials)  # 100 of the 150 dev examples, as light mode asks
    sampled = [r for r in backend.generated if r.temperature == 1.0]
    # Every proposal (dataset summary, instructions) was sampled at DSPy's 1.0, each with its own seed.
    assert sampled == backend.generated and len({r.seed for r in sampled}) == len(sampled)
    assert run.search.calls_by_kind["propose"] == len(sampled) > 3
    proposed = [t["instruction"] for t in trials if t["instruction"] != run.baseline.instruction]
    assert proposed and all(i.endswith(LABEL_CLAUSE) for i in proposed)  # the label list came back


def test_dspy_gepa_reflects_on_feedback_within_the_cap(tmp_path: Path) -> None:
    run, backend, trials = _arm(tmp_path, "dspy-gepa", 200, dev_size=40)
    reflections = [r for r in backend.generated if "examples_with_feedback" in r.text]
    assert reflections and all(r.temperature == 1.0 for r in reflections)
    assert run.search.calls_by_kind["propose"] == len(backend.generated)
    assert any("the correct label is" in r.text for r in reflections)  # the metric's feedback reached it
    assert len(trials) >= 2 and "GEPA: max_metric_calls=200" in run.notes[0]
    assert run.search.calls >= 200 - 6 or run.stopped_by_budget  # it ran until the cap was (nearly) spent


@pytest.mark.parametrize("arm", ["dspy-gepa", "dspy-mipro"])
def test_a_dspy_arm_writes_its_proposals_with_the_proposer_model(arm: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--proposer-model reaches DSPy's arms as it reaches prompttune's: every reflection, summary and
    instruction is generated by the proposer model (charged to the arm), none by the task model."""
    from prompttune.engine import study

    config = oracle_config(tmp_path, budget=500, train_size=100, dev_size=150, proposer_model="proposer")
    task_model, proposer = RecordingBackend(oracle_for(config).inner), RecordingBackend(oracle_for(config).inner)
    monkeypatch.setattr(study, "check_proposer_backend", lambda config: None)
    monkeypatch.setattr(study, "build_proposer_backend", lambda config: proposer)
    result = run_compare(CompareRequest(config, [arm], [0], {}, backend=task_model, allow_underspend=True))
    run = result.runs[0]
    assert proposer.generated and not task_model.generated
    assert run.search.calls_by_kind["propose"] == len(proposer.generated)
    assert proposer.calls == len(proposer.generated)  # the proposer model only writes; it scores nothing


def test_dspy_copro_samples_its_breadth_at_its_temperature(tmp_path: Path) -> None:
    run, backend, trials = _arm(tmp_path, "dspy-copro", 300, dev_size=40)
    # Breadth 3, depth 2: 2 samples + the baseline, then 3 refinements written from their scores.
    assert [r.temperature for r in backend.generated] == [1.4] * 5 and "breadth=3, depth=2" in run.notes[0]
    assert len(trials) == 6 and run.search.calls == 6 * 40 + 5
    assert any("Resulting Score" in r.text for r in backend.generated)  # the second round saw the first's scores


def test_dspy_simba_appends_demos_from_train_within_the_cap(tmp_path: Path) -> None:
    options = {"trainset_size": 40, "bsize": 16, "num_candidates": 3}
    run, _, trials = _arm(tmp_path, "dspy-simba", 600, oracle_for, options, mode="native", dev_size=40)
    assert "max_steps=4" in run.notes[0] and len(trials) >= 2 and all(t["n"] == 40 for t in trials)
    assert any(t["demo_ids"] for t in trials)


def test_dspy_bfrs_arm_stopped_by_the_cap_keeps_its_best_full_dev_program(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, budget=150, dev_size=50)
    result = run_compare(CompareRequest(config, ["random", "dspy-bfrs"], [0], {}, backend=oracle_for(config),
                                        mode="native"))
    run = result.runs[1]
    assert run.stopped_by_budget and run.search.calls <= 150
    assert run.foreign_calls >= 50  # the zero-shot program is the baseline random already scored
    assert run.best_dev is not None and run.anytime and run.anytime[-1][1] == run.best_dev
    assert run.confirmation.n == config.test_size and all(check.status != "failed" for check in result.checks)
    assert (run.run_dir / "dspy_program.json").is_file() and "stopped by the cap" in " ".join(run.notes)


@pytest.mark.integration
def test_dspy_on_the_real_model_is_charged_capped_and_confirmed(data_dir: Path, tmp_path: Path,
                                                                embedded_model: Backend) -> None:
    config = oracle_config(tmp_path).model_copy(update={
        "task": "agnews", "data_dir": str(data_dir), "budget": 30, "train_size": 20, "dev_size": 12,
        "test_size": 20})
    backend = CountingBackend(embedded_model)
    result = run_compare(CompareRequest(config, ["dspy-bfrs"], [0], {}, backend=backend, mode="native"))
    run = result.runs[0]
    # Zero-shot and labeled-only programs (12 dev calls each), then bootstrapping until the cap.
    assert run.stopped_by_budget and run.search.calls == 30 and run.best_dev is not None
    # One arm, fresh cache: every charged call reached the model; then baseline + winner on test.
    assert backend.calls == run.search.calls + run.confirm_calls
    assert run.confirmation.n == 20 and all(check.status != "failed" for check in result.checks)
    with pytest.raises(UserError, match="DSPy reads the label from generated text, so it cannot run this contract"):
        export(run.run_dir, "dspy", tmp_path / "exported")  # the verdict read label log-probabilities


def test_an_empty_reply_leaves_every_text_field_empty_without_a_json_retry(tmp_path: Path, monkeypatch) -> None:
    """A 135M model may answer a proposal with nothing; DSPy would retry with JSONAdapter and, failing again, raise
    out of MIPROv2's proposer and end the arm. The adapter keeps the reply: every text field empty, one call."""
    _, backend, ledger, _, context = _bridge(tmp_path, cap=12)
    replies = backend.generate
    monkeypatch.setattr(backend, "generate", lambda requests: [
        dataclasses.replace(reply, text="") for reply in replies(requests)])
    with context:
        reply = dspy.Predict("basic_instruction -> proposed_instruction, proposed_prefix_for_output_field")(
            basic_instruction="Name the colour.")
        assert (reply.proposed_instruction, reply.proposed_prefix_for_output_field) == ("", "")
        assert ledger.calls == 1
        with pytest.raises(AdapterParseError):  # not all text: DSPy's own handling, JSON retry included
            dspy.Predict("question -> advice: dict[str, str]")(question="Name a colour.")
