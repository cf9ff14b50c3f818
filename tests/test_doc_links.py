"""Every relative link of the README and of docs/ resolves: the file or folder exists, and a
#fragment names a heading of the page it points to (as GitHub makes heading anchors). Pages move
between README and docs/; a link left behind fails here."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", prose(page.read_text()), flags=re.MULTILINE)
    return {anchor(heading) for heading in headings}


def test_anchor_follows_github():
    assert anchor("Headline: every encoding under the current recipe") == (
        "headline-every-encoding-under-the-current-recipe"
    )
    assert (
        anchor("Training from scratch: `experiments/length_gen.py`") == "training-from-scratch-experimentslength_genpy"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if target.startswith(EXTERNAL):
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading of {resolved.relative_to(ROOT)} has the anchor #{fragment}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
