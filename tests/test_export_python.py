"""`export --to python`: one stdlib-only module that classifies as the run's verdict scored. It imports
where prompttune cannot, and against the llama.cpp server the run itself used it gives the run's label on
every test example, so the run's test accuracy, for a calibrated log-probs run and a generated one."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console

from prompttune.backends.factory import build_backend
from prompttune.backends.transformers_setup import EMBEDDED_MODEL
from prompttune.core.errors import UserError
from prompttune.engine.study import run_study
from prompttune.export.writers import export
from prompttune.scoring import contract, extraction
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import label_bias
from prompttune.search_spaces import default_space
from tests.llama_server import llama_server  # noqa: F401  (session fixture)
from tests.support import oracle_config, task_of


def _run_dir(tmp_path: Path, **spec_changes: object) -> Path:
    """A run directory as optimize leaves it (config.json, best_prompt.json), on the oracle's colours task."""
    config = oracle_config(tmp_path, serve="logprobs")  # the contract these modules state
    task = task_of(config)
    demos = task.splits["train"][:2]
    spec = default_space(task).default_candidate().spec.with_updates(demo_ids=tuple(e.id for e in demos),
                                                                     **spec_changes)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(config.model_dump_json())
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    return run


def _load(path: Path) -> ModuleType:
    loader = importlib.util.spec_from_file_location(f"exported_{path.parent.name}", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def test_the_module_imports_and_runs_without_prompttune(tmp_path: Path) -> None:
    [path] = export(_run_dir(tmp_path, label_bias=(-0.5, -1.25, -1.75)), "python", tmp_path / "out")
    # -I -S: no PYTHONPATH, no site-packages (so no prompttune, no third-party library), no script dir; the
    # working directory is not the repository either.
    check = ("import importlib.util, sys\n"
             "assert importlib.util.find_spec('prompttune') is None, 'prompttune is importable'\n"
             f"sys.path.insert(0, {str(path.parent)!r})\n"
             "import classifier\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prompttune', 'httpx', 'requests', 'numpy')))\n"
             "print(classifier.CONTRACT['predict'], classifier.CONTRACT['label_bias'])\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", check], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "batch_calibration [-0.5, -1.25, -1.75]"]


def test_the_module_states_its_contract_and_copies_the_run_extraction(tmp_path: Path) -> None:
    [path] = export(_run_dir(tmp_path, label_bias=(-0.5, -1.25, -1.75)), "python", tmp_path / "out")
    module = _load(path)
    assert "Serving contract: logprobs" in module.__doc__ and "green -1.2500" in module.__doc__
    assert "top_logprobs" in module.__doc__ and "ContractError" in module.__doc__
    assert module.FINAL_ANSWER.pattern == extraction.FINAL_ANSWER.pattern
    assert module.FINAL_ANSWER.flags == extraction.FINAL_ANSWER.flags
    for text in ("It is red.", "Red or blue", "final answer: green", "nothing"):
        assert module.extract_label(text, ["red", "green", "blue"]) == extraction.extract_label(
            text, ["red", "green", "blue"])
    # The input goes in its slot in one pass, braces and other fields' placeholders kept as they are.
    module.CONTRACT["input_fields"] = ["text"]
    assert module._fill([["text", "A {text} "], ["field", "text"]], {"text": "{text} {}"}) == "A {text} {text} {}"
    with pytest.raises(ValueError, match="missing input field"):
        module._fill([["field", "text"]], {"review": "x"})


def test_a_chat_label_whose_first_token_is_not_listed_is_refused_as_the_run_refuses_it(tmp_path: Path) -> None:
    module = _load(export(_run_dir(tmp_path), "python", tmp_path / "out")[0])
    classifier = module.Classifier("http://127.0.0.1:9/v1", model="m")
    classifier.api, classifier.mode, classifier.top_k = "chat", "first_token", 20
    answer = {"choices": [{"logprobs": {"content": [{"top_logprobs": [
        {"token": "red", "logprob": -0.1}, {"token": "green", "logprob": -2.0}]}]}}]}
    classifier._post = lambda path, body: answer
    with pytest.raises(module.ContractError, match="label 'blue' .*not among the top-20 first answer tokens"):
        classifier.classify({"text": "item 1"})


def test_dspy_refuses_a_contract_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot run this contract") as raised:
        export(_run_dir(tmp_path, label_bias=(-0.5, -1.25, -1.75)), "dspy", tmp_path / "out")
    assert "\n" not in str(raised.value) and "--to python" in str(raised.value)


