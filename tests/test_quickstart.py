"""README's "Your data, your prompt, your model" runs as written: the example task with its own prompt,
tuned against an OpenAI-compatible server (llama.cpp on the embedded model standing in for the user's),
then exported for production as chat messages."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llama_server import llama_server  # noqa: F401  (the session fixture)

REPO = Path(__file__).resolve().parent.parent
README_URL = "http://127.0.0.1:8000/v1"


def quickstart_commands() -> list[str]:
    section = (REPO / "README.md").read_text().split("## Your data, your prompt, your model", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.integration
def test_the_quickstart_runs_as_written_against_a_server(llama_server: str, tmp_path: Path) -> None:  # noqa: F811
    shutil.copytree(REPO / "examples" / "custom_task", tmp_path / "examples" / "custom_task")
    commands = quickstart_commands()
    assert [c.split()[:2] for c in commands] == [["prompttune", "optimize"], ["prompttune", "export"],
                                                 ["prompttune", "export"]]
    assert README_URL in commands[0]
    bin_dir = Path(sys.executable).parent
    for command in commands:
        argv = shlex.split(command.replace(README_URL, llama_server))
        done = subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    assert (run_dir / "verdict.json").is_file()
    task_prompt = (tmp_path / "examples" / "custom_task" / "reviews_with_prompt.yaml").read_text()
    assert "Classify the sentiment of the product review as one of: {labels}." in task_prompt
    baseline = (run_dir / "baseline_prompt.txt").read_text()
    assert "Classify the sentiment of the product review as one of: negative, positive." in baseline
    exported = json.loads((run_dir / "export" / "prompt.openai-chat.json").read_text())
    assert exported["messages"] and "{review}" in json.dumps(exported["messages"])
    assert exported["serve"] == "choice" and (run_dir / "export" / "classifier.py").is_file()
    assert json.loads((run_dir / "config.json").read_text())["base_url"] == [llama_server]
