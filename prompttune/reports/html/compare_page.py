"""report.html of a `compare` run, from its directory (summary.json, config.json, anytime.png)."""

from __future__ import annotations

from pathlib import Path

from prompttune.comparing.summary import CMH_LABEL
from prompttune.core.config import RunConfig
from prompttune.core.run_files import ANYTIME_PLOT, read_config, read_summary
from prompttune.reports import ci_text, model_name
from prompttune.reports.compare_report import (
    CLASS_FLAG_HEADER,
    CLASS_FLAG_NOTE,
    EQUAL_SPEND_NOTE,
    HEADER,
    MARK,
    MODE_TEXT,
    SEED_HEADER,
    SEED_PAIR_HEADER,
    class_flag_cells,
    coverage_cells,
    seed_pair_cells,
    spend_cells,
)
from prompttune.reports.html.page import Html, document, esc, para, png_img, section, table, versions_section
from prompttune.scoring.contract import scored_by
from prompttune.scoring.per_class import PerClass


def _scores(scores: dict) -> list[str]:
    return [f"{scores['test_accuracy']:.3f}", ci_text(scores["test_accuracy_ci"]), f"{scores['gain']:+.3f}",
            ci_text(scores["gain_ci"])]


def _arm_rows(summary: dict) -> list[list[object]]:
    return [[a["arm"], *_scores(a["guarded"]), *_scores(a["raw"]),
             f"{sum(p < 0.05 and r['confirmation']['gain'] > 0 for p, r in zip(a['p_bh'], a['runs']))}"
             f"/{len(a['runs'])}", *spend_cells(a["spend"]), *coverage_cells(a["coverage"]), a["interval"]]
            for a in summary["arms"]]


def _coverage_rows(summary: dict) -> list[list[object]]:
    return [[a["arm"], ", ".join(a["coverage"]["searched"]), ", ".join(a["coverage"]["held"]) or "–",
             ", ".join(f"{k}={v!r}" for k, v in a["coverage"]["options"].items()) or "–"] for a in summary["arms"]]


def _seed_rows(summary: dict, run_dir: Path) -> list[list[object]]:
    rows = []
    for arm in summary["arms"]:
        for run, p_bh in zip(arm["runs"], arm["p_bh"]):
            c, raw = run["confirmation"], run["raw_confirmation"]
            link = Path(run["run_dir"])
            local = link.relative_to(run_dir) if link.is_relative_to(run_dir) else link
            rows.append([arm["arm"], run["seed"], f"{raw['best_accuracy']:.3f}", run["verdict"],
                         f"{c['best_accuracy']:.3f}", run["search"]["calls"], run["shared_cache_hits_charged"],
                         run["search"]["prompt_tokens"] + run["search"]["completion_tokens"],
                         f"{run['served_by_model']['requests']} / {run['served_by_model']['tokens']}",
                         "yes" if run["stopped_by_budget"] else "no",
                         f"{c['gain']:+.3f} {ci_text(c['gain_ci'])}", f"{c['comparison']['b']} / {c['comparison']['c']}",
                         f"{c['comparison']['p_two_sided']:.3g}", f"{p_bh:.3g}",
                         "–" if run["best_dev"] is None else f"{run['best_dev']:.3f}", f"{run['wall_seconds']:.0f}",
                         Html(f'<a href="{esc(local.as_posix())}/report.html">{esc(local.name)}</a>')])
    return rows


def _class_flag_section(summary: dict) -> list[Html]:
    """The classes each arm's pick lost against the baseline (absent in comparisons written before they were
    recorded)."""
    figures = {a["arm"]: [(r["seed"], PerClass.from_dict(r["per_class"])) for r in a["runs"] if r.get("per_class")]
               for a in summary["arms"]}
    rows = [class_flag_cells(arm, f) for arm, f in figures.items() if f]
    if not rows:
        return []
    return [section("Classes lost", table(CLASS_FLAG_HEADER, rows),
                    para(CLASS_FLAG_NOTE.format(margin=summary["class_loss_margin"]).replace("`", ""), "note"))]


def _seed_pair_rows(summary: dict) -> list[list[object]]:
    return [seed_pair_cells(t) for t in summary["seed_pairs"]]


