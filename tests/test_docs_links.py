"""The documentation holds together: every relative link in README.md, docs/*.md and
dashboard/README.md points to a file that exists (and, with an anchor into a Markdown file, to a
heading it has), the README's images are in the repository and small, and docs/cli.md names every
option of every command."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [ROOT / "README.md", *DOC_PAGES, ROOT / "dashboard" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return LINK.findall(text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces
    to '-'; a repeated heading gets '-1', '-2'..."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)  # http:, https:, mailto:...


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file_and_heading(doc):
    broken = []
    for target in filter(_relative, _links(doc)):
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading '{anchor}' in {path.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_docs_are_linked_from_the_readme_and_the_readme_stays_short():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    linked = {Path(target.partition("#")[0]).name for target in _links(ROOT / "README.md")}
    assert DOC_PAGES and {doc.name for doc in DOC_PAGES} <= linked


def test_the_readme_shows_one_small_screenshot_per_dashboard_page():
    images = [t for t in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
              if _relative(t)]
    app = (ROOT / "dashboard" / "app.py").read_text(encoding="utf-8")
    pages = re.findall(r'st\.Page\("views/[^"]+", title="([^"]+)"', app)
    assert len(images) == len(pages) > 0
    sizes = [(ROOT / image).stat().st_size for image in images]
    assert max(sizes) <= 200_000 and sum(sizes) <= 2_000_000


def test_the_cli_page_names_every_option_of_every_command():
    from profiler_core.cli import parser as cli
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = next(action for action in cli.build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    missing = []
    for name, parser in commands.choices.items():
        assert f"## {name}" in text, f"docs/cli.md has no section for {name}"
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and not re.search(
                        "`" + re.escape(option) + r"(?![\w-])", text):
                    missing.append(f"{name} {option}")
    assert not missing, "docs/cli.md does not name: " + ", ".join(missing)
