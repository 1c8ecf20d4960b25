"""The one line an interrupted flake, compare or bisect prints to continue it (absolute paths)."""
from __future__ import annotations

import shlex

from harness.cli.common import resume_command
from harness.cli.parser import build_parser
from harness.store import MemoryStore


def test_the_line_keeps_how_to_run_and_what_to_write_and_nothing_of_the_plan(tmp_path):
    args = build_parser().parse_args(
        ["compare", "cases", "--repo", "r", "--ref", "a=main", "--repeat", "9", "--seeds", "fresh",
         "--json", "my out.json", "--junit", "c.xml", "--rules", "r1.yaml", "--rules", "r2.yaml",
         "--golden-cache", "/g", "--no-progress"])
    store = MemoryStore()
    argv = shlex.split(resume_command(args, "20261201-0615-ab12", store))
    assert argv[:6] == ["harness", "compare", "--resume", "20261201-0615-ab12", "--store",
                        str(store.path.resolve())]
    here = tmp_path.cwd()
    assert argv[6:] == ["--golden-cache", "/g", "--json", str(here / "my out.json"), "--junit", str(here / "c.xml"),
                        "--rules", str(here / "r1.yaml"), "--rules", str(here / "r2.yaml"), "--no-progress"]
    assert build_parser().parse_args(argv[1:]).resume == "20261201-0615-ab12"     # it parses as given


def test_a_hunts_line_keeps_allow_nondeterministic():
    args = build_parser().parse_args(["flake", "cases", "--allow-nondeterministic", "--no-color"])
    assert resume_command(args, "h1", MemoryStore()).endswith("--no-color --allow-nondeterministic")
