"""The load-time check of spec modules (harness/casefiles/spec_cache.py, specfile.collecting/answered):
every spec file of one load checked by one interpreter, an unchanged module's answer read from the
cache without one, and any change to what the answer came from (the module, a helper it imports,
a module shadowing it on the path, a damaged cache file) checked again."""
from __future__ import annotations

import json
import subprocess

import pytest

from harness.casefiles import load_paths, specfile
from helpers import write_case_file

MODULE = """\
import torch
from {helper} import ROWS
from dataclasses import dataclass

@dataclass
class TS:
    name: str
    shape: list
    dtype: object
    init_value: object = None
    is_output: bool = False

def build_tensor_specs(cols=4):
    return [TS("a", [ROWS, cols], torch.float32, init_value=lambda: torch.randn(ROWS, cols)),
            TS("out", [ROWS, cols], torch.float32, is_output=True)]

def golden_double(tensors):
    tensors["out"][:] = tensors["a"] * 2
"""


@pytest.fixture
def lib(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_SPEC_CHECK_CACHE", str(tmp_path / "spec-cache"))
    lib = tmp_path / "lib"
    write_case_file(lib, "shapes_a.py", "ROWS = 3\n")
    write_case_file(lib, "shapes_b.py", "ROWS = 5\n")
    write_case_file(lib, "spec_a.py", MODULE.format(helper="shapes_a"))
    write_case_file(lib, "spec_b.py", MODULE.format(helper="shapes_b"))
    cases = tmp_path / "cases"
    write_case_file(cases, "a.yaml", "name: a\nspec: spec_a\nkernel: k:f\nparams: {cols: [4, 8]}\n")
    write_case_file(cases, "b.yaml", "name: b\nspec: spec_b\nkernel: k:f\n")
    return lib, cases


@pytest.fixture
def checks(monkeypatch):
    """The spec_check interpreters started, each the list of modules it checked."""
    started: list[list[str]] = []
    real = subprocess.run

    def counting(cmd, *args, **kwargs):
        if "harness.worker.spec_check" in cmd:
            started.append([r["module"] for r in json.loads(kwargs["input"])["requests"]])
        return real(cmd, *args, **kwargs)
    monkeypatch.setattr(specfile.subprocess, "run", counting)
    return started


def _shapes(cases) -> dict[str, list]:
    return {c.case_id: c.spec["args"][0]["shape"] for c in cases}


def test_one_interpreter_per_load_then_none_until_a_source_changes(lib, checks):
    lib_dir, cases = lib
    first = load_paths([cases], kernel_paths=[str(lib_dir)])
    assert checks == [["spec_a", "spec_b"]]                     # both files, one torch import
    assert _shapes(first) == {"a[cols=4]": [3, 4], "a[cols=8]": [3, 8], "b": [5, 4]}
    again = load_paths([cases], kernel_paths=[str(lib_dir)])
    assert checks == [["spec_a", "spec_b"]] and _shapes(again) == _shapes(first)    # the cache: no interpreter
    (lib_dir / "shapes_b.py").write_text("ROWS = 7\n")           # a helper spec_b imports, not spec_b itself
    changed = load_paths([cases], kernel_paths=[str(lib_dir)])
    assert checks[1:] == [["spec_b"]] and _shapes(changed)["b"] == [7, 4]


def test_a_damaged_entry_or_a_shadowing_module_is_checked_again(lib, checks, tmp_path):
    lib_dir, cases = lib
    load_paths([cases / "b.yaml"], kernel_paths=[str(lib_dir)])
    for entry in (tmp_path / "spec-cache").glob("*.json"):
        entry.write_text('{"format": 1, "key": "x", "answ')     # a torn write: read as nothing
    load_paths([cases / "b.yaml"], kernel_paths=[str(lib_dir)])
    assert checks == [["spec_b"], ["spec_b"]]
    load_paths([cases / "b.yaml"], kernel_paths=[str(lib_dir)])
    assert len(checks) == 2
    early = tmp_path / "early"                                    # a spec_b earlier on the path shadows it
    write_case_file(early, "spec_b.py", MODULE.format(helper="shapes_a"))
    loaded = load_paths([cases / "b.yaml"], kernel_paths=[str(early), str(lib_dir)])
    assert len(checks) == 3 and _shapes(loaded)["b"] == [3, 4]


def test_errors_are_not_kept(lib, checks):
    lib_dir, cases = lib
    bad = write_case_file(cases.parent / "bad", "c.yaml", "spec: spec_a\nkernel: k:f\nparams: {nope: [1]}\n")
    for _ in range(2):
        with pytest.raises(Exception, match="does not take parameter 'nope'"):
            load_paths([bad], kernel_paths=[str(lib_dir)])
    assert len(checks) == 2
