"""report.html of a `compare` run, from its directory (summary.json, config.json, anytime.png)."""

from __future__ import annotations

from pathlib import Path

from prompttune.commands.compare_report import HEADER, MARK, _ci, spend_cells
from prompttune.commands.html.page import Html, document, esc, para, png_img, read_json, section, table


def _arm_rows(summary: dict) -> list[list[object]]:
    return [[a["arm"], f"{a['test_accuracy']:.3f}", _ci(a["test_accuracy_ci"]), f"{a['gain']:+.3f}",
             _ci(a["gain_ci"]), f"{sum(p < 0.05 and r['confirmation']['gain'] > 0 for p, r in zip(a['p_bh'], a['runs']))}"
             f"/{len(a['runs'])}", *spend_cells(a["spend"]), a["interval"]] for a in summary["arms"]]


def _seed_rows(summary: dict, run_dir: Path) -> list[list[object]]:
    rows = []
    for arm in summary["arms"]:
        for run, p_bh in zip(arm["runs"], arm["p_bh"]):
            c = run["confirmation"]
            link = Path(run["run_dir"])
            local = link.relative_to(run_dir) if link.is_relative_to(run_dir) else link
            rows.append([arm["arm"], run["seed"], f"{c['best_accuracy']:.3f}", _ci(c["best_ci"]),
                         f"{c['gain']:+.3f} {_ci(c['gain_ci'])}", f"{c['comparison']['b']} / {c['comparison']['c']}",
                         f"{c['comparison']['p_two_sided']:.3g}", f"{p_bh:.3g}",
                         "–" if run["best_dev"] is None else f"{run['best_dev']:.3f}",
                         run["search"]["calls"], run["shared_cache_hits_charged"],
                         run["search"]["prompt_tokens"] + run["search"]["completion_tokens"],
                         "yes" if run["stopped_by_budget"] else "no", f"{run['wall_seconds']:.0f}",
                         Html(f'<a href="{esc(local.as_posix())}/report.html">{esc(local.name)}</a>')])
    return rows


def compare_page(run_dir: Path) -> str:
    config = read_json(run_dir / "config.json")
    summary = read_json(run_dir / "summary.json")
    run = config["run"]
    first = summary["arms"][0]["runs"][0]["confirmation"]
    css = {"ok": "ok", "failed": "bad", "warning": "warn"}
    checks = "".join(f'<li class="{css[k["status"]]}">{MARK[k["status"]]} {esc(k["claim"])} '
                     f'<span class="note">({esc(k["detail"])})</span></li>' for k in summary["fairness"])
    matched = summary["caps"][0]
    parts = [
        section("Held-out test accuracy per optimizer",
                para(f"Baseline prompt: {first['baseline_accuracy']:.3f} {_ci(first['baseline_ci'])} on {first['n']} "
                     "test examples. p-values: exact McNemar of each seed's winner against the baseline, "
                     "Benjamini–Hochberg-corrected across arms within each seed."),
                table([HEADER[0], HEADER[1], HEADER[2], HEADER[3], HEADER[4], HEADER[6], HEADER[8], HEADER[9],
                       "interval"], _arm_rows(summary), (1, 3, 5, 6, 7))),
        section("Per seed",
                table(["optimizer", "seed", "test acc", "95% CI (Wilson)", "gain [paired bootstrap CI]", "b / c",
                       "McNemar p", "p (BH)", "dev (selected)", "search calls", "shared-cache hits charged",
                       "tokens", "stopped by cap", "wall s", "run"], _seed_rows(summary, run_dir),
                      (1, 2, 6, 7, 8, 9, 10, 11, 13))),
        section("Anytime curves", png_img((run_dir / "anytime.png").read_bytes(), "anytime curves per optimizer"),
                para("Best-so-far dev score against search calls: thick line the mean over seeds, band the range "
                     "over seeds, dots where each run last updated; dotted: the cap.", "note")),
        section("Fairness checks", Html(f"<ul>{checks}</ul>"),
                para("Spend and caps are read at the model, independently of the ledgers; a warning fails nothing.",
                     "note")),
        para("Generated from summary.json and config.json; the pairwise tests and the DSPy notes are in report.md.",
             "note"),
    ]
    subtitle = (f"Model {run['model']}, scoring {run['scoring']}; {matched['unit']}-matched: cap {matched['limit']} "
                f"search {matched['unit']} per run; "
                f"splits train {run['train_size']} / dev {run['dev_size']} / test {run['test_size']} shared by all "
                f"arms; seeds {', '.join(map(str, config['seeds']))}.")
    return document(f"prompttune compare: {Path(run['task']).stem} · {', '.join(config['optimizers'])}", subtitle, parts)
