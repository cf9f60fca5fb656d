"""The target is probed before any budget is spent (prompttune/backends/capabilities.py): a declared contract the
server cannot honour is one line and exit 2 before anything is charged, and `--dry-run`, the run's first lines,
config.json and the report say which contracts it honours. Fake servers (prompttune/testing/fake_openai.py)
stand in for servers with and without log-probs and constraints; the real llama.cpp server's probe is in
test_openai_backend.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from prompttune.backends.capabilities import CONSTRAINT_FORMS
from prompttune.backends.openai_backend import OpenAIBackend
from prompttune.backends.openai_chat import PLAIN_PROBE
from prompttune.backends.openai_constraints import PROBE_MESSAGES
from prompttune.cli import main
from prompttune.core.errors import UserError
from prompttune.core.types import ChoiceRequest
from prompttune.engine.study import run_study
from prompttune.testing import colours_task_file
from prompttune.testing.fake_openai import FakeServer
from tests.support import oracle_config

STARTUP_PROBES = 2  # completions the backend's start-up probe sends (next-token, then echo)
SIZES = ["--train-size", "20", "--dev-size", "20", "--test-size", "20", "--budget", "60"]


def _argv(command: str, tmp_path: Path, url: str, *options: str) -> list[str]:
    arms = ["--optimizers", "random", "--seeds", "1"] if command == "compare" else ["--optimizer", "random"]
    return [command, "--task", str(colours_task_file(tmp_path)), *SIZES, *arms, "--backend", "openai",
            "--base-url", url, "--runs-dir", str(tmp_path / "runs"), *options]


@pytest.mark.parametrize("command,options", [("optimize", []), ("compare", []), ("optimize", ["--dry-run"])])
def test_serve_logprobs_on_a_server_without_log_probs_is_one_line_before_any_spend(
        tmp_path: Path, fakes: list[FakeServer], capsys: pytest.CaptureFixture[str], command: str,
        options: list[str]) -> None:
    fakes.append(FakeServer(completions=False, max_top=0))  # chat only, and it refuses top_logprobs
    cache = tmp_path / "cache.sqlite"
    argv = _argv(command, tmp_path, fakes[0].url, "--serve", "logprobs", "--cache", str(cache), *options)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: --serve logprobs: the server at {fakes[0].url} returns no log-probs "
                            "(/v1/chat/completions without top_logprobs); it honours: generate\n")
    assert not (tmp_path / "runs").exists() and not cache.exists()  # no run directory, no cache, no ledger
    # The server answered the start-up probes and nothing else: no prompt of the task was sent.
    assert {json.dumps(body["messages"]) for body in fakes[0].chat_bodies} == {json.dumps(PLAIN_PROBE),
                                                                               json.dumps(PROBE_MESSAGES)}


def test_an_undeclared_contract_the_server_cannot_honour_says_it_is_the_default(
        tmp_path: Path, fakes: list[FakeServer], capsys: pytest.CaptureFixture[str]) -> None:
    fakes.append(FakeServer(completions=False, max_top=0))
    assert main(_argv("optimize", tmp_path, fakes[0].url)) == 2
    assert capsys.readouterr().err.startswith("error: serve choice (the default; declare another with --serve): "
                                              f"the server at {fakes[0].url} honours no exact constrained decoding")


@pytest.mark.parametrize("command", ["optimize", "compare"])
def test_dry_run_lists_the_contracts_the_target_honours(tmp_path: Path, fakes: list[FakeServer],
                                                        capsys: pytest.CaptureFixture[str], command: str) -> None:
    fakes.append(FakeServer(honours=("structured_outputs", "guided_choice"), rejects=True))
    assert main(_argv(command, tmp_path, fakes[0].url, "--serve", "choice", "--dry-run")) == 0
    out = capsys.readouterr().out.splitlines()
    assert (f"target {fakes[0].url} (/v1/completions) honours logprobs, generate, choice: log-probs exact, any "
            "token; constrained decoding structured_outputs, guided_choice; logit_bias unknown (no tokenizer to name "
            "a token: --tokenizer)") in out
    assert not (tmp_path / "runs").exists()


def test_serve_choice_on_a_server_without_constraints_names_what_was_tried(
        tmp_path: Path, fakes: list[FakeServer], capsys: pytest.CaptureFixture[str]) -> None:
    fakes.append(FakeServer(rejects=True))  # a 400 to every constraint field: none honoured
    assert main(_argv("optimize", tmp_path, fakes[0].url, "--serve", "choice", "--dry-run")) == 2
    assert capsys.readouterr().err == (
        f"error: --serve choice: the server at {fakes[0].url} honours no exact constrained decoding over a choice "
        "(grammar, structured_outputs, guided_choice, response_format tried on /v1/completions); it honours: "
        "logprobs, generate\n")


def test_a_servers_constraints_are_probed_once_and_charged_to_no_run(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(completions=False, honours=("response_format",)))
    backend = OpenAIBackend([fakes[0].url], "fake")
    answered = fakes[0].completions
    first = backend.capabilities()
    assert backend.capabilities() is first and fakes[0].completions == answered + len(CONSTRAINT_FORMS)  # once
    assert (first.endpoint, first.top_k, first.constraints) == ("/v1/chat/completions", 20, ("response_format",))
    assert "choice" not in first.contracts()  # a JSON-schema enum writes quotes: not the run's decoding
    assert backend.server_counts()[fakes[0].url]["requests"] == 0  # outside the counts a run reports
    backend.close()


def test_config_json_and_the_report_record_what_the_target_honours(tmp_path: Path, fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(varied=True, honours=("grammar",)))
    config = oracle_config(tmp_path, backend="openai", base_url=[fakes[0].url], optimizer="random", budget=60,
                           train_size=20, dev_size=20, test_size=20, check_generation=0, serve="choice")
    result = run_study(config, console=Console(stderr=True, quiet=True))
    recorded = json.loads((result.run_dir / "config.json").read_text())["capabilities"]
    assert recorded == {"where": fakes[0].url, "endpoint": "/v1/completions", "logprobs": True, "top_k": None,
                        "constraints": ["grammar"], "logit_bias": None, "contracts": ["logprobs", "generate", "choice"]}
    report = (result.run_dir / "report.md").read_text()
    assert (f"Probed before the run: target {fakes[0].url} (/v1/completions) honours logprobs, generate, choice: "
            "log-probs exact, any token; constrained decoding grammar; logit_bias unknown") in report
    # The probe's requests are in no count the run reports: only the run's own calls are.
    facts = json.loads((result.run_dir / "verdict.json").read_text())
    assert facts["servers"][fakes[0].url]["requests"] == fakes[0].completions - STARTUP_PROBES - len(CONSTRAINT_FORMS)


def test_a_server_decodes_choice_itself_and_offsets_without_a_tokenizer_are_refused(fakes: list[FakeServer]) -> None:
    """serve choice over a server: the server's own constrained answer (here its first choice, under the grammar it
    honours); a first-token offset cannot be named without the model's tokenizer, so it is refused, never dropped."""
    fakes.append(FakeServer(honours=("grammar",)))
    backend = OpenAIBackend([fakes[0].url], "fake")
    [answer] = backend.choose([ChoiceRequest("The item is painted green. Label:", (" green", " red"))])
    assert answer.choice == 0
    with pytest.raises(UserError, match="need the model's tokenizer: pass --tokenizer"):
        backend.choose([ChoiceRequest("The item is painted green. Label:", (" green", " red"), (1.0, -1.0))])
    backend.close()
