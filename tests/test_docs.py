"""The README and the manuals cite only what the repository holds, and the README stays a front door.

Fast and model-free: reads Markdown files only. Checked:
- every relative link (and image) in README.md and docs/**/*.md points at an existing file, and a `#anchor`
  into a Markdown file names one of its headings;
- every repository path written in code (inline or fenced) in README.md and the manuals exists; docs/history/
  is exempt, since a dated log may name files that have since moved;
- every dotted module name of the project written in code in README.md and the manuals can be imported;
- README.md has at most 320 lines, and its results tables match the JSON files (scripts/render_results.py);
- no doc needs `PYTHONPATH=.`, and README.md and the manuals carry no round-by-round history.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HISTORY = DOCS / "history"
ALL_DOCS = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
# README and the manuals: everything but the dated logs and the paper's spec (an outside document)
CURRENT_DOCS = [p for p in ALL_DOCS if HISTORY not in p.parents and p.name != "paper.md"]
README_MAX_LINES = 320
SCREENSHOT = ROOT / "docs" / "figures" / "chat.png"

PATH_PREFIXES = ("mascot/", "app/", "annotation/", "docs/", "benchmarks/", "scripts/", "checkpoints/", "tests/")
# a path after one of these flags is what the command writes, so it need not exist yet
OUTPUT_FLAGS = {"--output", "--out", "-o", "--json", "--figure", "--plot", "--output-dir"}
PLACEHOLDER = re.compile(r"[<>*{}$…]|\.\.\.|\b[A-Z]{2,}\b")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MODULE = re.compile(r"\b(?:mascot|app|annotation)(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE_SUFFIXES = (".py", ".md", ".json", ".yaml", ".yml", ".txt", ".db", ".png", ".csv", ".jsonl", ".sqlite")
HISTORY_TALK = re.compile(r"\b(round|stop|issue) [0-9]", re.I)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def split_code(text: str) -> tuple[list[str], list[str]]:
    """(prose lines with fenced blocks removed, code strings: fenced block lines and inline code spans)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
        else:
            code += [m.group(2) for m in INLINE_CODE.finditer(line)]
            prose.append(INLINE_CODE.sub("", line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split_code(path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for line in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    prose, _ = split_code(path.read_text())
    return [m.group(1) for line in prose for m in LINK.finditer(line)]


def cited_paths(path: Path) -> list[str]:
    """Repository paths written in code in `path` (commands included), minus placeholders and outputs."""
    _, code = split_code(path.read_text())
    out = []
    for snippet in code:
        tokens = re.split(r"[\s,;=()\[\]\"']+", snippet)
        for prev, token in zip(["", *tokens], tokens):
            token = token.strip("`.:;!?")
            token = token.split("::")[0].split("#")[0]
            if not token.startswith(PATH_PREFIXES) or prev in OUTPUT_FLAGS or PLACEHOLDER.search(token):
                continue
            out.append(token)
    return out


def module_resolves(dotted: str) -> bool:
    """`a.b.c[.attr…]` names a module or package of this repository (an attribute after it is not checked;
    a name after a package must at least appear in its `__init__.py`)."""
    parts = dotted.split(".")
    here = ROOT / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (here / f"{part}.py").is_file():
            return True
        if (here / part / "__init__.py").is_file() or (here / part).is_dir():
            here = here / part
            continue
        init = here / "__init__.py"
        return i > 1 or (init.is_file() and re.search(rf"\b{re.escape(part)}\b", init.read_text()) is not None)
    return True


@pytest.mark.parametrize("doc", ALL_DOCS, ids=rel)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if dest == SCREENSHOT:
            continue  # checked on its own below
        if not dest.exists():
            broken.append(f"{target} (no {dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {rel(dest)})")
    assert not broken, f"{rel(doc)} links to what does not exist: {broken}"


def test_readme_screenshot_exists() -> None:
    assert SCREENSHOT.is_file(), f"README.md shows {rel(SCREENSHOT)}, which is not in the repository yet"


@pytest.mark.parametrize("doc", CURRENT_DOCS, ids=rel)
def test_cited_paths_exist(doc: Path) -> None:
    missing = sorted({p for p in cited_paths(doc) if not (ROOT / p).exists()})
    assert not missing, f"{rel(doc)} cites paths the repository does not hold: {missing}"


@pytest.mark.parametrize("doc", CURRENT_DOCS, ids=rel)
def test_cited_modules_exist(doc: Path) -> None:
    _, code = split_code(doc.read_text())
    names = {m.group(0) for snippet in code for m in MODULE.finditer(snippet)}
    missing = sorted(n for n in names if not n.endswith(FILE_SUFFIXES) and not module_resolves(n))
    assert not missing, f"{rel(doc)} names modules the repository does not hold: {missing}"


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details to a manual (at most {README_MAX_LINES})"


def test_readme_results_match_the_json_files() -> None:
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "scripts" / "render_results.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run: python3 scripts/render_results.py --write"


@pytest.mark.parametrize("doc", ALL_DOCS, ids=rel)
def test_no_pythonpath(doc: Path) -> None:
    assert "PYTHONPATH=." not in doc.read_text(), f"{rel(doc)}: the package is installed by make; drop PYTHONPATH=."


@pytest.mark.parametrize("doc", CURRENT_DOCS, ids=rel)
def test_manuals_describe_the_current_design(doc: Path) -> None:
    talk = [line.strip()[:100] for line in doc.read_text().splitlines() if HISTORY_TALK.search(line)]
    assert not talk, f"{rel(doc)} narrates history (move it to docs/history/): {talk}"
