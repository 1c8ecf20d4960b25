"""harness/worker/imports.py and the snapshot's sharing, in this process: a change to the import
machinery is judged by what the modules that matter resolve to, not by where a finder sits; a leaked
descriptor is seen whatever number it takes; a change after unchanged snapshots is still seen."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch

import harness.kernels.reference as reference_module
from harness.worker import hygiene, imports, os_state

MUTANT = "harness.kernels.mutants.skip_rope"


class _OwnNames:
    """A library's finder: only its own names."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("unit_own_names."):
            return importlib.util.spec_from_loader(name, loader=None)
        return None


class _ServesReference:
    def find_spec(self, name, path=None, target=None):
        if name == MUTANT:
            return importlib.util.spec_from_file_location(name, reference_module.__file__)
        return None


@pytest.fixture
def machinery():
    """sys.meta_path, sys.path_hooks, sys.path and the importer cache put back after the test."""
    saved = list(sys.meta_path), list(sys.path_hooks), list(sys.path), dict(sys.path_importer_cache)
    yield
    sys.meta_path[:], sys.path_hooks[:], sys.path[:] = saved[0], saved[1], saved[2]
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(saved[3])


def test_a_finder_first_that_serves_only_its_own_names_is_no_finding_and_stays(machinery):
    before = imports.read()
    finder = _OwnNames()
    sys.meta_path.insert(0, finder)
    after = imports.read()
    assert imports.changes(before, after) == []
    imports.restore(before, after)
    assert sys.meta_path[0] is finder


def test_a_finder_that_serves_the_reference_for_a_mutant_is_named_with_both_files(machinery):
    before = imports.read()
    sys.meta_path.insert(0, _ServesReference())
    after = imports.read()
    (finding,) = imports.changes(before, after)
    assert finding.startswith("sys.meta_path: test_import_machinery._ServesReference added ahead of the "
                              "import system's finders, and later imports load other files: ")
    assert f"{MUTANT!r} → {reference_module.__file__} (the import system's: " in finding
    assert finding.endswith(os.path.join("mutants", "skip_rope.py)"))
    imports.restore(before, after)
    assert not any(isinstance(f, _ServesReference) for f in sys.meta_path)


def test_a_folder_first_on_sys_path_is_a_finding_only_when_it_shadows_a_module_that_matters(machinery, tmp_path):
    vendored, shadow = tmp_path / "vendored", tmp_path / "shadow"
    (vendored).mkdir()
    (vendored / "unit_vendored_helper.py").write_text("X = 1\n")
    (shadow / "harness").mkdir(parents=True)
    (shadow / "harness" / "__init__.py").write_text("")
    before = imports.read()
    sys.path.insert(0, str(vendored))
    assert imports.changes(before, imports.read()) == []
    sys.path.insert(0, str(shadow))
    (finding,) = imports.changes(before, imports.read())
    assert finding.startswith(f"sys.path: {str(shadow)!r} added, {str(vendored)!r} added, and later imports "
                              f"load other files: 'harness' → {shadow / 'harness' / '__init__.py'} (the import "
                              f"system's: "), finding


def test_an_own_type_finder_for_another_folder_in_the_importer_cache_is_judged_by_what_it_serves(machinery):
    import harness.kernels.mutants as mutants
    folder = list(mutants.__path__)[0]
    before = imports.read()
    sys.path_importer_cache[folder] = importlib.machinery.FileFinder(
        os.path.dirname(reference_module.__file__), (importlib.machinery.SourceFileLoader, [".py"]))
    (finding,) = imports.changes(before, imports.read())
    assert finding.startswith(f"sys.path_importer_cache: {folder!r} → ")


def test_a_descriptor_left_open_is_found_when_it_takes_the_number_the_listing_had(tmp_path):
    before = os_state.read()
    f = open(tmp_path / "left", "w")          # the lowest free number: the one the first listing used
    try:
        (finding,) = os_state.window_changes(before, os_state.read())
        assert finding.startswith(f"1 descriptor(s) open ({len(before.fds)} → {len(before.fds) + 1}): "
                                  f"{f.fileno()} → {tmp_path / 'left'}")
    finally:
        f.close()
    assert os_state.window_changes(before, os_state.read()) == []


def test_a_change_after_snapshots_that_share_their_dicts_is_still_found():
    first, second = hygiene.snapshot(), hygiene.snapshot()
    assert dict(first.namespaces)["torch"] is dict(second.namespaces)["torch"]
    assert hygiene.state_changes(first, second) == []
    original = torch.rsqrt
    torch.rsqrt = lambda x: original(x)
    try:
        third = hygiene.snapshot()
        assert "torch.rsqrt replaced" in hygiene.state_changes(first, third)
        assert "torch.rsqrt replaced" in hygiene.state_changes(second, third)
    finally:
        torch.rsqrt = original
    assert hygiene.state_changes(first, hygiene.snapshot()) == []
