"""The repository stands alone: no file cites a document it does not ship, and every path
the docs name exists (a moved module leaves no stale pointer behind)."""
from __future__ import annotations

import importlib
import re
import subprocess

import pytest

from helpers import ROOT

TRACKED = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
TEXT_FILES = [p for p in TRACKED if p.endswith((".py", ".md", ".yaml", ".yml", ".sh", ".toml")) or p == ".ci/run"]
DOCS = [p for p in TRACKED if p.endswith(".md")]
_PATH = re.compile(r"`((?:harness|goldens|kernels|docs|cases|ci|bench|tests)/[\w./-]+)`")
# The brief's name, spelled so that this file does not itself match a search for it.
_BRIEF = re.compile("DES" + r"IGN(\.md| §)")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", TEXT_FILES)
def test_no_file_cites_a_design_brief_the_repository_does_not_ship(path):
    text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
    assert not _BRIEF.search(text), f"{path} cites a design brief that is not in the repository"


@pytest.mark.parametrize("path", DOCS)
def test_every_path_and_link_in_the_docs_exists(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    missing = []
    for named in _PATH.findall(text):
        if any(c in named for c in "*<{["):
            continue
        if not (ROOT / named.rstrip("/.")).exists():
            missing.append(named)
    for link in _LINK.findall(text):
        if "://" in link or link.startswith("mailto:"):
            continue
        if not ((ROOT / path).parent / link).exists():
            missing.append(link)
    assert not missing, f"{path} names files that do not exist: {', '.join(sorted(set(missing)))}"


_DOTTED = re.compile(r"`(harness(?:\.\w+)+)")


def _resolves(dotted: str) -> bool:
    """``dotted`` is an importable module, or an attribute of one (a class, a function)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("path", DOCS)
def test_every_module_the_docs_name_exists(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    missing = sorted({d for d in _DOTTED.findall(text) if not _resolves(d)})
    assert not missing, f"{path} names modules that do not exist: {', '.join(missing)}"
