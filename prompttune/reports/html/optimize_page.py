"""report.html of an `optimize` run, from its directory: verdict, anytime curve, the effect of
each search dimension, per-class test results, discordant examples, the prompt, the budget."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import numpy as np

from prompttune.comparing.plot import draw_anytime
from prompttune.core.config import RunConfig, Serve
from prompttune.core.errors import UserError
from prompttune.core.interrupt import interruption
from prompttune.core.run_files import (
    FACTS,
    PROMPT_STEMS,
    PromptRole,
    prompt_text,
    read_config,
    read_facts,
    read_prompt,
    read_test_records,
    read_trials,
    run_status,
)
from prompttune.reports import ci_text, model_phrase
from prompttune.reports.html.page import (
    Html,
    document,
    esc,
    figure,
    figure_img,
    para,
    pre,
    section,
    table,
    versions_section,
)
from prompttune.reports.html.tokens import marked_prompts, tokens_figure
from prompttune.reports.importance import FANOVA_NOTE, fanova_importances, scored_candidates, varying_dimensions
from prompttune.reports.optimize_report import (
    TOKENS_COUNTED,
    confirmable_gain,
    per_class_header,
    per_class_note,
    per_class_rows,
    rejected_line,
)
from prompttune.reports.serving_sections import (
    FINALISTS_NOTE,
    SERVER_COUNTS,
    SERVERS_NOTE,
    answer_shown,
    finalist_header,
    finalist_rows,
    generation_header,
    generation_intro,
    generation_rows,
    generation_warnings,
    server_rows,
)
from prompttune.scoring import contract
from prompttune.scoring.per_class import PerClass
from prompttune.scoring.serving import FinalistRescoring, GenerationCheck
from prompttune.statistics.stats import t_interval, wilson_ci

DISCORDANT_SHOWN = 6
INVALID = "(invalid)"


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _dimension_section(trials: list[dict], baseline_id: str) -> Html:
    scored = scored_candidates(trials)
    dims = varying_dimensions(scored)
    if not dims:
        return section("Search dimensions", para("No grid dimension varied among the evaluated candidates "
                                                 "(proposed prompts carry no dimension values).", "note"))
    base = next((s.values for s in scored if s.candidate_id == baseline_id), {})
    fig = figure(9, 1.2 + 0.32 * sum(len(v) + 1.5 for v in dims.values()))
    axes = fig.subplots(len(dims), 1, sharex=True, gridspec_kw={"height_ratios": [len(v) + 1.5 for v in dims.values()]},
                        squeeze=False)[:, 0]
    rows = []
    for ax, (name, values) in zip(axes, dims.items()):
        stats = []
        for value in values:
            scores = [s.score for s in scored if s.values[name] == value]
            low, high = t_interval(scores, (0.0, 1.0)) if len(scores) > 1 else (math.nan, math.nan)
            stats.append((float(np.mean(scores)), low, high, len(scores)))
            rows.append([name, _short(value, 70), len(scores), f"{stats[-1][0]:.3f}",
                         "–" if math.isnan(low) else ci_text((low, high))])
        y = np.arange(len(values))
        means = np.array([m for m, *_ in stats])
        err = np.array([[m - lo, hi - m] if not math.isnan(lo) else [0, 0] for m, lo, hi, _ in stats]).T
        colours = ["#d62728" if base.get(name) == v else "#1f77b4" for v in values]
        ax.errorbar(means, y, xerr=err, fmt="none", ecolor="grey", capsize=3)
        ax.scatter(means, y, c=colours, zorder=3)
        ax.set_yticks(y, [f"{_short(v)} (n={k})" for v, (*_, k) in zip(values, stats)], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(name, fontsize=10, loc="left")
        ax.grid(alpha=0.3, axis="x")
    axes[-1].set_xlabel("mean dev score of the candidates with this value (95% t-interval; red: baseline's value)")
    importances = fanova_importances(scored, dims)
    if isinstance(importances, str):
        fanova = para(importances, "note")
    else:
        fanova = table(["dimension", "fANOVA importance"], [[k, f"{v:.3f}"] for k, v in importances.items()], (1,))
    return section(
        "Search dimensions",
        para(f"{len(scored)} candidates with dimension values; each scored by its mean dev objective over every "
             f"example it was evaluated on (candidates scored on few examples are noisier). {FANOVA_NOTE}", "note"),
        figure_img(fig, "per-value mean dev score for each search dimension"), fanova,
        Html("<details><summary>per-value table</summary>" +
             table(["dimension", "value", "candidates", "mean dev score", "95% CI"], rows, (2, 3)) + "</details>"))


def _anytime_section(trials: list[dict], facts: dict, cap: int) -> Html:
    points = [(t["budget_spent"], t["best_so_far"]) for t in trials if t.get("best_so_far") is not None]
    spent = facts["ledgers"]["search"]["calls"]
    fig = figure(8.5, 4.2)
    ax = fig.subplots()
    draw_anytime(ax, [("best-so-far (dev)", points, spent)], ["best-so-far (dev)"], cap)
    baseline = facts["search"]["baseline_dev_score"]
    if not math.isnan(baseline):
        ax.axhline(baseline, color="#d62728", linestyle="--", linewidth=1.2,
                   label=f"baseline on the leader's dev examples ({baseline:.3f})")
    ax.set_title("Best dev objective so far against search calls (dotted: the cap)")
    if points or not math.isnan(baseline):
        ax.legend(loc="lower right", fontsize=8)
    return section("Anytime curve", figure_img(fig, "best dev objective against calls spent"),
                   para("Dev scores are selected on dev: optimistic by construction. Only the test split decides. "
                        "Each point is the leader's score on the dev examples it had been scored on then: where a "
                        "search scores its leaders on more examples (a race's growing blocks), the curve can fall.",
                        "note"))


def _confusion(gold: list[int], pred: list[int | None], n_labels: int) -> np.ndarray:
    matrix = np.zeros((n_labels, n_labels + 1), dtype=int)
    for g, p in zip(gold, pred):
        matrix[g, n_labels if p is None else p] += 1
    return matrix


def _test_section(records: list[dict], labels: list[str], who: dict[str, str]) -> Html:
    """Per-class accuracy and confusion matrix on test of each prompt in `who` (name -> candidate id)."""
    gold = [r["gold"] for r in records]
    preds = {name: [r["pred"][cid] for r in records] for name, cid in who.items()}
    rows, bars = [], {}
    for k, label in enumerate(labels):
        idx = [i for i, g in enumerate(gold) if g == k]
        cells = [label, len(idx)]
        for name, pred in preds.items():
            right = sum(pred[i] == k for i in idx)
            ci = wilson_ci(right, len(idx)) if idx else (math.nan, math.nan)
            bars.setdefault(name, []).append((right / len(idx) if idx else math.nan, *ci))
            cells += [f"{right / len(idx):.3f}" if idx else "–", ci_text(ci)]
        rows.append(cells)
    fig = figure(8.5, 3.6)
    ax = fig.subplots()
    x = np.arange(len(labels))
    for j, (name, values) in enumerate(bars.items()):
        acc = np.array([v[0] for v in values])
        err = np.clip(np.array([[a - lo, hi - a] for a, lo, hi in values], dtype=float).T, 0, None)  # rounding
        ax.bar(x + (j - (len(bars) - 1) / 2) * 0.38, acc, 0.38, yerr=err, capsize=3, label=name,
               color=("#9e9e9e", "#2e7d32")[j])
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test accuracy (Wilson 95% CI)")
    ax.legend(fontsize=8)
    show_invalid = any(p is None for pred in preds.values() for p in pred)
    cm = figure(4.2 * len(preds) + 0.6, 3.8)
    for ax2, (name, pred) in zip(cm.subplots(1, len(preds), squeeze=False)[0], preds.items()):
        matrix = _confusion(gold, pred, len(labels))[:, :len(labels) + show_invalid]
        ax2.imshow(matrix, cmap="Blues")
        for (i, j), count in np.ndenumerate(matrix):
            ax2.text(j, i, str(count), ha="center", va="center", fontsize=8,
                     color="white" if count > matrix.max() / 2 else "black")
        columns = labels + ([INVALID] if show_invalid else [])
        ax2.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
        ax2.set_yticks(range(len(labels)), labels, fontsize=8)
        ax2.set_xlabel("predicted")
        ax2.set_ylabel("gold")
        ax2.set_title(name, fontsize=10)
    header = ["class", "n"] + [h for name in preds for h in (f"{name} accuracy", "95% CI")]
    return section(f"Held-out test per class: {' vs '.join(preds)}",
                   table(header, rows, (1, 2, 4)), figure_img(fig, "per-class test accuracy"),
                   figure_img(cm, "confusion matrices on test"))


def _discordant_section(records: list[dict], labels: list[str], base_id: str, best_id: str, best_name: str) -> Html:
    def name(pred: int | None) -> str:
        return INVALID if pred is None else labels[pred]

    parts = []
    for title, wins in ((f"{best_name} right, baseline wrong", best_id), (f"baseline right, {best_name} wrong", base_id)):
        other = base_id if wins == best_id else best_id
        rows = [r for r in records if r["pred"][wins] == r["gold"] != r["pred"][other]]
        shown = [[r["example_id"], _short(r["text"], 320), labels[r["gold"]], name(r["pred"][base_id]),
                  name(r["pred"][best_id])] for r in rows[:DISCORDANT_SHOWN]]
        parts += [Html(f"<h3>{esc(title)}: {len(rows)} example(s)"
                       f"{f', first {len(shown)} shown' if len(rows) > len(shown) else ''}</h3>"),
                  table(["example", "text", "gold", "baseline says", f"{best_name} says"], shown) if shown else
                  para("none", "note")]
    return section("Discordant test examples", *parts)


def _diff(before: str, after: str) -> Html:
    """The whole prompt, with removed lines red and added lines green."""
    lines = []
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        tag, text = line[:2], esc(line[2:]) or "&nbsp;"
        if tag == "? ":
            continue
        lines.append(f'<span class="{"add" if tag == "+ " else "del"}">{tag}{text}</span>' if tag in ("+ ", "- ")
                     else f"  {text}\n")
    return Html("<pre>" + "".join(lines) + "</pre>")


def _prompt_section(run_dir: Path, facts: dict, best_role: PromptRole) -> Html:
    shipped_baseline = facts["verdict"]["shipped"] == facts["verdict"]["baseline"]
    best = read_prompt(run_dir, best_role)
    text, baseline = prompt_text(run_dir, best_role), prompt_text(run_dir, "baseline")
    what = ("The baseline ships (nothing was confirmed); shown: the dev winner, which did not ship."
            if shipped_baseline and best_role == "dev_winner" else
            "The baseline ships: no candidate beat it on dev." if shipped_baseline else
            "The confirmed prompt ships.")
    return section(f"The prompt ({PROMPT_STEMS[best_role]}.txt): exactly as the model saw it on one test example",
                   para(what), pre(text),
                   para(f"Change from the baseline: {best['diff_from_baseline']}"),
                   Html(f"<h3>Diff from the baseline ({PROMPT_STEMS['baseline']}.txt)</h3>"), _diff(baseline, text))


def _budget_section(facts: dict, config: dict) -> Html:
    search, confirm, s = facts["ledgers"]["search"], facts["ledgers"]["confirm"], facts["search"]
    rows = [["search (charged to the budget)", f"{search['calls']} / {search['cap_calls']}",
             ", ".join(f"{k} {v}" for k, v in sorted(search["calls_by_kind"].items())) or "–",
             search["prompt_tokens"], search["completion_tokens"]],
            ["held-out verdict (not charged)", confirm["calls"],
             ", ".join(f"{k} {v}" for k, v in sorted(confirm["calls_by_kind"].items())) or "all cached",
             confirm["prompt_tokens"], confirm["completion_tokens"]]]
    servers = facts.get("servers")  # absent in runs written before it was recorded
    return section("Budget and tokens",
                   table(["ledger", "calls", "by kind", "prompt tokens", "completion tokens"], rows, (1, 3, 4)),
                   para(f"{s['n_trials']} trials over {s['n_candidates']} candidates"
                        f"{'; stopped by the cap' if s['stopped_by_budget'] else ''}; token cap "
                        f"{config.get('budget_tokens') or 'none'}; wall time {facts['wall_seconds']:.0f} s."),
                   *([Html("<h3>Servers</h3>"),
                      table(["server", *SERVER_COUNTS], server_rows(servers), tuple(range(1, len(SERVER_COUNTS) + 1))),
                      para(SERVERS_NOTE, "note")]
                     if servers else []))


def _power_paragraphs(n: int, alpha: float, top_k: int, baseline_accuracy: float) -> list[Html]:
    """The gain this test split confirms with 80% power, and a warning where it is more than 5 points."""
    statement, warning = confirmable_gain(n, alpha, top_k, baseline_accuracy)
    return [para(f"{statement[0].upper()}{statement[1:]}."),
            *([Html(f'<p class="warn"><b>Warning: {esc(warning)}.</b></p>')] if warning else [])]


def _verdict_section(facts: dict, serve: Serve) -> Html:
    v, s = facts["verdict"], facts["search"]
    base = v["baseline_only"]
    rows = [[rank, t["candidate_id"], f"{t['confirmation']['best_accuracy']:.3f}", ci_text(t["confirmation"]["best_ci"]),
             f"{t['confirmation']['gain']:+.3f} {ci_text(t['confirmation']['gain_ci'])}",
             f"{t['confirmation']['comparison']['b']} / {t['confirmation']['comparison']['c']}",
             f"{t['confirmation']['comparison']['p_one_sided']:.3g}", f"{t['p_adjusted']:.3g}",
             Html('<b class="ok">yes</b>' if t["confirmed"] else '<span class="bad">no</span>')]
            for rank, t in enumerate(v["tested"], 1)]
    leader = ("The search's leader by label log-probabilities (its proxy; the dev winner tested is the finalists' best "
              "by generation, below)" if facts.get("finalists") else "Dev winner")
    dev = (f"{leader} {s['leader_dev_score']:.3f} on {s['leader_dev_n']} dev examples vs baseline "
           f"{s['baseline_dev_score']:.3f} on {s['baseline_dev_n']} of them, selected from F = {s['family']} "
           "candidates (selected on dev: optimistic)." if s["leader_dev_n"] else "The search scored no dev example.")
    return section(
        "Verdict",
        Html(f'<div class="verdict {"good" if v["shipped"] != v["baseline"] else "kept"}">'
             f"{esc(v['summary'][0].upper() + v['summary'][1:])}.</div>"),
        para(f"Baseline test accuracy {base['baseline_accuracy']:.3f} {ci_text(base['baseline_ci'])} (Wilson 95%) on "
             f"{base['n']} held-out test examples the optimizer never saw. {dev}"),
        para(f"Serving contract serve: {serve} ({contract.WORDS[serve]}). The verdict scored prompts by "
             f"{contract.scored_by(serve)}."),
        *_power_paragraphs(base["n"], v["alpha"], v["top_k"], base["baseline_accuracy"]),
        table(["dev rank", "candidate", "test accuracy", "95% CI (Wilson)", "gain [paired bootstrap 95% CI]",
               "b / c", "one-sided McNemar p", "Holm p", "confirmed"], rows, (0, 2, 6, 7))
        if rows else para("The dev winner is the baseline: nothing was tested."))


def _generation_section(facts: dict) -> list[Html]:
    """--check-generation: the prompts served by generation beside the verdict's figures (absent when off)."""
    if not facts.get("generation_check"):
        return []
    check = GenerationCheck.from_dict(facts["generation_check"])
    title = (f"Served by generation: the verdict's {check.n} test examples (serve: generate)" if check.by_verdict
             else f"Served by generation: first {check.n} test examples")
    if check.skipped:
        return [section(title, para(f"Skipped: {check.skipped}.", "note"))]
    invalid = [[p.role, "; ".join(answer_shown(text) for text in p.invalid_answers)]
               for p in check.prompts if p.invalid_answers]
    return [section(title,
                    *([] if check.by_verdict else [para(f"{check.headline()}.")]),
                    para(generation_intro(check)),
                    table(generation_header(check), generation_rows(check), (2, 3, 4)),
                    *[Html(f'<p class="warn"><b>Warning: {esc(warning)}.</b></p>')
                      for warning in generation_warnings(check)],
                    *([Html("<h3>Answers without a label</h3>"), table(["prompt", "answers"], invalid)]
                      if invalid else []))]


