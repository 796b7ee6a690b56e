"""The documentation site builds without a warning and every page works in a real browser.

The site is built with ``mkdocs build --strict`` (as ``make docs`` builds it) into a temporary
folder, served on 127.0.0.1, and every page is opened in headless Chromium (Debian's
``chromium`` package). From the DOM Chromium renders, each page must have its main content and
must not be a 404, every internal link must reach a page of the site (and the element its
``#fragment`` names), and the API page must document every public name of ``anyclip``,
``anyclip.tree``, ``anyclip.torch`` and ``anyclip.optax``.

Without mkdocs or Chromium these tests are a visible SKIP; when ``CI`` is ``true`` (``.ci/run``
installs both) they fail instead.
"""

from __future__ import annotations

import ast
import concurrent.futures
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest

import anyclip

#: One pytest-xdist worker runs this module: the site is built and served once (module-scoped
#: fixtures).
pytestmark = pytest.mark.xdist_group("docs-site")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _page_path(md: Path) -> str:
    """The site path of a Markdown file of docs/ (``api/index.md`` -> ``api/``)."""
    rel = md.relative_to(DOCS).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "index" else rel.parts
    return "".join(f"{part}/" for part in parts)


#: The site's pages, one per Markdown file of docs/ (``--strict`` fails on a file left out of
#: the nav), as paths under the site root.
PAGES = sorted(_page_path(p) for p in DOCS.rglob("*.md") if "_ext" not in p.parts)
#: The API reference: an overview and one page per function or module.
API_PAGES = [p for p in PAGES if p.startswith("api/")]
#: The width of a laptop browser window: no page may scroll sideways at it.
WINDOW = (1280, 900)
#: Modules whose ``__all__`` the API page documents; the adapters are read from source, so the
#: check does not need torch or optax.
API_MODULES = ("tree", "constraints", "torch", "optax")


