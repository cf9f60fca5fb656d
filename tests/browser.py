"""Headless Chromium over a report.html: load it, read back the status that the page's own script
writes onto <body> (images decoded, script errors), and take a screenshot. Plain chromium CLI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--virtual-time-budget=5000")


def chromium_or_skip() -> str:
    """The browser; absent, the test skips on a workstation and fails under CI (make test installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("CI is set but chromium is missing: `make test` installs Debian's chromium")
    pytest.skip("chromium is not installed (`make test` installs it; under CI its absence fails the test)")


@dataclass
class PageCheck:
    images_ok: int
    images: int
    errors: str
    console_errors: list[str]


def check_page(browser: str, page: Path, screenshot: Path, width: int = 1280, height: int = 4200) -> PageCheck:
    """Load `page` twice: once to dump the DOM after load, once for the screenshot."""
    url = page.resolve().as_uri()
    dom = subprocess.run([browser, *FLAGS, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, f"no <body> in the dumped DOM; chromium said: {dom.stderr[-2000:]}"
    attrs = dict(re.findall(r'(data-[\w-]+)="([^"]*)"', body.group(1)))
    assert "data-images-ok" in attrs, f"the page's load script did not run: {body.group(0)[:300]}"
    ok, total = map(int, attrs["data-images-ok"].split("/"))
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    subprocess.run([browser, *FLAGS, f"--window-size={width},{height}", f"--screenshot={screenshot}", url],
                   capture_output=True, text=True, timeout=120, check=True)
    return PageCheck(ok, total, attrs.get("data-errors", ""), console)
