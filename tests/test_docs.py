"""The documentation matches the code: every setting is in docs/configuration.md and every
variable named there is a setting; every relative link between the pages resolves, to a file
and, when it names one, to a heading of it; the README and ARCHITECTURE keep their budgets."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.configuration import setting_names

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

# A variable in the first cell of a table row: `GATEWAY_...` or `REDIS_URL`.
_VARIABLE = re.compile(r"`((?:GATEWAY|REDIS)_[A-Z0-9_]+)`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _documented_variables() -> set[str]:
    names: set[str] = set()
    for line in (DOCS / "configuration.md").read_text().splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 2:
            names |= set(_VARIABLE.findall(cells[1]))
    return names


def test_every_setting_is_documented_and_nothing_else() -> None:
    documented = _documented_variables()
    settings = setting_names()
    assert settings - documented == set(), "settings missing from docs/configuration.md"
    assert documented - settings == set(), "docs/configuration.md names no such setting"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        if not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def _links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text()))


def test_relative_links_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in _links(page):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_and_architecture_keep_their_budgets() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 400
    assert len((DOCS / "ARCHITECTURE.md").read_text().splitlines()) <= 800
