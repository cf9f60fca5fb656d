"""Which search dimensions moved the dev score: the candidates of a run's trials that carry dimension values
(grid draws, and prompts an optimizer built over a grid point), pooled, and
Optuna's fANOVA over them; shared by report.md and report.html so both say the same."""

from __future__ import annotations

import json
from dataclasses import dataclass

MIN_FANOVA_CANDIDATES = 10  # below this a random forest over the grid says nothing
FANOVA_NOTE = ("Importances: Optuna's fANOVA (a random forest over the candidates' dimension values, seed 0): "
               "the share of the variance in dev score each dimension explains on its own. A prompt built over a "
               "grid point (reflect's calibrated twins, written instructions, chosen demos) counts with that "
               "point's values, a value a move replaced standing as that move's own value.")


@dataclass
class Scored:
    """One candidate with dimension values: those values and its n-weighted mean dev score over its trials."""

    candidate_id: str
    values: dict[str, str]
    score: float
    n: int


def value_label(value: object) -> str:
    """A dimension value as text: strings quoted (separators stay visible), the rest as JSON."""
    return json.dumps(value, ensure_ascii=False)


def scored_candidates(trials: list[dict]) -> list[Scored]:
    """Candidates with dimension values, with their dev score pooled over trials."""
    pooled: dict[str, Scored] = {}
    for t in trials:
        if not t.get("dimensions"):
            continue
        s = pooled.setdefault(t["candidate_id"], Scored(t["candidate_id"], {k: value_label(v) for k, v in
                                                                            t["dimensions"].items()}, 0.0, 0))
        s.score = (s.score * s.n + t["score"] * t["n"]) / (s.n + t["n"])
        s.n += t["n"]
    return list(pooled.values())


def varying_dimensions(scored: list[Scored]) -> dict[str, list[str]]:
    """Dimensions that took two or more values among the evaluated candidates, values in order seen."""
    seen: dict[str, dict[str, None]] = {}
    for s in scored:
        for name, value in s.values.items():
            seen.setdefault(name, {})[value] = None
    return {name: list(values) for name, values in seen.items() if len(values) > 1}


def fanova_importances(scored: list[Scored], dims: dict[str, list[str]]) -> dict[str, float] | str:
    """Optuna's fANOVA over the candidates (one in-memory trial each), or why it was skipped."""
    if len(scored) < MIN_FANOVA_CANDIDATES or not dims:
        return (f"fANOVA skipped: {len(scored)} candidate(s) with {len(dims)} varying dimension(s); it needs "
                f"at least {MIN_FANOVA_CANDIDATES} candidates and one dimension that varies.")
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.importance import FanovaImportanceEvaluator

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction="maximize")
        distributions = {name: CategoricalDistribution(values) for name, values in dims.items()}
        study.add_trials([optuna.trial.create_trial(params={name: s.values[name] for name in dims},
                                                    distributions=distributions, value=s.score) for s in scored])
        importances = optuna.importance.get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0))
        return {name: float(share) for name, share in importances.items()}
    finally:
        optuna.logging.set_verbosity(verbosity)


