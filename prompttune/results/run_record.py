"""What report.html needs beyond trials.jsonl and the prompt files (verdict.json's facts and the test records),
persisted by the record step so that `prompttune report RUN_DIR` rebuilds the page from the directory alone, and
an optimize run's config read back."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import CONFIG, config_text
from prompttune.scoring.contract import scored_by

if TYPE_CHECKING:
    from prompttune.results.run import RunResult
    from prompttune.tasks.task import Task

OUTCOME_FIELDS = ("family", "leader_dev_score", "leader_dev_n", "baseline_dev_score", "baseline_dev_n", "n_trials",
                  "n_candidates", "stopped_by_budget", "notes", "challenges", "sweeps", "challenge_accepts",
                  "rejected")


def token_facts(result: "RunResult") -> dict:
    """verdict.json's `prompt_tokens`: per request of the baseline, the shipped prompt and the dev winner, the
    ceiling, and every candidate scored on dev with its dev objective (the report's plot)."""
    return {"per_request": result.prompt_tokens, "max_prompt_tokens": result.config.max_prompt_tokens,
            "scored": [asdict(point) for point in result.outcome.scored]}


def run_facts(result: "RunResult", task: "Task") -> dict[str, Any]:
    """verdict.json: the decision, test figures, dev summary, ledgers."""
    v, o = result.verdict, result.outcome
    return {
        "task": task.name, "labels": task.labels,
        "splits": {name: len(split) for name, split in task.splits.items()},
        "serve": result.config.contract,
        "verdict": {"summary": v.summary(), "scored_by": scored_by(result.config.contract),
                    "serve": result.config.contract,
                    "interim": o.interrupted,
                    "alpha": v.alpha, "top_k": v.top_k,
                    "test_split_verdicts": result.test_looks, "baseline": v.baseline.id,
                    "dev_winner": v.dev_winner.id, "shipped": v.shipped.id,
                    "baseline_only": v.baseline_only.to_dict(),
                    "tested": [{"candidate_id": t.candidate.id, "confirmation": t.confirmation.to_dict(),
                                "p_adjusted": t.p_adjusted, "confirmed": bool(t.confirmed)} for t in v.tested]},
        "search": {name: getattr(o, name) for name in OUTCOME_FIELDS},
        "generation_check": result.generation_check.to_dict() if result.generation_check else None,
        "finalists": result.finalists.to_dict() if result.finalists else None,
        "prompt_tokens": token_facts(result),
        "per_class": result.per_class.to_dict() if result.per_class else None,
        "versions": result.versions,
        "frozen": list(result.space.frozen),
        "ledgers": {"search": result.search_ledger.summary(), "confirm": result.confirm_ledger.summary()},
        "wall_seconds": result.wall_seconds,
        "backend_use": result.backend_use,
        "servers": result.servers,
    }


def test_record_rows(result: "RunResult", task: "Task") -> list[dict[str, Any]]:
    """test_records.jsonl: each test example with the prediction of the baseline and of every candidate tested."""
    v = result.verdict
    test = {ex.id: ex for ex in task.splits["test"]}
    return [{"example_id": record.example_id, "text": "\n".join(test[record.example_id].fields.values()),
             "gold": record.gold, "pred": {cid: records[i].pred for cid, records in v.records.items()}}
            for i, record in enumerate(v.records[v.baseline.id])]


def read_run_config(run_dir: Path) -> RunConfig:
    """The config.json of an optimize run directory; anything missing or broken is one line naming it."""
    text = config_text(run_dir)
    try:
        return RunConfig.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "top level"
        raise UserError(f"{run_dir / CONFIG}: {where}: {err['msg']} (not the config of an optimize run?)") from None
