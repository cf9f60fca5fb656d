"""The frame every report.html shares: one self-contained file (inline CSS, figures as base64 PNG,
no network) and a tiny script that writes onto <body> how many images decoded and any script
error, so a headless browser can check the page (`data-images-ok="N/M"`, `data-errors`)."""

from __future__ import annotations

import base64
import html
import io
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:24px auto;
padding:0 20px;color:#1d1d1f}
h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;margin-top:34px;border-bottom:1px solid #ddd}
.meta{color:#555}.note{color:#666;font-size:13px}
.verdict{padding:14px 18px;border-radius:8px;font-size:17px;margin:16px 0}
.verdict.good{background:#e7f6ea;border:1px solid #8cc99a}.verdict.kept{background:#f3f3f3;border:1px solid #bbb}
table{border-collapse:collapse;margin:10px 0;font-size:13.5px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f6f6f6}
td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:8px 0}
pre{background:#f7f7f9;border:1px solid #e3e3e8;padding:10px;white-space:pre-wrap;font-size:13px}
pre .add{background:#dff5e1;display:block}pre .del{background:#fbe2e2;display:block}
.ok{color:#1a7f37}.bad{color:#c62828}.warn{color:#a15c00}
"""

# Registered first (capturing, so failed <img> loads count too); the summary is written on load.
STATUS_SCRIPT = """<script>
window.reportErrors = [];
window.addEventListener("error", function (e) {
  var t = e.target;
  window.reportErrors.push(t && t !== window && t.tagName ? "failed to load " + t.tagName : String(e.message));
}, true);
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var ok = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-ok", ok + "/" + images.length);
  document.body.setAttribute("data-errors", window.reportErrors.join(" | "));
});
</script>"""


class Html(str):
    """Markup that is already escaped; every other value is escaped where it is written."""


def esc(value: object) -> Html:
    return Html(html.escape(str(value)))


def cell(value: object) -> str:
    return value if isinstance(value, Html) else esc(value)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()) -> Html:
    """A table; columns whose index is in `numeric` are right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{cell(v)}</td>'
                                    for i, v in enumerate(row)) + "</tr>" for row in rows)
    return Html(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def png_img(data: bytes, alt: str) -> Html:
    return Html(f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">')


def figure(width: float, height: float) -> Figure:
    """A pyplot-free figure (no global state, Agg canvas)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def figure_img(fig: Figure, alt: str) -> Html:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    return png_img(buffer.getvalue(), alt)


def section(title: str, *parts: str) -> Html:
    return Html(f"<section><h2>{esc(title)}</h2>\n" + "\n".join(parts) + "</section>")


def versions_section(facts: dict) -> list[Html]:
    """What produced the run, from its verdict.json or summary.json (absent in runs written before it was
    recorded)."""
    versions = facts.get("versions")
    return [section("Versions", table(["component", "version"], list(versions.items())))] if versions else []


def para(text: object, css: str = "") -> Html:
    return Html(f'<p{f" class={css}" if css else ""}>{cell(text)}</p>')


def pre(text: str) -> Html:
    return Html(f"<pre>{esc(text)}</pre>")


def document(title: str, subtitle: str, parts: Sequence[str]) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style>{STATUS_SCRIPT}</head>\n<body><h1>{esc(title)}</h1>"
            f'<p class="meta">{cell(subtitle)}</p>\n' + "\n".join(parts) + "\n</body></html>\n")
