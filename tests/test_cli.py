"""Bad input ends in one line on stderr and exit code 2 — never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.cli import main
from tests.support import colours_task_file


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("argv,message", [
    (["--task", "imdb"], "unknown task 'imdb'"),
    (["--task", "agnews", "--data-dir", "/nonexistent"], "data dir /nonexistent does not exist"),
    (["--task", "missing.yaml"], "task file missing.yaml not found"),
    (["--optimizer", "genetic"], "unknown optimizer 'genetic'"),
    (["--budget", "10"], "budget 10 too small"),
    (["--budget", "0"], "invalid option budget"),
    (["--option", "novalue"], "--option expects KEY=VALUE"),
    (["--optimizer", "sh", "--option", "etaa=3"], "sh: unknown option 'etaa' (options: eta, min_examples, schedule)"),
    (["--optimizer", "sh", "--option", "eta=abc"], "sh: option eta='abc'"),
    (["--optimizer", "sh", "--option", "eta=1"], "greater than or equal to 2"),  # would never finish
    (["--optimizer", "sh", "--option", "schedule=fast"], "sh: option schedule='fast'"),
    (["--optimizer", "p2g", "--option", "representatives=umap"], "p2g: option representatives='umap'"),
])
def test_bad_input_is_one_line_with_exit_code_2(capsys, data_dir: Path, tmp_path: Path, argv, message) -> None:
    args = ["optimize", "--runs-dir", str(tmp_path), *argv]
    if "--data-dir" not in argv:
        args += ["--data-dir", str(data_dir)]
    code, err = _run(capsys, *args)
    assert code == 2
    assert err.startswith("error: ") and message in err and "\n" not in err


@pytest.mark.parametrize("argv,message", [
    (["--objective", "f2"], "unknown objective 'f2'"),
    (["--cache", "."], "--cache . is a directory"),
    (["--runs-dir", "FILE"], "is a file, not a folder"),
    (["--space", "SPACE:instructions: ['Name the colour ({labels}).', '{onyl} the colour ({labels}).']"],
     "placeholder {onyl}"),
    (["--space", "SPACE:choices:\n  q: {target: 'input:question', values: ['Q: {}', 'Question: {}']}"],
     "targets input field 'question'"),
])
def test_bad_input_fails_before_the_model_loads_and_leaves_no_run_dir(capsys, tmp_path: Path, argv, message) -> None:
    (tmp_path / "FILE").write_text("x")
    args = [a.replace("FILE", str(tmp_path / "FILE")) for a in argv]
    if args[0] == "--space":
        (tmp_path / "space.yaml").write_text("name: s\n" + args[1].removeprefix("SPACE:") + "\n")
        args[1] = str(tmp_path / "space.yaml")
    runs = ["--runs-dir", str(tmp_path / "runs")] if "--runs-dir" not in args else []
    code, err = _run(capsys, "optimize", "--task", str(colours_task_file(tmp_path)), "--budget", "300",
                     "--dev-size", "60", "--train-size", "60", "--test-size", "60", *runs, *args)
    assert code == 2 and message in err and "\n" not in err, err
    assert not (tmp_path / "runs").exists()


def test_bad_options_leave_no_run_directory(capsys, data_dir: Path, tmp_path: Path) -> None:
    code, _ = _run(capsys, "optimize", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(data_dir),
                   "--optimizer", "mipro", "--option", "trials=0")
    assert code == 2 and not (tmp_path / "runs").exists()


def test_help_options_lists_every_option_with_its_default(capsys) -> None:
    assert main(["optimize", "--optimizer", "cople", "--help-options"]) == 0
    out = capsys.readouterr().out
    for line in ("m (int, default 10)", "C (int, default 8)", "rewrite (bool, default False)",
                 "synonyms (str, default 'wordnet')"):
        assert line in out


def test_labels_absent_from_custom_data(capsys, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("text,label\n" + "".join(f"t{i},yes\n" for i in range(20)))
    (tmp_path / "t.yaml").write_text("name: t\ndata: d.csv\ntext_columns: [text]\nlabel_column: label\n"
                                     "labels: {yes: [yes], no: [no]}\n")
    code, err = _run(capsys, "optimize", "--task", str(tmp_path / "t.yaml"), "--runs-dir", str(tmp_path))
    assert code == 2 and "labels absent from the data: no" in err