def _finalists_section(facts: dict) -> list[Html]:
    """serve generate: the search's top prompts and the baseline rescored by generation on dev."""
    if not facts.get("finalists"):
        return []
    rescoring = FinalistRescoring.from_dict(facts["finalists"])
    return [section(f"Finalists rescored by generation: {rescoring.n} dev examples",
                    para(f"{FINALISTS_NOTE} {rescoring.calls} calls."),
                    table(finalist_header(), finalist_rows(rescoring), (1, 2, 3)))]


def _tokens_section(facts: dict, config: dict) -> list[Html]:
    """Prompt tokens per request of the baseline and the shipped prompt, the limits, and the tokens-against-score
    plot (absent in runs written before it was recorded)."""
    tokens = facts.get("prompt_tokens")
    if tokens is None:
        return []
    v = facts["verdict"]
    fig = tokens_figure(tokens, marked_prompts(v["baseline"], v["dev_winner"], v["shipped"]), config["objective"])
    ceiling = tokens["max_prompt_tokens"]
    frozen = facts.get("frozen") or []
    return [section("Prompt tokens",
                    para(f"Prompt tokens per request: {TOKENS_COUNTED}."
                         + (f" Ceiling --max-prompt-tokens {ceiling}." if ceiling is not None else "")),
                    table(["prompt", "tokens per request"], list(tokens["per_request"].items()), (1,)),
                    *([para("Frozen texts, kept verbatim by every candidate scored:"),
                       table(["frozen text"], [[text] for text in frozen])] if frozen else []),
                    para(rejected_line(facts["search"].get("rejected", {}))),
                    figure_img(fig, "dev score against prompt tokens per request") if fig is not None else
                    para("The search scored no candidate on dev through prompttune's driver: nothing to plot.", "note"))]


