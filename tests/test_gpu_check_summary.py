"""The GPU check's summary (benchmarks/gpu_check_summary.py) from the files a device run leaves: step
statuses, the throughput rows with their dtype, and a cut run's partial progress as calls/s and as a
fraction of the same dtype's prompts/s. The device gets one try, so its summary is checked here."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.gpu_check_summary import summary

THROUGHPUT_LOG = """\
== 12:00:00 python benchmarks/throughput.py --dtypes fp32 --only score (limit 40s)

cuda torch.float32, 16 threads, wall clock, batches of 128 rows / 8192 tokens; matmul peak 51000 GFLOP/s
workload          path     prompts/s  prompt tok/s  run tok/s  GFLOP/s  % peak  speed-up  max |diff|
score 0-demo      full       1000.00         65000      65000   3900.0    7.6%
score 0-demo      reuse      1250.00         81250      30000   1800.0    3.5%     1.25x     3.7e-05
== 12:00:40 python benchmarks/throughput.py --dtypes bf16 --only score (limit 50s)

cuda torch.bfloat16, 16 threads, wall clock, batches of 128 rows / 8192 tokens; matmul peak 700000 GFLOP/s
workload          path     prompts/s  prompt tok/s  run tok/s  GFLOP/s  % peak  speed-up  max |diff|
score 0-demo      full        371.00         24000      24000   1400.0    0.2%
"""


def test_a_cut_main_job_reports_its_calls_per_second_against_the_same_dtype(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    (out / "a_throughput.log").write_text(THROUGHPUT_LOG)
    (out / "d_optimize_40k.log").write_text("TransformersBackend: embedded:smollm2-135m-instruct|float32\ninterrupted\n")
    run = work / "runs" / "d" / "20261204T120000Z-agnews-reflect-s0"
    run.mkdir(parents=True)
    (work / "weights").write_text("real\n")
    (work / "steps.txt").write_text("d_optimize_40k\tcut\t124\t180.0\tpython -m prompttune optimize --budget 40000\n")
    (run / "config.json").write_text("{}")
    (run / "trials.jsonl").write_text("".join(json.dumps({"budget_spent": calls}) + "\n" for calls in (20, 500, 1000)))
    os.utime(run / "config.json", (0, 1000.0))
    os.utime(run / "trials.jsonl", (0, 1010.0))  # 1000 calls in 10 s of search

    lines = summary(work, out)

    assert lines[0] == "weights: real"
    assert "  d_optimize_40k\tcut\t124\t180.0\tpython -m prompttune optimize --budget 40000" in lines
    assert "  fp32 score 0-demo    reuse      1250.0  vs full: 3.7e-05" in lines
    assert "  bf16 score 0-demo    full        371.0" in lines
    assert ("d_optimize_40k (fp32): 1000 calls in 10 s of search = 100.0 calls/s; "
            "no verdict (stopped before the held-out test)") in lines
    assert "  = 8.0% of fp32 score 0-demo reuse (1250 prompts/s)" in lines
    assert not any("of bf16" in line for line in lines)
    assert "c_optimize_2k: no run directory" in lines

    c_run = work / "runs" / "c" / "20261204T110000Z-agnews-reflect-s0"
    c_run.mkdir(parents=True)
    (c_run / "config.json").write_text("{}")
    (c_run / "trials.jsonl").write_text(json.dumps({"budget_spent": 2000}) + "\n")
    (c_run / "verdict.json").write_text(json.dumps({"wall_seconds": 41.2, "backend_use": {
        "calls": 47, "scoring_seconds": 4.8, "generation_seconds": 11.4, "engine_seconds": 0.7}}))
    (out / "c_optimize_2k.log").write_text(  # optimize's last line, as it prints it
        "TransformersBackend: embedded:smollm2-135m-instruct|float32\nserve logprobs, verdict scored by label "
        "log-probabilities: baseline test accuracy 0.512, dev winner 0.744, one-sided McNemar p 3.277e-33; "
        "confirmed: ...; budget used 1999/2000; reports: r\n")
    assert any(line.startswith("c_optimize_2k (fp32): 2000 calls") and ", run wall 41 s (scoring 5 s, generating 11 s, "
               "engine 1 s, 47 backend calls); baseline" in line and line.endswith(
        "; baseline test accuracy 0.512, dev winner 0.744, one-sided McNemar p 3.277e-33; confirmed: ...; budget "
        "used 1999/2000; reports: r") for line in summary(work, out))


def test_random_weights_are_named_on_the_first_line(tmp_path: Path) -> None:
    (tmp_path / "weights").write_text("random\n")
    assert summary(tmp_path, tmp_path)[0].startswith("weights: random  (RANDOM: accuracies mean nothing")
