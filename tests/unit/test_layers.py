"""The import rules of docs/architecture.md, checked on the source (every import, lazy ones too)."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from helpers import ROOT

# folder on disk -> the package it installs as
PACKAGES = {"harness": "harness", "goldens": "harness.goldens", "kernels": "harness.kernels"}
FRONT_ENDS = ("harness.cli", "harness.reports", "harness.pytest_plugin", "harness.__main__")
# what the worker side (inside the device worker process) must never load
NOT_IN_WORKER = ("harness.run", "harness.cli", "harness.reports", "harness.store", "harness.refs", "harness.bisect",
                 "harness.audit", "harness.flake", "harness.shard", "harness.classify", "harness.pytest_plugin",
                 "harness.commands")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


@functools.cache
def _imports(name: str, path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module imported, names taken from it, line) for every import statement in the file."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            out.append((base, tuple(a.name for a in node.names), node.lineno))
    return out


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _targets(module: str, names: tuple[str, ...]) -> list[str]:
    """The modules an import statement loads: ``from harness import reports`` loads harness.reports."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    return subs or [module]


def _violations(rule) -> list[str]:
    bad = []
    for name, path in sorted(MODULES.items()):
        for module, names, line in _imports(name, path):
            for target in _targets(module, names):
                why = rule(name, target, names)
                if why:
                    bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {name} imports {target}: {why}")
    return bad


def test_only_front_ends_import_renderers_and_the_cli():
    def rule(name, target, names):
        if _within(target, ("harness.reports", "harness.cli")) and not _within(name, FRONT_ENDS):
            return "a lower layer must not import a renderer or the CLI"
    assert _violations(rule) == []


def test_the_worker_side_imports_nothing_of_the_front_end():
    def rule(name, target, names):
        if _within(name, ("harness.worker",)) and _within(target, NOT_IN_WORKER):
            return "the device worker must not load the front end's modules"
    assert _violations(rule) == []


def test_the_harness_never_imports_the_code_under_test():
    def rule(name, target, names):
        if not _within(name, ("harness.kernels",)) and _within(target, ("harness.kernels",)):
            return "kernels are loaded by import path in the worker only"
    assert _violations(rule) == []


def test_goldens_share_no_code_with_kernels_or_the_worker():
    def rule(name, target, names):
        if _within(name, ("harness.goldens",)) and _within(target, ("harness.kernels", "harness.worker")):
            return "a golden must not share code with what it judges"
    assert _violations(rule) == []


def test_no_module_imports_another_modules_private_names():
    def rule(name, target, names):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        if private and _within(target, tuple(PACKAGES.values())) and target != name:
            return f"private name(s) {', '.join(private)}"
    assert _violations(rule) == []


@pytest.mark.parametrize("rule_test", [test_only_front_ends_import_renderers_and_the_cli,
                                       test_the_harness_never_imports_the_code_under_test])
def test_the_rules_can_fail(rule_test, monkeypatch, tmp_path):
    """Each rule flags a planted violation (a rule that cannot fail proves nothing)."""
    planted = tmp_path / "planted.py"
    planted.write_text("from harness.reports import html\nimport harness.kernels.reference\n")
    monkeypatch.setitem(MODULES, "harness.store_planted", planted)
    with pytest.raises(AssertionError):
        rule_test()


def test_the_front_end_starts_without_torch():
    """`harness list` and every command's start-up import no torch: case files are validated without it."""
    import subprocess
    import sys
    code = "import sys, harness.cli, harness.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