def _class_changes_section(facts: dict) -> list[Html]:
    """Per-class recall and precision of each prompt with the classes lost flagged (absent in runs written
    before it was recorded)."""
    if not facts.get("per_class"):
        return []
    figures = PerClass.from_dict(facts["per_class"])
    warning = figures.warning()
    numeric = tuple(range(1, len(per_class_header(figures)) - 1))
    return [section("Per-class changes on test",
                    Html(f'<p class="warn"><b>Warning: {esc(warning)}.</b></p>') if warning else
                    para(f"No class loses more than {figures.margin}.", "ok"),
                    table(per_class_header(figures), per_class_rows(figures), numeric),
                    para(per_class_note(figures.margin).replace("`", ""), "note"))]


def _interrupted_note(run_dir: Path, facts: dict) -> list[Html]:
    """A run stopped before its end: its verdict is of the best candidate so far, and it can be finished."""
    if run_status(run_dir) != "interrupted":
        return []
    search = facts["ledgers"]["search"]
    return [Html(f'<div class="verdict kept"><b>Interrupted and resumable</b> ({esc(interruption(run_dir)["reason"])}). '
                 f"The search stopped after {facts['search']['n_trials']} trials and {search['calls']} of "
                 f"{search['cap_calls']} calls; the verdict below is of the best candidate so far. "
                 f"<code>optimize --resume {esc(run_dir)}</code> finishes the search and replaces this report.</div>")]


