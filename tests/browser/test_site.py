"""The built site in a real browser: pages load cleanly, tabs sync, copy buttons copy the file.

Run by ``nox -s browser`` (it builds the site, installs Chromium and Playwright).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from .conftest import ROOT, SITE

EXAMPLES = ROOT / "examples"
SKIP_PAGES = {"genindex.html", "search.html"}


def _pages() -> list[str]:
    if not SITE.is_dir():
        return []
    return sorted(
        str(p.relative_to(SITE))
        for p in SITE.rglob("*.html")
        if p.name not in SKIP_PAGES and "_static" not in p.parts and "_sources" not in p.parts
    )


def _ids(html_file: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html_file.read_text(encoding="utf-8")))


def test_the_site_was_built():
    assert _pages(), f"no pages in {SITE}"


@pytest.mark.parametrize("rel", _pages())
def test_page_loads_without_errors_or_broken_links(page, site_url, rel):
    url = f"{site_url}/{rel}"
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{rel}: HTTP {response and response.status}"
    page.wait_for_timeout(50)
    assert page.console_errors == [], f"{rel}: console errors {page.console_errors}"
    assert page.external_requests == [], f"{rel}: fetched from outside: {page.external_requests}"
    refs = page.eval_on_selector_all(
        "a[href], img[src], link[href], script[src]",
        "els => els.map(e => e.getAttribute('href') || e.getAttribute('src'))",
    )
    broken = []
    for ref in refs:
        target = urljoin(url, ref)
        parsed = urlparse(target)
        if not target.startswith(site_url) or parsed.scheme not in {"http", "https"}:
            continue
        path = SITE / unquote(parsed.path[len(urlparse(site_url).path) :].lstrip("/"))
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            broken.append(f"{ref} (no file {path.relative_to(SITE)})")
        elif parsed.fragment and path.suffix == ".html" and parsed.fragment not in _ids(path):
            broken.append(f"{ref} (no anchor #{parsed.fragment})")
    assert broken == [], f"{rel}: broken local links: {broken}"


def _tab_pages() -> list[str]:
    return [
        rel
        for rel in _pages()
        if (SITE / rel).read_text(encoding="utf-8").count("sphinx-tabs-tab group-tab") >= 2
    ]


def test_choosing_a_site_tab_switches_every_group(page, site_url):
    pages = _tab_pages()
    assert pages, "no page has synchronised tab groups"
    rel = pages[0]
    page.goto(f"{site_url}/{rel}")
    groups = page.locator("div.sphinx-tabs")
    assert groups.count() >= 1
    labels = page.locator("div.sphinx-tabs >> nth=0 >> button.group-tab").all_inner_texts()
    assert len(labels) >= 2, f"{rel}: first tab group has {labels}"
    choice = labels[-1]
    first_panel = page.locator("div.sphinx-tabs >> nth=0 >> div.sphinx-tabs-panel:visible")
    before = first_panel.inner_text()
    page.locator("div.sphinx-tabs >> nth=0 >> button.group-tab", has_text=choice).click()
    after = first_panel.inner_text()
    assert after != before, "the panel did not change"
    for i in range(groups.count()):
        group = groups.nth(i)
        tab = group.locator("button.group-tab", has_text=choice)
        if tab.count():
            assert tab.first.get_attribute("aria-selected") == "true", (
                f"{rel}: tab group {i} did not follow the choice {choice!r}"
            )


def _example_for(caption: str) -> Path | None:
    hits = sorted(EXAMPLES.rglob(caption.strip()))
    return hits[0] if len(hits) == 1 else None


def test_copy_buttons_copy_the_tested_file(page, site_url):
    checked = 0
    for rel in _pages():
        html = (SITE / rel).read_text(encoding="utf-8")
        if "literal-block-wrapper" not in html:
            continue
        page.goto(f"{site_url}/{rel}")
        wrappers = page.locator("div.literal-block-wrapper")
        for i in range(wrappers.count()):
            wrapper = wrappers.nth(i)
            caption = wrapper.locator(".caption-text")
            if not caption.count() or not wrapper.is_visible():
                continue
            source = _example_for(caption.first.inner_text())
            if source is None:
                continue
            block = wrapper.locator("div.highlight").first
            block.hover()
            block.locator("button.copybtn").click()
            copied = page.evaluate("navigator.clipboard.readText()")
            assert copied == source.read_text(encoding="utf-8"), (
                f"{rel}: the copy button of {source.relative_to(ROOT)} copies different text"
            )
            checked += 1
    assert checked, "no included example file with a copy button was found"


def test_search_finds_jsrun_on_the_summit_pages(page, site_url):
    page.goto(f"{site_url}/search.html?q=jsrun")
    page.wait_for_selector("ul.search li", timeout=15000)
    hrefs = page.eval_on_selector_all("ul.search li a", "els => els.map(e => e.href)")
    assert any("summit" in h.lower() for h in hrefs), hrefs


def test_screenshots_and_phone_layout(browser, site_url, artifacts):
    recipe = next((r for r in _pages() if r.startswith("howto/bede/")), None)
    assert recipe, "no Bede recipe page"
    for name, viewport, scheme in [
        ("desktop", {"width": 1280, "height": 900}, "light"),
        ("phone", {"width": 390, "height": 844}, "light"),
        ("dark", {"width": 1280, "height": 900}, "dark"),
    ]:
        ctx = browser.new_context(viewport=viewport, color_scheme=scheme)
        pg = ctx.new_page()
        for label, rel in [("landing", "index.html"), ("recipe", recipe)]:
            pg.goto(f"{site_url}/{rel}")
            pg.screenshot(path=str(artifacts / f"{label}-{name}.png"), full_page=True)
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= viewport["width"] + 1, f"{rel} scrolls sideways at {name}: {width}"
        ctx.close()
    assert (artifacts / "landing-desktop.png").stat().st_size > 10_000
