"""Serve the built site on localhost and drive Debian's Chromium with Playwright."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("CLUSTERKIT_SITE_HTML", ROOT / "_build" / "html"))
ARTIFACTS = Path(os.environ.get("CLUSTERKIT_ARTIFACTS", ROOT / "_build" / "artifacts"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a root user on a machine with no network beyond loopback (see README).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site_url():
    if not (SITE / "index.html").is_file():
        pytest.fail(
            f"no built site in {SITE}: run `nox -s docs` first (the browser session builds it)"
        )
    handler = functools.partial(_Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(
            "Chromium is not installed (apt-get install chromium); the browser session installs it"
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, site_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site_url)
    pg = context.new_page()
    pg.console_errors = []  # type: ignore[attr-defined]
    pg.external_requests = []  # type: ignore[attr-defined]

    def on_console(msg):
        if msg.type == "error":
            pg.console_errors.append(msg.text)

    def on_request(request):
        if not request.url.startswith((site_url, "data:", "about:", "blob:")):
            pg.external_requests.append(request.url)

    pg.on("console", on_console)
    pg.on("pageerror", lambda exc: pg.console_errors.append(str(exc)))
    pg.on("request", on_request)
    yield pg
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