def compare_page(run_dir: Path) -> str:
    config, summary = read_config(run_dir), read_summary(run_dir)
    run = config["run"]
    first = summary["arms"][0]["runs"][0]["confirmation"]
    space = summary["arms"][0]["coverage"]
    css = {"ok": "ok", "failed": "bad", "warning": "warn"}
    checks = "".join(f'<li class="{css[k["status"]]}">{MARK[k["status"]]} {esc(k["claim"])} '
                     f'<span class="note">({esc(k["detail"])})</span></li>' for k in summary["fairness"])
    matched = summary["caps"][0]
    parts = [
        section("What each arm searched",
                para(f"{summary['headline'].capitalize()} (--mode {summary['mode']}): {MODE_TEXT[summary['mode']]} "
                     f"Space {space['space']}, hash {space['space_hash']}."),
                table(["optimizer", "searched", "held at the baseline", "options that hold it"],
                      _coverage_rows(summary))),
        section("Held-out test accuracy per optimizer",
                para(f"Baseline prompt, per seed's test split of {first['n']} examples: "
                     + "; ".join(f"s{r['seed']} {r['confirmation']['baseline_accuracy']:.3f} "
                                 f"{ci_text(r['confirmation']['baseline_ci'])}" for r in summary["arms"][0]["runs"])
                     + ". Raw: the arm's own pick (the dev winner, or DSPy's best program); guarded: what "
                     "it ships after the verdict protocol (the raw pick if confirmed on test, else the baseline), "
                     "both from the calls its verdict made. p-values: exact McNemar of what each seed ships against "
                     "the baseline, Benjamini–Hochberg-corrected across arms within each seed."),
                table([*HEADER[:9], HEADER[10], HEADER[12], HEADER[13], HEADER[15], HEADER[16], "interval"],
                      _arm_rows(summary), (1, 3, 5, 7, 9, 10, 11))),
        section("Per seed",
                table([*SEED_HEADER, "guarded gain [paired bootstrap CI]", "b / c", "McNemar p", "p (BH)",
                       "dev (selected)", "wall s", "run"], _seed_rows(summary, run_dir),
                      (1, 2, 4, 5, 6, 7, 8, 12, 13, 14, 15))),
        *_class_flag_section(summary),
        *([section("Accuracy at equal spend", para(EQUAL_SPEND_NOTE.format(**summary["equal_spend"])),
                   table(["optimizer", "test acc of the pick (mean)", "95% CI", "per seed"],
                         [[a["arm"], f"{a['mean']:.3f}", ci_text(a["ci"]),
                           ", ".join(f"s{seed} {acc:.3f}" for seed, acc in a["per_seed"].items())]
                          for a in summary["equal_spend"]["arms"]], (1,)))]
          if summary.get("equal_spend") else []),
        section("Arms head to head across seeds",
                para("Mean over seeds (each its own data draw) of the difference in test accuracy (first − "
                     "second), its Student-t 95% interval, a paired t-test over seeds, an exact sign-flip "
                     "permutation test and, for what ships, a CMH test on the pooled test examples stratified by "
                     "seed; p (BH over the pairs of one keep rule). Which optimizer is better rests on the "
                     f"across-seed tests only; the CMH test is {CMH_LABEL}."),
                table(SEED_PAIR_HEADER, _seed_pair_rows(summary), (3, 4, 6, 7, 8))),
        section("Anytime curves", png_img((run_dir / ANYTIME_PLOT).read_bytes(), "anytime curves per optimizer"),
                para("Best-so-far dev score against search calls: thick line the mean over seeds, band the range "
                     "over seeds, dots where each run last updated; dotted: the cap.", "note")),
        section("Fairness checks", Html(f"<ul>{checks}</ul>"),
                para("Spend and caps are read at the model, independently of the ledgers; a warning fails nothing.",
                     "note")),
        *versions_section(summary),
        para("Generated from summary.json and config.json; the McNemar tests between the leading arms and the DSPy "
             "notes are in report.md.", "note"),
    ]
    model = model_name(run["model"], summary.get("versions", {}))
    serve = RunConfig.model_validate(run).contract  # an older config.json says `scoring`, not `serve`
    subtitle = (f"{summary['headline'].capitalize()}. Model {model}, serve {serve} (verdicts by "
                f"{scored_by(serve)}); "
                f"{matched['unit']}-matched: cap {matched['limit']} search {matched['unit']} per run; "
                f"splits train {run['train_size']} / dev {run['dev_size']} / test {run['test_size']} shared by all "
                f"arms; seeds {', '.join(map(str, config['seeds']))}.")
    return document(f"prompttune compare: {Path(run['task']).stem} · {', '.join(config['optimizers'])}", subtitle, parts)
