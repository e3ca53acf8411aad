"""The README and docs/ point at things that exist: relative links and their anchors, and every
``tapmachine.<module>[.<name>]`` they name."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\]\(([^)\s]+)\)|(?:src|href)=\"([^\"]+)\"")
MODULE = re.compile(r"(?<![/\w.-])tapmachine(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
#: Names under ``tapmachine.`` that are not modules: MLflow tags.
TAGS = {"tapmachine.run_name", "tapmachine.replayed", "tapmachine.kind", "tapmachine.stage"}


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path):
    text = FENCE.sub("", page.read_text())
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def module_exists(dotted: str) -> bool:
    """``tapmachine.a.b`` is an importable module, or ``tapmachine.a.name`` a name that module
    ``tapmachine.a`` defines or exports."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        rest = parts[cut:]
        return not rest or (len(rest) == 1 and hasattr(module, rest[0]))
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_modules_exist(page):
    named = set(MODULE.findall(page.read_text()))
    missing = sorted(m for m in named - TAGS if not module_exists(m))
    assert not missing, f"{page.name}: {missing}"


def test_slug():
    assert slug("TAP denoiser at p = 0.5") == "tap-denoiser-at-p--05"
    assert slug("The claims report: `tapmachine claims`") == "the-claims-report-tapmachine-claims"
