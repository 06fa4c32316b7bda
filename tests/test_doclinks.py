"""Every pointer into the docs resolves: the relative links and `#anchors` of the
README and docs/ (a file that exists, a heading or `<a id>` under GitHub's slug
rules), the alert rules' `runbook_url`s, and the code's citations of a page
(`docs/x.md, "Section"`, `README "Section"`).

Pages move and headings get reworded; nothing else notices when a link or a
runbook URL then points at nothing, so this does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

THIS = Path(__file__).resolve()
ROOT = THIS.parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ALERT_RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
# Where code, comments, alert rules and build files may cite a page.
CITING = ("scheduler", "replicator", "lease", "tests", "deploy", "proto")
CITING_FILES = ("Makefile", "pyproject.toml", ".ci/run")
CITING_SUFFIXES = {".py", ".proto", ".yml", ".yaml", ".sh", ".toml"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# `docs/x.md, "Section"`, `README "Section"`: the quote may run over a comment's
# line break, which `_unwrap` joins first.
_CITATION = re.compile(r"(docs/[\w./-]+\.md|README(?:\.md)?),?\s+\"([^\"\n]{1,80})\"")
_PAGE_PATH = re.compile(r"docs/[\w./-]+\.md")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger): the text as rendered
    (no markup), lower case, every character but letters, digits, `_`, `-` and
    spaces dropped, spaces made hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _prose(text: str) -> Iterator[str]:
    """The lines of a page outside fenced code blocks, code spans blanked."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield _CODE_SPAN.sub(lambda m: "x" * len(m.group(2)), line)


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' slugs (a repeated one gets -1,
    -2, ... as GitHub numbers them) and its HTML `id`s and `name`s."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def headings(text: str) -> list[str]:
    """A page's headings as rendered text (no markup)."""
    out = []
    for line in _prose(text):
        heading = _HEADING.match(line)
        if heading:
            out.append(re.sub(r"[`*]", "", heading.group(2)))
    return out


def links(text: str) -> list[str]:
    """The targets of a page's inline links, images and link definitions."""
    found: list[str] = []
    # code spans are blanked, not removed: a link whose text is code, [`x`](y), counts
    for line in _prose(text):
        found += _LINK.findall(line)
        ref = _REF_DEF.match(line)
        if ref:
            found.append(ref.group(1))
    return found


def broken(source: Path, targets: Iterable[str], root: Path = ROOT) -> list[str]:
    """What among `targets` (as written in `source`) points at nothing."""
    bad = []
    for target in targets:
        if _SCHEME.match(target):
            continue  # a URL: not this repository's to check
        path_part, _, fragment = target.partition("#")
        path = (source.parent / unquote(path_part)).resolve() if path_part else source
        if not path.exists():
            bad.append(f"{target}: no such file {path.relative_to(root)}")
            continue
        if fragment and path.suffix == ".md" and unquote(fragment) not in anchors(path.read_text()):
            bad.append(f"{target}: no heading or anchor #{fragment} in {path.relative_to(root)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken(page, links(page.read_text())) == []


def test_every_runbook_url_names_a_page_and_an_anchor_in_it() -> None:
    urls = re.findall(r"runbook_url:\s*\"([^\"]+)\"", ALERT_RULES.read_text())
    assert urls, f"no runbook_url in {ALERT_RULES}"
    # relative to the repository's root, as the rules' comment says
    assert broken(ROOT / "README.md", urls) == []
    assert all("#" in url for url in urls), urls


def _unwrap(text: str) -> str:
    """A comment's wrapped lines joined back: `"Figures behind the\\n    # knobs"`."""
    return re.sub(r"\s*\n\s*(?:#|//|\*)?\s*", " ", text)


def _citing_files() -> Iterator[Path]:
    for top in CITING:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in CITING_SUFFIXES and path.is_file() and path != THIS:
                yield path
    for name in CITING_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def test_every_page_and_section_the_code_cites_exists() -> None:
    bad = []
    for path in _citing_files():
        text = _unwrap(path.read_text())
        where = path.relative_to(ROOT)
        for page in _PAGE_PATH.findall(text):
            if not (ROOT / page).is_file():
                bad.append(f"{where}: {page} does not exist")
        for page, section in _CITATION.findall(text):
            page_path = ROOT / ("README.md" if page.startswith("README") else page)
            if not page_path.is_file():
                continue  # reported above
            if not any(h.startswith(section) for h in headings(page_path.read_text())):
                bad.append(f'{where}: {page} has no section "{section}"')
    assert bad == []


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Failures and what Apollo-11 does") == "failures-and-what-apollo-11-does"
    assert slug("Event log — `apollo11 bench log --json`") == "event-log--apollo11-bench-log---json"
    assert (
        slug("Dec 2: the cyclic GC (scheduler/gctune.py)")
        == "dec-2-the-cyclic-gc-schedulergctunepy"
    )
    assert slug("Quick start (one node)") == "quick-start-one-node"
    assert slug("Watching it: metrics, alerts and the web pages") == (
        "watching-it-metrics-alerts-and-the-web-pages"
    )
    assert slug("`snapshot_interval` and [the log](x.md)") == "snapshot_interval-and-the-log"


def test_the_check_finds_a_broken_link_a_missing_anchor_and_a_repeated_heading(
    tmp_path: Path,
) -> None:
    (tmp_path / "other.md").write_text('# Other\n\n## Same\n\n## Same\n\n<a id="row"></a>\n')
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#same-1) [ok](other.md#row) [ok](#page) [url](https://example.com/x)\n"
        "[gone](missing.md) [no anchor](other.md#nowhere) [`code` text](#nope)\n"
        "`[not a link](missing-too.md)`\n\n"
        "```\n[in a block](missing-three.md)\n```\n"
    )
    found = broken(page, links(page.read_text()), root=tmp_path)
    assert found == [
        "missing.md: no such file missing.md",
        "other.md#nowhere: no heading or anchor #nowhere in other.md",
        "#nope: no heading or anchor #nope in page.md",
    ]
