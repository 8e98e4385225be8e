"""README.md is a front page and docs/ holds a guide per reader: every
relative link between them reaches a file, and an anchor a heading there."""
from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines()
            if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue    # a web address
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_front_page_is_short_and_sends_each_reader_to_a_guide():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 80
    for guide in ("STUDENT", "INSTRUCTOR", "GPU", "AUTHORING", "DEVELOPING", "THREAT_MODEL"):
        assert f"](docs/{guide}.md)" in readme, guide
    commands = re.findall(r"^(pip install .*?)\s+#", readme, re.M)
    assert commands[:2] == ['pip install -e . && attn-grade grade solutions',
                            'pip install -e ".[dev]" && python -m pytest -q']
