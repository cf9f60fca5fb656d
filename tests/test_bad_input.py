"""Every kind of bad input a new user produces, one row each: it ends in exit code 2 and ONE line on
stderr that names the problem — no traceback, no run directory, and (for all but the backend rows
that must reach a server or the hub) before any model is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.testing import colours_task_file

REPO = Path(__file__).resolve().parent.parent
COLOURS = ["--task", "{files}/colours.yaml", "--train-size", "60", "--dev-size", "60", "--test-size", "60"]


@dataclass(frozen=True)
class Case:
    """`argv` with {files} (the bad files below) and {runs} (this case's runs folder) filled in."""

    name: str
    argv: list[str]
    message: str
    env: dict[str, str | None] = field(default_factory=dict)
    online: bool = False  # may reach for the network (the hub), as a user without HF_HUB_OFFLINE would
    subprocess: bool = False  # run as `python -m prompttune`, to see what reaches a terminal


def optimize(*argv: str) -> list[str]:
    return ["optimize", *COLOURS, "--budget", "300", "--runs-dir", "{runs}", *argv]


def evaluate(*argv: str) -> list[str]:
    return ["evaluate", *COLOURS, "--runs-dir", "{runs}", *argv]


def compare(*argv: str) -> list[str]:
    return ["compare", *COLOURS, "--budget", "300", "--seeds", "1", "--optimizers", "random",
            "--runs-dir", "{runs}", *argv]


def task(name: str) -> list[str]:
    return optimize("--task", f"{{files}}/{name}")


def space(name: str) -> list[str]:
    return optimize("--space", f"{{files}}/{name}")


def prompts(name: str) -> list[str]:
    return evaluate("--prompts", f"{{files}}/{name}")


TWO_PROMPTS = "['{text} Colour:', 'Item: {text} Answer:']"
OFFLINE = {"HF_HUB_OFFLINE": "1"}

CASES = [
    # -- the task: names, task files, data files ---------------------------------------------------
    Case("unknown task", optimize("--task", "imdb"), "unknown task 'imdb'"),
    Case("missing task file", optimize("--task", "missing.yaml"), "task file missing.yaml not found"),
    Case("task file malformed YAML", task("task_malformed.yaml"), "cannot read YAML"),
    Case("task file lacks a field", task("task_no_label_column.yaml"), "label_column: Field required"),
    Case("task file unknown key", task("task_typo.yaml"), "lables"),
    Case("task file misspelt required key", task("task_label_colum.yaml"),
         "label_colum: unknown key (not part of the schema; did you mean label_column?)"),
    Case("task file duplicate key", task("task_duplicate_key.yaml"), "duplicate key 'labels'"),
    Case("task file not a mapping", task("task_list.yaml"), "valid dictionary"),
    Case("task with one label", task("task_one_label.yaml"), "at least two labels"),
    Case("task without text columns", task("task_no_text_columns.yaml"), "text_columns"),
    Case("task file unknown format", task("task_format.yaml"), "format: Input should be 'csv', 'tsv' or 'jsonl'"),
    Case("task delimiter of two characters", task("task_delimiter.yaml"), "one character"),
    Case("task data file missing", task("task_no_data.yaml"), "nosuch.csv not found"),
    Case("labels the data lacks", task("task_purple.yaml"), "labels absent from the data: purple"),
    Case("data labels not declared", task("task_no_blue.yaml"), "labels not declared under 'labels': blue"),
    Case("empty split", task("task_no_dev_rows.yaml"), "split 'dev' is empty"),
    Case("unknown split value", task("task_bad_split.yaml"), "unknown split value 'holdout'"),
    Case("sizes larger than the data", optimize("--train-size", "5000"), "cannot fill"),
    Case("data file without rows", task("task_header_only.yaml"), "no data rows"),
    Case("empty data file", task("task_empty_file.yaml"), "empty.csv has no data rows"),
    Case("non-UTF-8 CSV", task("task_latin1.yaml"), "line 92 is not UTF-8", subprocess=True),
    Case("CSV row with a missing field", task("task_short_row.yaml"), "line 3"),
    Case("CSV row with an extra field", task("task_long_row.yaml"), "line 4"),
    Case("CSV without the text column", task("task_no_text_column.yaml"), "columns missing from the header: text"),
    Case("JSONL with a bad line", task("task_bad_jsonl.yaml"), "line 2"),
    Case("JSONL line not an object", task("task_jsonl_list.yaml"), "line 2"),
    Case("JSONL line lacking the label", task("task_jsonl_no_label.yaml"), "line 3"),
    Case("negative split size", optimize("--dev-size", "-5"), "--dev-size"),
    Case("data dir missing", optimize("--task", "agnews", "--data-dir", "/nonexistent"),
         "data dir /nonexistent does not exist"),
    Case("data dir is a file", optimize("--task", "agnews", "--data-dir", "{files}/colours.csv"), "not a folder"),
    Case("data dir without the data", optimize("--task", "agnews", "--data-dir", "{files}/empty"),
         "not found under data dir"),
    Case("no data and the hub offline", optimize("--task", "sst2"), "no data for task 'sst2'",
         env={"PROMPTTUNE_DATA_DIR": None, **OFFLINE}),
    # -- search-space files ------------------------------------------------------------------------
    Case("space file missing", optimize("--space", "nosuch.yaml"), "space file nosuch.yaml not found"),
    Case("space malformed YAML", space("space_malformed.yaml"), "cannot read YAML"),
    Case("space unknown key", space("space_typo.yaml"), "instructoins: unknown key"),
    Case("space duplicate dimension", space("space_duplicate.yaml"), "duplicate key 'sep'"),
    Case("space unknown placeholder", space("space_onyl.yaml"), "placeholder {onyl}"),
    Case("space input placeholder", space("space_sentence.yaml"), "placeholder {sentence}"),
    Case("space target field the task lacks", space("space_question.yaml"), "targets input field 'question'"),
    Case("space empty alternatives", space("space_empty_values.yaml"), "choices.sep.values"),
    Case("space invalid rule", space("space_bad_rule.yaml"), "a rule needs `then`"),
    Case("space rule on an unknown dimension", space("space_rule_unknown.yaml"), "unknown dimension"),
    Case("space label words of other labels", space("space_label_words.yaml"), "label_words"),
    Case("space negative demos", space("space_negative_k.yaml"), "k must be 0 or more"),
    Case("space show: unknown placeholder", ["space", "show", "{files}/space_onyl.yaml", *COLOURS], "placeholder {onyl}"),
    Case("space show: no task", ["space", "show", "{files}/space_typo_free.yaml"], "pass --task"),
    Case("space sample: no candidates", ["space", "sample", "{files}/space_typo_free.yaml", "--sample", "0", *COLOURS],
         "--sample 0"),
    Case("space show: neither a file nor a task", ["space", "show"], "give a space FILE or --task"),
    # -- the user's prompt (--prompt, or prompt:/messages: in the task file) ------------------------
    Case("prompt file missing", optimize("--prompt", "nosuch.txt"), "--prompt nosuch.txt: file not found"),
    Case("prompt unknown placeholder", optimize("--prompt", "{files}/prompt_sentence.txt"), "placeholder {sentence}"),
    Case("prompt without the input", task("task_prompt_no_field.yaml"), "the prompt lacks {text}"),
    Case("prompt and messages both", task("task_prompt_and_messages.yaml"), "give either prompt or messages"),
    Case("frozen text not in the prompt", task("task_frozen_missing.yaml"),
         "frozen text 'Never share data.' is not in the baseline prompt"),
    Case("frozen text without a prompt", task("task_frozen_no_prompt.yaml"), "frozen lists texts of your prompt"),
    Case("frozen text not in a --prompt file", optimize("--task", "{files}/task_frozen_ok.yaml", "--prompt",
                                                        "{files}/prompt_ok.txt"), "frozen text 'Never share data.'"),
    Case("frozen text with a dspy optimizer", optimize("--task", "{files}/task_frozen_ok.yaml", "--optimizer",
                                                       "dspy-mipro"), "outside the search driver"),
    Case("max prompt tokens zero", optimize("--max-prompt-tokens", "0"), "--max-prompt-tokens 0"),
    Case("check generation negative", optimize("--check-generation", "-3"), "--check-generation -3"),
    Case("prompt with a space file", optimize("--prompt", "{files}/prompt_ok.txt", "--space",
                                              "{files}/space_typo_free.yaml"), "both set the baseline"),
    Case("evaluate prompt with prompts", prompts("prompts_ok.yaml") + ["--prompt", "{files}/prompt_ok.txt"],
         "--prompt goes with --sample N"),
    Case("labels sharing a word", task("task_shared_word.yaml"), "share the verbalizer word 'warm'"),
    # -- prompts files (evaluate) ------------------------------------------------------------------
    Case("prompts file missing", evaluate("--prompts", "nosuch.yaml"), "prompts file nosuch.yaml not found"),
    Case("prompts malformed YAML", prompts("prompts_malformed.yaml"), "cannot read YAML"),
    Case("prompts malformed JSON", prompts("prompts_malformed.json"), "cannot read JSON"),
    Case("prompts empty list", prompts("prompts_empty.yaml"), "at least 1 item"),
    Case("prompts unknown placeholder", prompts("prompts_sentence.yaml"), "unknown placeholder {sentence}"),
    Case("prompts template without the input", prompts("prompts_no_field.yaml"), "template lacks {text}"),
    Case("prompts unbalanced brace", prompts("prompts_brace.yaml"), "malformed template"),
    Case("prompts one only", prompts("prompts_one.yaml"), "need at least 2"),
    Case("prompts label words miscounted", prompts("prompts_label_words.yaml"), "2 words for 3 labels"),
    Case("prompts repeated", prompts("prompts_repeated.yaml"), "repeats the template"),
    Case("prompts and sample", prompts("prompts_ok.yaml") + ["--sample", "3"], "give either --prompts"),
    Case("neither prompts nor sample", evaluate(), "give either --prompts"),
    Case("prompts with a space", prompts("prompts_ok.yaml") + ["--space", "{files}/space_typo_free.yaml"],
         "--space goes with --sample"),
    Case("ensemble larger than the prompts", prompts("prompts_ok.yaml") + ["--ensemble", "5"], "--ensemble 5"),
    Case("evaluate unknown split", prompts("prompts_ok.yaml") + ["--split", "train"], "--split"),
    Case("evaluate unknown scoring", prompts("prompts_ok.yaml") + ["--scoring", "vote"],
         "unknown scoring 'vote'; choose from logit, generate"),
    Case("evaluate ensemble as a scoring", prompts("prompts_ok.yaml") + ["--scoring", "ensemble"], "use --ensemble K"),
    Case("evaluate ensemble of 1", prompts("prompts_ok.yaml") + ["--ensemble", "1"], "--ensemble 1"),
    Case("evaluate sample 0", evaluate("--sample", "0"), "--sample 0"),
    Case("evaluate sample larger than the space", evaluate("--sample", "100000"),
         "--sample 100000 is larger than the space"),
    Case("evaluate cache is a directory", prompts("prompts_ok.yaml") + ["--cache", "{files}"], "is a directory"),
    Case("evaluate runs dir is a file", prompts("prompts_ok.yaml") + ["--runs-dir", "{files}/colours.csv"],
         "is a file, not a folder"),
    # -- optimizer, options and objective ----------------------------------------------------------
    Case("unknown optimizer", optimize("--optimizer", "genetic"), "unknown optimizer 'genetic'"),
    Case("option without a value", optimize("--option", "novalue"), "--option expects KEY=VALUE"),
    Case("option without a key", optimize("--option", "=3"), "--option expects KEY=VALUE"),
    Case("option value not YAML", optimize("--optimizer", "sh", "--option", "eta=[3"), "is not valid YAML"),
    Case("unknown option key", optimize("--optimizer", "sh", "--option", "etaa=3"),
         "sh: unknown option 'etaa' (options: eta, min_examples, schedule)"),
    Case("option of another optimizer", optimize("--optimizer", "random", "--option", "eta=3"),
         "random: unknown option 'eta'"),
    Case("sh schedule longer than dev", optimize("--optimizer", "sh", "--option", "schedule=seed"),
         "sh: schedule needs 800 dev examples"),
    Case("option value of the wrong type", optimize("--optimizer", "sh", "--option", "eta=abc"), "sh: option eta='abc'"),
    Case("eta that never finishes", optimize("--optimizer", "sh", "--option", "eta=1"), "greater than or equal to 2"),
    Case("min_examples 0", optimize("--optimizer", "sh", "--option", "min_examples=0"), "min_examples=0"),
    Case("unknown schedule", optimize("--optimizer", "sh", "--option", "schedule=fast"), "sh: option schedule='fast'"),
    Case("unknown representatives", optimize("--optimizer", "p2g", "--option", "representatives=umap"),
         "p2g: option representatives='umap'"),
    Case("mipro trials 0", optimize("--optimizer", "mipro", "--option", "trials=0"), "mipro: option trials=0"),
    Case("unknown objective", optimize("--objective", "f2"), "unknown objective 'f2'"),
    Case("unknown scoring", optimize("--scoring", "sample"), "--scoring"),
    # -- numbers -----------------------------------------------------------------------------------
    Case("budget not a number", optimize("--budget", "abc"), "invalid int value: 'abc'", subprocess=True),
    Case("seed not a number", optimize("--seed", "x"), "--seed: 'x' is not a whole number"),
    Case("split seed negative", optimize("--split-seed", "-1"), "--split-seed: '-1' is not a whole number >= 0"),
    Case("space sample: seed negative", ["space", "sample", "{files}/space_typo_free.yaml", "--seed", "-3",
                                         *COLOURS], "--seed: '-3'"),
    Case("budget 0", optimize("--budget", "0"), "--budget 0"),
    Case("budget negative", optimize("--budget", "-5"), "--budget -5"),
    Case("budget below one dev evaluation", optimize("--budget", "10"), "budget 10 too small"),
    Case("budget tokens 0", optimize("--budget-tokens", "0"), "--budget-tokens 0"),
    Case("alpha above 1", optimize("--alpha", "2"), "--alpha 2"),
    Case("dev alpha 0", optimize("--dev-alpha", "0"), "--dev-alpha 0"),
    Case("confirm top 0", optimize("--confirm-top", "0"), "--confirm-top 0"),
    Case("batch size 0", optimize("--batch-size", "0"), "--batch-size 0"),
    Case("unknown argument", optimize("--budgt", "300"), "unrecognized arguments: --budgt"),
    Case("no command", [], "required: command"),
    # -- paths -------------------------------------------------------------------------------------
    Case("cache is a directory", optimize("--cache", "{files}"), "is a directory"),
    Case("cache in a missing folder", optimize("--cache", "{files}/nosuch/cache.sqlite"), "does not exist"),
    Case("cache under a file", optimize("--cache", "{files}/colours.csv/cache.sqlite"), "not a folder"),
    Case("cache not SQLite", optimize("--cache", "{files}/colours.csv"), "not an SQLite"),
    Case("cache where nothing can be written", optimize("--cache", "/proc/cache.sqlite"), "cannot write"),
    Case("runs dir is a file", optimize("--runs-dir", "{files}/colours.csv"), "is a file, not a folder"),
    Case("runs dir under a file", optimize("--runs-dir", "{files}/colours.csv/runs"), "not a folder"),
    Case("runs dir impossible", optimize("--runs-dir", "/proc/prompttune-runs"), "cannot write"),
    # -- the model backend -------------------------------------------------------------------------
    Case("unknown device", optimize("--device", "tpu"), "--device tpu: unknown device"),
    Case("CUDA device missing", optimize("--device", "cuda:7"), "--device cuda:7"),
    Case("unknown dtype", optimize("--dtype", "float7"), "invalid choice: 'float7'"),
    Case("unknown backend", optimize("--backend", "nosuch"), "invalid choice: 'nosuch'"),
    Case("vllm on the embedded model", optimize("--backend", "vllm"), "vLLM cannot load the embedded GGUF model"),
    Case("openai without a server", optimize("--backend", "openai"), "needs --base-url"),
    Case("server option on transformers", optimize("--base-url", "http://127.0.0.1:9/v1"),
         "--base-url does not apply to --backend transformers"),
    Case("endpoint option on transformers", optimize("--api", "chat"), "--api does not apply to --backend transformers"),
    Case("unknown endpoint", optimize("--backend", "openai", "--api", "responses"), "invalid choice: 'responses'"),
    Case("unreachable server", optimize("--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                                        "--timeout", "2", "--retries", "0"),
         "cannot reach an OpenAI-compatible server at http://127.0.0.1:9/v1"),
    Case("model path missing", optimize("--model", "/nonexistent/model"), "/nonexistent/model not found"),
    Case("model GGUF file missing", optimize("--model", "{files}/nosuch.gguf"), "nosuch.gguf not found"),
    Case("hub model offline", optimize("--model", "nosuchorg/nosuchmodel"), "nosuchorg/nosuchmodel", env=OFFLINE),
    Case("hub model unreachable or unknown", optimize("--model", "nosuchorg/nosuchmodel"),
         "nosuchorg/nosuchmodel", online=True),
    Case("proposer model missing", optimize("--proposer-model", "/nonexistent/proposer"),
         "/nonexistent/proposer not found"),
    # -- compare -----------------------------------------------------------------------------------
    Case("compare unknown arm", compare("--optimizers", "random,nosuch"), "unknown optimizer 'nosuch'"),
    Case("compare seeds 0", compare("--seeds", "0"), "--seeds must be at least 1"),
    Case("compare unknown mode", compare("--mode", "same"), "argument --mode: invalid choice: 'same'"),
    Case("compare duplicate arms", compare("--optimizers", "sh,sh"), "listed twice"),
    Case("compare arm schedule longer than dev", compare("--optimizers", "random,sh", "--option", "sh.schedule=seed"),
         "sh: schedule needs 800 dev examples"),
    Case("compare an arm too costly for the cap", compare("--optimizers", "random,dspy-copro", "--budget", "100"),
         "dspy-copro needs at least 121 calls"),
    Case("compare no arms", compare("--optimizers", ","), "names no optimizer"),
    Case("compare jobs 0", compare("--jobs", "0"), "--jobs must be at least 1"),
    Case("compare unknown executor", compare("--jobs", "2", "--executor", "dask"),
         "--executor expects process, ray or ray:ADDRESS, got 'dask'"),
    Case("compare native demos in same-space mode", compare("--native-demos", "4"), "it needs --mode native"),
    Case("compare negative generation check", compare("--check-generation", "-1"), "--check-generation -1: the test"),
    Case("compare option without optimizer", compare("--option", "eta=3"), "OPTIMIZER.KEY=VALUE"),
    Case("compare option of an arm not compared", compare("--option", "sh.eta=3"), "not compared: sh"),
    Case("compare option value not YAML", compare("--optimizers", "sh", "--option", "sh.eta=a: b: c"),
         "is not valid YAML"),
    Case("compare bad option value", compare("--optimizers", "sh", "--option", "sh.eta=1"), "sh: option eta=1"),
    Case("compare cache is a directory", compare("--cache", "{files}"), "is a directory"),
    Case("compare unknown device", compare("--device", "tpu"), "--device tpu"),
    Case("compare unreachable server", compare("--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                                               "--timeout", "2", "--retries", "0"), "cannot reach an OpenAI"),
    Case("compare bad space", compare("--space", "{files}/space_onyl.yaml"), "placeholder {onyl}"),
    # -- export, report and resume of run directories -------------------------------------------------
    Case("export a plain file", ["export", "{files}/colours.csv", "--to", "text"], "is not a run directory"),
    Case("export a folder that is not a run", ["export", "{files}/empty", "--to", "text"], "config.json missing"),
    Case("export a missing folder", ["export", "{files}/nosuch", "--to", "text"], "is not a run directory"),
    Case("export without best_prompt.json", ["export", "{files}/run_config_only", "--to", "text"],
         "lacks best_prompt.json"),
    Case("export corrupt best_prompt.json", ["export", "{files}/run_corrupt", "--to", "json"],
         "best_prompt.json", subprocess=True),
    Case("export best_prompt.json without spec", ["export", "{files}/run_no_spec", "--to", "text"], "spec"),
    Case("export corrupt config.json", ["export", "{files}/run_bad_config", "--to", "text"], "config.json"),
    Case("export unknown format", ["export", "{files}/run_corrupt", "--to", "yaml"], "invalid choice: 'yaml'"),
    Case("export output is a file", ["export", "{files}/run_ok", "--to", "text", "--output", "{files}/colours.csv"],
         "--output"),
    Case("report a folder that is not a run", ["report", "{files}/empty"], "config.json missing"),
    Case("report a missing folder", ["report", "{files}/nosuch"], "is not a directory"),
    Case("report a config-only folder", ["report", "{files}/run_config_only"], "not a finished run"),
    Case("report without verdict.json", ["report", "{files}/run_no_verdict"],
         "is an unfinished run (no verdict yet): `optimize --resume"),
    Case("report an unfinished comparison", ["report", "{files}/compare_unfinished"],
         "is an unfinished comparison: `compare --resume"),
    Case("report a corrupt config.json", ["report", "{files}/run_broken_config"], "config.json: not valid JSON"),
    Case("report a corrupt verdict.json", ["report", "{files}/run_bad_verdict"], "verdict.json: not valid JSON"),
    Case("resume a missing folder", ["optimize", "--resume", "{files}/nosuch"], "not a run directory"),
    Case("resume a plain file", ["optimize", "--resume", "{files}/colours.csv"], "not a run directory"),
    Case("resume a corrupt config", ["optimize", "--resume", "{files}/run_bad_config"], "config.json"),
    Case("resume a finished run", ["optimize", "--resume", "{files}/run_finished"], "finished already"),
    Case("compare --resume a missing folder", ["compare", "--resume", "{files}/nosuch"], "not a compare run directory"),
    Case("compare --resume an optimize run", ["compare", "--resume", "{files}/run_finished"],
         "not a compare run directory"),
    Case("compare --resume a finished comparison", ["compare", "--resume", "{files}/compare_finished"],
         "finished already"),
]


def _write(root: Path, name: str, text: str | bytes) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def _task_yaml(data: str, extra: str = "", labels: str = "{red: [red], green: [green], blue: [blue]}") -> str:
    return f"name: c\ndata: {data}\ntext_columns: [text]\nlabel_column: colour\nlabels: {labels}\n{extra}"


def _colour_rows(n: int = 30) -> str:
    return "".join(f"item {i} is {c},{c}\n" for i in range(n) for c in ("red", "green", "blue"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bad file of the table, next to a valid colours task."""
    root = tmp_path_factory.mktemp("bad-input")
    colours_task_file(root)
    (root / "empty").mkdir()
    bad = {
        "task_malformed.yaml": "name: [unclosed\n",
        "task_no_label_column.yaml": "name: c\ndata: colours.csv\ntext_columns: [text]\nlabels: {a: [a], b: [b]}\n",
        "task_typo.yaml": _task_yaml("colours.csv", "lables: {}\n"),
        "task_duplicate_key.yaml": _task_yaml("colours.csv", "labels: {red: [red], blue: [blue]}\n"),
        "task_list.yaml": "- name\n- data\n",
        "task_one_label.yaml": _task_yaml("colours.csv", labels="{red: [red]}"),
        "task_no_text_columns.yaml": _task_yaml("colours.csv").replace("[text]", "[]"),
        "task_format.yaml": _task_yaml("colours.csv", "format: xml\n"),
        "task_delimiter.yaml": _task_yaml("colours.csv", "delimiter: ';;'\n"),
        "task_no_data.yaml": _task_yaml("nosuch.csv"),
        "task_purple.yaml": _task_yaml("colours.csv", labels="{red: [red], green: [green], blue: [blue], "
                                                              "purple: [purple]}"),
        "task_no_blue.yaml": _task_yaml("colours.csv", labels="{red: [red], green: [green]}"),
        "task_no_dev_rows.yaml": _task_yaml("split.csv", "split_column: split\n"),
        "split.csv": "text,colour,split\n" + "".join(f"item {i} {c},{c},{'train' if i % 2 else 'test'}\n"
                                                     for i in range(30) for c in ("red", "green", "blue")),
        "task_bad_split.yaml": _task_yaml("bad_split.csv", "split_column: split\n"),
        "bad_split.csv": "text,colour,split\nitem 1,red,train\nitem 2,green,test\nitem 3,blue,holdout\n",
        "task_header_only.yaml": _task_yaml("header_only.csv"),
        "task_empty_file.yaml": _task_yaml("empty.csv"),
        "empty.csv": "",
        "task_label_colum.yaml": _task_yaml("colours.csv").replace("label_column:", "label_colum:"),
        "header_only.csv": "text,colour\n",
        "task_latin1.yaml": _task_yaml("latin1.csv"),
        "latin1.csv": ("text,colour\n" + _colour_rows() + "caf\xe9 au lait,red\n").encode("latin-1"),
        "task_short_row.yaml": _task_yaml("short_row.csv"),
        "short_row.csv": "text,colour\nitem 1 is red,red\nitem 2 is green\n" + _colour_rows(),
        "task_long_row.yaml": _task_yaml("long_row.csv"),
        "long_row.csv": "text,colour\nitem 1,red\nitem 2,green\nitem 3,blue,extra\n" + _colour_rows(),
        "task_no_text_column.yaml": _task_yaml("no_text.csv"),
        "no_text.csv": "body,colour\n" + _colour_rows(),
        "task_bad_jsonl.yaml": _task_yaml("bad.jsonl"),
        "bad.jsonl": '{"text": "item 1", "colour": "red"}\n{"text": "item 2", "colour": \n',
        "task_jsonl_list.yaml": _task_yaml("list.jsonl"),
        "list.jsonl": '{"text": "item 1", "colour": "red"}\n["item 2", "green"]\n',
        "task_jsonl_no_label.yaml": _task_yaml("no_label.jsonl"),
        "no_label.jsonl": '{"text": "a", "colour": "red"}\n{"text": "b", "colour": "blue"}\n{"text": "c"}\n',
        "space_malformed.yaml": "name: s\ninstructions: [unclosed\n",
        "space_typo.yaml": "name: s\ninstructoins: ['Name the colour.']\n",
        "space_typo_free.yaml": "name: s\ninstructions: ['Name the colour.', 'Which colour is it?']\n",
        "space_duplicate.yaml": "name: s\nchoices:\n  sep: {target: intra_separator, values: ['\\n', ' ']}\n"
                                "  sep: {target: intra_separator, values: [' | ']}\n",
        "space_onyl.yaml": "name: s\ninstructions: ['Name the colour ({labels}).', '{onyl} the colour.']\n",
        "space_sentence.yaml": "name: s\ninstructions: ['Name the colour of {sentence}.', 'Name it.']\n",
        "space_question.yaml": "name: s\nchoices:\n  q: {target: 'input:question', values: ['Q: {}', 'Question: {}']}\n",
        "space_empty_values.yaml": "name: s\nchoices:\n  sep: {target: intra_separator, values: []}\n",
        "space_bad_rule.yaml": "name: s\ninstructions: [a b c, d e f]\nconstraints:\n  - when: {instruction: a b c}\n",
        "space_rule_unknown.yaml": "name: s\ninstructions: [a b c, d e f]\nconstraints:\n  - forbid: {nosuch: 1}\n",
        "space_label_words.yaml": "name: s\nlabel_words: {negative: [bad], positive: [good]}\n",
        "space_negative_k.yaml": "name: s\nfew_shot: {k: [0, -1]}\n",
        "prompt_sentence.txt": "Name the colour.\nItem: {sentence}\nColour:\n",
        "prompt_ok.txt": "Name the colour.\nItem: {text}\nColour:\n",
        "task_prompt_no_field.yaml": _task_yaml("colours.csv", "prompt: 'Name the colour. Colour:'\n"),
        "task_prompt_and_messages.yaml": _task_yaml("colours.csv", "prompt: '{text}'\nmessages: "
                                                                   "[{role: user, content: '{text}'}]\n"),
        "task_frozen_missing.yaml": _task_yaml("colours.csv", "prompt: 'Name the colour. Item: {text}'\n"
                                                              "frozen: ['Never share data.']\n"),
        "task_frozen_no_prompt.yaml": _task_yaml("colours.csv", "frozen: ['Never share data.']\n"),
        "task_frozen_ok.yaml": _task_yaml("colours.csv", "prompt: 'Name the colour. Never share data. Item: {text}'\n"
                                                         "frozen: ['Never share data.']\n"),
        "task_shared_word.yaml": _task_yaml("colours.csv", labels="{red: [warm], green: [cool], blue: [warm]}"),
        "prompts_malformed.yaml": "- '{text} Colour:'\n- [unclosed\n",
        "prompts_malformed.json": '["{text} Colour:",\n',
        "prompts_empty.yaml": "prompts: []\n",
        "prompts_sentence.yaml": "['{sentence} Colour:', '{text} Colour:']\n",
        "prompts_no_field.yaml": "['What colour? Answer:', '{text} Colour:']\n",
        "prompts_brace.yaml": "['{text Colour:', '{text} Colour:']\n",
        "prompts_one.yaml": "['{text} Colour:']\n",
        "prompts_label_words.yaml": f"label_words: [a, b]\nprompts: {TWO_PROMPTS}\n",
        "prompts_repeated.yaml": "['{text} Colour:', '{text} Colour:']\n",
        "prompts_ok.yaml": f"{TWO_PROMPTS}\n",
        "run_corrupt/config.json": "{}",
        "run_corrupt/best_prompt.json": '{"spec": {"instruction": ',
        "run_no_spec/config.json": "{}",
        "run_no_spec/best_prompt.json": '{"candidate_id": "x"}',
        "run_bad_config/config.json": '{"budget": "lots"}',
        "run_bad_config/best_prompt.json": '{"spec": {}}',
        "run_ok/config.json": json.dumps({"task": str(root / "colours.yaml")}),
        "run_ok/best_prompt.json": '{"spec": {}}',
        "run_config_only/config.json": "{}",
        "run_finished/config.json": "{}",
        "run_finished/verdict.json": "{}",
        "run_no_verdict/config.json": "{}",
        "compare_unfinished/config.json": "{}",
        "compare_unfinished/arms/random-s0/config.json": "{}",
        "compare_finished/config.json": "{}",
        "compare_finished/summary.json": "{}",
        "run_no_verdict/trials.jsonl": "",
        "run_broken_config/config.json": "{",
        "run_broken_config/trials.jsonl": "",
        "run_bad_verdict/config.json": "{}",
        "run_bad_verdict/trials.jsonl": '{"number": 0}\n',
        "run_bad_verdict/verdict.json": '{"verdict": ',
    }
    for name, text in bad.items():
        _write(root, name, text)
    return root


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading weights fails the row: bad input must be found before the model loads."""
    from prompttune.backends import transformers_backend

    class Forbidden:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise AssertionError("the model started loading: bad input must be found first")

    monkeypatch.setattr(transformers_backend, "AutoModelForCausalLM", Forbidden)
    monkeypatch.setattr(transformers_backend, "AutoTokenizer", Forbidden)


def _argv(case: Case, files: Path, runs: Path) -> list[str]:
    return [a.replace("{files}", str(files)).replace("{runs}", str(runs)) for a in case.argv]


def _assert_one_line(code: int, out: str, err: str, case: Case, runs: Path) -> None:
    assert "Traceback" not in out + err, err
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert case.message in lines[0], lines[0]
    assert not runs.exists() or not any(runs.iterdir()), f"run directory left behind: {list(runs.iterdir())}"


@pytest.mark.parametrize("case", [c for c in CASES if not c.subprocess], ids=lambda c: c.name)
def test_bad_input_ends_in_one_line_and_exit_code_2(case: Case, files: Path, tmp_path: Path, no_model,
                                                    capsys: pytest.CaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not case.online:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a row that reaches for the hub is a bug, not a wait
    for name, value in case.env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    runs = tmp_path / "runs"
    code = main(_argv(case, files, runs))
    captured = capsys.readouterr()
    _assert_one_line(code, captured.out, captured.err, case, runs)


@pytest.mark.parametrize("case", [c for c in CASES if c.subprocess], ids=lambda c: c.name)
def test_bad_input_reaches_the_terminal_as_one_line(case: Case, files: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "prompttune", *_argv(case, files, runs)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    _assert_one_line(done.returncode, done.stdout, done.stderr, case, runs)


def test_the_table_covers_every_command() -> None:
    commands = {case.argv[0] for case in CASES if case.argv}
    assert commands == {"optimize", "evaluate", "compare", "export", "space", "report"}
    assert len(CASES) >= 71
    assert len({case.name for case in CASES}) == len(CASES)
