"""The harness installs nothing under a generic top-level name, so users' own ``kernels``
and ``goldens`` packages (and the PyPI distribution called ``kernels``) keep working."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import ROOT, run_harness, write_case_file

CASE = """\
    name: mine
    op: rope_kv_write
    kernel: "kernels.mine:rope_kv_write"
    matrix:
      seed: [0, 1]
    """


def _user_package(root: Path) -> Path:
    """A user's own top-level ``kernels`` package whose kernel leaves a mark when it runs."""
    pkg = root / "kernels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mine.py").write_text(
        "from pathlib import Path\n"
        "from harness.kernels.reference import rope_kv_write as _ref\n"
        "def rope_kv_write(**kw):\n"
        "    Path(__file__).with_name('ran').write_text('yes')\n"
        "    return _ref(**kw)\n")
    return pkg


def _foreign_distribution(root: Path) -> Path:
    """Stands in for another installed distribution with a top-level ``kernels`` and ``goldens``:
    importing either fails, so any import of them by the harness shows."""
    for name in ("kernels", "goldens"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"raise ImportError('the other distribution\\'s {name}')\n")
    return root


def test_a_user_kernels_package_in_the_working_directory_is_the_one_that_runs(tmp_path, golden_cache_dir):
    user = tmp_path / "user"
    pkg = _user_package(user)
    cases = write_case_file(user / "cases", "mine.yaml", CASE)
    out = tmp_path / "out.json"
    proc = run_harness("run", str(cases), "--kernel-path", str(user), "--golden-cache", str(golden_cache_dir),
                       "--store", str(tmp_path / "r.sqlite"), "--log-dir", str(tmp_path / "logs"),
                       "--json", str(out), "--no-progress", cwd=user, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = [r["outcome"] for r in json.loads(out.read_text())["results"]]
    assert outcomes == ["PASS", "PASS"]
    assert (pkg / "ran").read_text() == "yes"


def test_another_top_level_kernels_distribution_does_not_shadow_or_break_the_harness(tmp_path, golden_cache_dir):
    other = _foreign_distribution(tmp_path / "site")
    user = tmp_path / "user"
    _user_package(user)
    cases = write_case_file(user / "cases", "both.yaml",
                            CASE.rstrip(" ") + "    include:\n      - {name: builtin, kernel: reference, seed: 5}\n")
    out = tmp_path / "out.json"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(other), os.environ.get("PYTHONPATH", "")]))}
    proc = run_harness("run", str(cases), "--kernel-path", str(user), "--golden-cache", str(golden_cache_dir),
                       "--store", str(tmp_path / "r.sqlite"), "--log-dir", str(tmp_path / "logs"),
                       "--json", str(out), "--no-progress", cwd=tmp_path, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted((r["kernel"], r["outcome"]) for r in results) == [
        ("kernels.mine:rope_kv_write", "PASS"), ("kernels.mine:rope_kv_write", "PASS"), ("reference", "PASS")]


def test_the_wheel_installs_only_under_harness(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"harness"}
    for needed in ("harness/goldens/__init__.py", "harness/goldens/cache.py", "harness/kernels/reference.py",
                   "harness/kernels/mutants/racy_head.py", "harness/classify/builtin.yaml", "harness/ops/registry.py"):
        assert needed in names
    # every package folder of the source tree made it into the wheel
    for init in [*ROOT.glob("harness/**/__init__.py"), *ROOT.glob("goldens/**/__init__.py"),
                 *ROOT.glob("kernels/**/__init__.py")]:
        rel = init.relative_to(ROOT).as_posix()
        rel = rel if rel.startswith("harness/") else f"harness/{rel}"
        assert rel in names, f"{rel} missing from the wheel (add its package to pyproject.toml)"


# --- run from the checkout's root: its kernels/ and goldens/ folders must not answer the bare names ---

_OTHER_KERNELS = "MARK = 'the other kernels'\n"


def _python_at_root(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -c`` with the repository root as the current directory (so ``""`` on sys.path is it)."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_from_the_root_a_bare_kernels_import_gets_the_other_distribution(tmp_path):
    other = tmp_path / "site"
    (other / "kernels").mkdir(parents=True)
    (other / "kernels" / "__init__.py").write_text(_OTHER_KERNELS)
    proc = _python_at_root(
        "import sys, kernels, harness.kernels.reference\n"
        "assert sys.path[0] == ''\n"                 # the root is on the path, ahead of the other one
        "print(kernels.MARK, sys.modules['kernels'] is kernels)\n"
        "try:\n    import kernels.reference\nexcept ModuleNotFoundError as e:\n    print('no', e.name)\n",
        env={"PYTHONPATH": str(other)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["the other kernels True", "no kernels.reference"]


def test_from_the_root_bare_names_with_no_other_provider_are_not_found():
    # only the root and the standard library on the path: nothing else provides `kernels` or `goldens`
    code = ("import sys, sysconfig\n"
            "sys.path[:] = ['', sysconfig.get_paths()['stdlib'], sysconfig.get_paths()['platstdlib']]\n"
            "for name in ('kernels', 'goldens'):\n"
            "    try:\n        __import__(name)\n        print(name, 'imported')\n"
            "    except ModuleNotFoundError as e:\n        print(name, 'missing', e.name, name in sys.modules)\n")
    proc = _python_at_root(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["kernels missing kernels False", "goldens missing goldens False"]


TRANSFORMERS_CASES = """\
    name: hf
    op: rope_kv_write
    matrix:
      seed: [0]
    include:
      - {name: shipped, kernel: transformers-qwen3, seed: 1}
      - {name: outside, kernel: "outside.transformers_qwen3:rope_kv_write", seed: 2}
    """


def test_transformers_kernels_pass_run_from_the_repository_root(tmp_path, golden_cache_dir):
    """transformers 5 imports the PyPI `kernels`; run from the root (python -m harness, workers
    started with -m there) our folder must not stand in its way."""
    import pytest
    pytest.importorskip("transformers")
    cases = write_case_file(tmp_path / "cases", "hf.yaml", TRANSFORMERS_CASES)
    out = tmp_path / "out.json"
    proc = run_harness("run", str(cases), "-k", "shipped or outside", "--kernel-path", "tests/outside_kernels",
                       "--golden-cache", str(golden_cache_dir), "--store", str(tmp_path / "r.sqlite"),
                       "--log-dir", str(tmp_path / "logs"), "--json", str(out), "--no-progress",
                       cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted((r["kernel"], r["outcome"]) for r in results) == [
        ("outside.transformers_qwen3:rope_kv_write", "PASS"), ("transformers-qwen3", "PASS")]