def optimize_page(run_dir: Path) -> str:
    config = read_config(run_dir)
    serve = RunConfig.model_validate(config).contract  # an older config.json says `scoring`, not `serve`
    if not (run_dir / FACTS).is_file():
        raise UserError(f"{run_dir} is an unfinished run (no verdict yet): `optimize --resume {run_dir}` finishes it")
    facts, trials, records = read_facts(run_dir), read_trials(run_dir), read_test_records(run_dir)
    v, labels = facts["verdict"], facts["labels"]
    best_id = v["shipped"] if v["shipped"] != v["baseline"] else v["dev_winner"]
    best_role: PromptRole = "shipped" if best_id == v["shipped"] else "dev_winner"
    best_name = "shipped" if best_role == "shipped" else "dev winner"
    parts = [*_interrupted_note(run_dir, facts), _verdict_section(facts, serve),
             *_generation_section(facts), *_finalists_section(facts), _anytime_section(trials, facts, config["budget"]),
             _dimension_section(trials, v["baseline"]), *_class_changes_section(facts)]
    if best_id != v["baseline"]:
        parts += [_test_section(records, labels, {"baseline": v["baseline"], best_name: best_id}),
                  _discordant_section(records, labels, v["baseline"], best_id, best_name)]
    else:
        parts.append(_test_section(records, labels, {"baseline": v["baseline"]}))
    parts += [_prompt_section(run_dir, facts, best_role), *_tokens_section(facts, config), _budget_section(facts, config),
              *versions_section(facts),
              para(f"Generated from {run_dir.name}/ (config.json, trials.jsonl, verdict.json, test_records.jsonl, "
                   "the prompt files); the same numbers in words: report.md.", "note")]
    splits = facts["splits"]
    model = model_phrase(config["model"], config["backend"], config["dtype"], facts.get("versions", {}))
    subtitle = (f"Model {model.replace('`', '')}, serve {serve}, "
                f"objective {config['objective']}; splits train {splits['train']} / dev {splits['dev']} / "
                f"test {splits['test']}; budget {config['budget']} calls.")
    return document(f"prompttune run: {facts['task']} · {config['optimizer']} · seed {config['seed']}", subtitle, parts)
