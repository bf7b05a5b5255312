"""The docs hold together: every relative link in README.md, docs/ and the studies' pages resolves
to a file (and its #anchor to a heading of that file), and every config file, launcher, study
and module path a page names exists. Plain text only: no JAX."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "experiments").glob("**/README.md"),
                *(ROOT / "experiments").glob("**/HISTORY.md")])

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
# A path a page names, in code or prose: configs/*.py or *.yaml, launch/*.py, experiments/...,
# seetjax/... (so the tree the docs draw is the tree there is)
NAMED = re.compile(r"(?<![\w./-])((?:configs|launch|experiments|seetjax)/(?:[\w./*<>-]|\{[^}]*\})+)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (links are not links there)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    slugs, seen = set(), {}
    for line in _prose(page.read_text()).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)$", line):
            slug = _slug(m[1])
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_pages_are_there():
    names = {_name(p) for p in PAGES}
    assert {"README.md", "docs/README.md", "experiments/README.md"} <= names
    studies = [p for p in (ROOT / "experiments").iterdir() if (p / "README.md").exists()]
    assert len(studies) >= 6
    for study in studies:
        assert (study / "HISTORY.md").exists(), f"{_name(study)} has no HISTORY.md"
        assert (study / "results").is_dir(), f"{_name(study)} has no results/"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {_name(file)}")
    assert not broken, f"{_name(page)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_named_config_launcher_and_study_path_exists(page):
    missing = []
    for name in NAMED.findall(page.read_text()):
        name = name.rstrip(".-")  # the end of a sentence
        if re.search(r"[*<{]", name):
            continue  # a pattern: `seed*.md`, `<cell>`, `{csv,md}`
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{_name(page)} names paths that do not exist: {sorted(set(missing))}"


def test_the_readme_stays_short_and_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "make demo" in text and "make test" in text