def _served_run(tmp_path: Path, data_dir: Path, url: str, serve: str, dev_size: int, budget: int,
                calibrate: bool = False):
    """A small run of the random search on sst2 against the llama.cpp server (as a user with `--backend
    openai` makes it), and its test records; `calibrate`: every prompt of the space contextually calibrated."""
    config = oracle_config(tmp_path, task="sst2", data_dir=str(data_dir), backend="openai", base_url=[url],
                           model=EMBEDDED_MODEL, optimizer="random", budget=budget, train_size=16,
                           dev_size=dev_size, test_size=20, serve=serve, concurrency=2, check_generation=0)
    space = default_space(task_of(config))
    space.base = replace(space.base, calibrate=calibrate)
    result = run_study(config, space=space, console=Console(quiet=True))
    rows = [json.loads(line) for line in (result.run_dir / "test_records.jsonl").read_text().splitlines()]
    return result, rows


def _reproduces(result, rows: list[dict], tmp_path: Path, url: str) -> ModuleType:
    """The module exported for the shipped prompt, and for the dev winner (best_prompt.json naming it instead),
    gives each one's label in the run's test records on every example, so its test accuracy."""
    verdict, test = result.verdict, {ex.id: ex for ex in task_of(result.config).splits["test"]}
    best = result.run_dir / "best_prompt.json"
    modules = []
    checked = {verdict.shipped.id: (verdict.shipped, verdict.shipped_confirmation.best_accuracy)}
    checked.setdefault(verdict.dev_winner.id, (verdict.dev_winner, verdict.leader_confirmation.best_accuracy))
    for candidate, accuracy in checked.values():
        best.write_text(json.dumps({**json.loads(best.read_text()), "spec": asdict(candidate.spec)}))
        module = _load(export(result.run_dir, "python", tmp_path / f"exported-{candidate.id}")[0])
        words = candidate.spec.label_words
        labels = [module.classify(test[row["example_id"]].fields, base_url=url) for row in rows]
        assert labels == [None if row["pred"][candidate.id] is None else words[row["pred"][candidate.id]]
                          for row in rows]
        assert sum(label is not None and words.index(label) == row["gold"]
                   for label, row in zip(labels, rows)) / len(rows) == accuracy
        modules.append(module)
    return modules[0]


@pytest.mark.integration
def test_a_calibrated_logprobs_run_is_reproduced_by_its_module(
        tmp_path: Path, data_dir: Path, llama_server: str) -> None:  # noqa: F811
    result, rows = _served_run(tmp_path, data_dir, llama_server, "logprobs", dev_size=6, budget=12,
                               calibrate=True)
    module = _reproduces(result, rows, tmp_path, llama_server)
    # The offsets were in play: the prompt's bias over the content-free inputs is far from uniform.
    assert module.CONTRACT["predict"] == "contextual_calibration"
    assert max(abs(p - 0.5) for p in module._default.contextual_bias()) > 0.05


@pytest.mark.integration
def test_a_generated_run_is_reproduced_by_its_module(tmp_path: Path, data_dir: Path, llama_server: str) -> None:  # noqa: F811
    # A small dev split: generation is slow on one server thread.
    result, rows = _served_run(tmp_path, data_dir, llama_server, "generate", dev_size=4, budget=32)
    _reproduces(result, rows, tmp_path, llama_server)


@pytest.mark.integration
def test_a_calibrated_choice_run_is_reproduced_by_its_module_under_the_servers_grammar(
        tmp_path: Path, data_dir: Path, llama_server: str) -> None:  # noqa: F811
    """AG News's labels (` Sci/Tech` is several tokens) decoded by the llama.cpp server under its grammar, with
    batch offsets as a first-token logit_bias that flips some answers: the exported module, calling the same
    server with a grammar and that logit_bias, gives the run's label on every test example."""
    config = oracle_config(tmp_path, task="agnews", data_dir=str(data_dir), backend="openai", base_url=[llama_server],
                           model=EMBEDDED_MODEL, serve="choice", train_size=16, dev_size=8, test_size=20)
    test = task_of(config).splits["test"]
    ids = [ex.id for ex in test]
    backend = build_backend(config)
    assert "grammar" in backend.capabilities().constraints and backend.capabilities().logit_bias
    evaluator = Evaluator(backend, {ex.id: ex for ex in test}, {}, ResultCache(":memory:"), BudgetLedger(),
                          scoring="choice")
    spec = default_space(task_of(config)).default_candidate().spec.with_updates(
        label_words=("World", "Sports", "Business", "Sci/Tech"))  # AG News's own names
    raw = evaluator.evaluate(spec, ids)
    spec = spec.with_updates(label_bias=tuple(round(x, 6) for x in label_bias(raw)))
    assert contract.admits("choice", backend, spec)
    calibrated = evaluator.evaluate(spec, ids)
    assert any(a.pred != b.pred for a, b in zip(raw, calibrated))  # the logit_bias has work to do
    backend.close()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(config.model_dump_json())
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    module = _load(export(run, "python", tmp_path / "out")[0])
    assert module.CONTRACT["constrained"]["logit_bias"]
    labels = [module.classify(example.fields, base_url=llama_server) for example in test]
    assert labels == [spec.label_words[r.pred] for r in calibrated]
    assert module._default._constraint == "grammar"