def _missing(what: str) -> None:
    """Skip, or fail in CI, where a tool the site check needs is missing."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI (.ci/run installs it)")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built with ``mkdocs build --strict`` as ``make docs`` builds it."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        _missing("the docs extra (mkdocs, mkdocs-material, mkdocstrings)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, f"mkdocs build warned:\n{log}"
    return out


@pytest.fixture(scope="module")
def base_url(site, tmp_path_factory) -> Iterator[str]:
    """The built site, served on a free port of 127.0.0.1 (with the overflow probe added)."""
    served = tmp_path_factory.mktemp("served")
    shutil.copytree(site, served, dirs_exist_ok=True)
    for page in served.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        page.write_text(text.replace("</body>", _OVERFLOW_PROBE + "</body>"), encoding="utf-8")
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


#: Appended to every page the test renders (never to the site): once the page has loaded,
#: it records on ``<html>`` whether the page is wider than the window, and which elements
#: stick out, so that ``--dump-dom`` carries the answer.
_OVERFLOW_PROBE = """<script>
window.addEventListener("load", () => {
  const root = document.documentElement;
  const wide = [...document.querySelectorAll("body *")]
    .filter((e) => !e.closest(".md-search"))
    .filter((e) => e.getBoundingClientRect().right > root.clientWidth + 1)
    .slice(0, 5)
    .map((e) => e.tagName + "." + (e.className || ""));
  root.dataset.scrollWidth = root.scrollWidth;
  root.dataset.clientWidth = root.clientWidth;
  root.dataset.wide = wide.join(" ");
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    _missing("chromium (apt-get install -y chromium)")
    raise AssertionError  # unreachable: _missing skips or fails


def chromium_args(chromium: str, user_data_dir: Path) -> list[str]:
    """Headless Chromium, isolated: no network beyond the page, no profile, no updates."""
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={user_data_dir}",
    ]


#: How many Chromium processes render pages at once: each spends part of its second or so
#: waiting (0.5 s of CPU a page), which the others use.
_RENDERERS = 4


@pytest.fixture(scope="module")
def dom(chromium, base_url, tmp_path_factory) -> dict[str, str]:
    """The DOM Chromium renders for each page, by path under the site root.

    One Chromium process per page (``--dump-dom`` renders one URL), each with a profile of
    its own, :data:`_RENDERERS` at a time.
    """
    profiles = tmp_path_factory.mktemp("chromium-profiles")

    def render(index: int, page: str) -> str:
        width, height = WINDOW
        done = subprocess.run(
            [
                *chromium_args(chromium, profiles / str(index)),
                f"--window-size={width},{height}",
                "--dump-dom",
                base_url + page,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"chromium failed on /{page}:\n{done.stderr[-2000:]}"
        return done.stdout

    with concurrent.futures.ThreadPoolExecutor(max_workers=_RENDERERS) as pool:
        rendered = pool.map(render, range(len(PAGES)), PAGES)
        return dict(zip(PAGES, rendered, strict=True))


class _Page(HTMLParser):
    """What the checks read from a DOM: ids, links, the title, and the main article's text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.title = ""
        self.article_text: list[str] = []
        self._in_title = False
        self._article_depth = 0
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "title":
            self._in_title = True
        if tag == "article" and "md-content__inner" in (attrs.get("class") or ""):
            self._article_depth = 1
        elif self._article_depth and tag == "article":
            self._article_depth += 1

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag == "article" and self._article_depth:
            self._article_depth -= 1

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._article_depth:
            self.article_text.append(data)


@pytest.fixture(scope="module")
def parsed(dom) -> dict[str, _Page]:
    """Each page's DOM, parsed once for all the checks (the link and API checks read the
    same pages again and again: parsing them in each test took 28 s of the module's run)."""
    return {page: _Page(html) for page, html in dom.items()}


def _target_page(url: str, base_url: str) -> str | None:
    """The page (path under the site root) an internal URL opens, or None if it is external."""
    if not url.startswith(base_url):
        return None
    return url[len(base_url) :]


# ------------------------------------------------------------------------------ tests
def test_every_docs_page_is_a_site_page():
    assert {"", "api/", "quickstart/", "porting/", "faq/", "tf-behaviour/"} <= set(PAGES)
    # one API page per TF-named function (anyclip.tree, .torch and .optax have their own too)
    assert {f"api/{name}/" for name in anyclip.__all__} <= set(API_PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p or "index")
def test_page_does_not_scroll_sideways(dom, page):
    html = dom[page]
    found = re.search(
        r'data-scroll-width="(\d+)" data-client-width="(\d+)" data-wide="([^"]*)"', html
    )
    assert found is not None, f"/{page}: the overflow probe did not run"
    scroll, client, wide = int(found[1]), int(found[2]), found[3]
    assert scroll <= client, (
        f"/{page} scrolls sideways at {WINDOW[0]} px: {scroll} px wide in {client} px ({wide})"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p or "index")
def test_page_renders(dom, parsed, page):
    text = " ".join("".join(parsed[page].article_text).split())
    assert "404" not in parsed[page].title and "Error response" not in dom[page], (
        f"/{page} is a 404 page: {parsed[page].title!r}"
    )
    assert len(text) > 200, f"/{page} renders almost no content: {text!r}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p or "index")
def test_page_has_no_broken_internal_link(parsed, site, base_url, page):
    broken = []
    checked = 0
    for href in parsed[page].links:
        url, fragment = urldefrag(urljoin(base_url + page, href))
        target = _target_page(url, base_url)
        if target is None or urlsplit(url).scheme not in ("http", "https"):
            continue
        checked += 1
        path = site / target
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            broken.append(f"{href} (no {target or 'index'})")
            continue
        if fragment:
            ids = parsed[target].ids if target in parsed else _Page(path.read_text()).ids
            if fragment not in ids:
                broken.append(f"{href} (no #{fragment} on /{target})")
    assert not broken, f"/{page} has broken links: {broken}"
    assert checked >= len(PAGES), f"/{page}: only {checked} internal links (the nav has more)"


def _source_all(module: str) -> list[str]:
    """``__all__`` of ``anyclip.<module>``, read from its source (no framework import)."""
    source = ROOT / "src" / "anyclip" / f"{module}.py"
    if not source.exists():  # a package: its __init__ holds __all__
        source = ROOT / "src" / "anyclip" / module / "__init__.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"anyclip.{module} has no __all__")


def _public_names() -> list[str]:
    names = [f"anyclip.{name}" for name in anyclip.__all__]
    for module in API_MODULES:
        names.append(f"anyclip.{module}")
        names.extend(f"anyclip.{module}.{name}" for name in _source_all(module))
    return sorted(set(names))


def test_public_names_are_known():
    names = _public_names()
    assert "anyclip.clip_by_global_norm" in names
    assert "anyclip.torch.clip_grad_norm_" in names
    assert "anyclip.optax.clip_by_global_norm" in names


@pytest.mark.parametrize("name", _public_names())
def test_api_page_documents_public_name(parsed, name):
    ids = set().union(*(parsed[page].ids for page in API_PAGES))
    assert name in ids, f"no API page has a section for {name}"
