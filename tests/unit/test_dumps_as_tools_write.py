"""Dumps as device dump tools write them (docs/intermediates.md): flattened rows compared after a
reshape, a refused dump that never changes the outcome, and ``harness dumps`` warning when the
dumps cannot be the case's.  The kernels are tests/outside_kernels/outside/tool_dumps.py."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.intermediates import files
from harness.worker.dumps_offline import compare_folder
from harness.outcomes import Outcome
from harness.worker.inputs import generate
from harness.worker.input_digest import digest_inputs
from harness.worker.launch import launch
from helpers import outside_kernels_in_process

OUTSIDE = Path(__file__).resolve().parent.parent / "outside_kernels"
TINY = replace(PRESETS["tiny"], batch=4)


def case(kernel: str, seed: int = 0) -> Case:
    return Case(f"fused[{kernel}-{seed}]", "unit", "unit", "fused_rope_decode_attention", f"outside.tool_dumps:{kernel}",
                TINY, SeqLens("const", (9,)), SlotMode("arange"), seed)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("goldens")
    with outside_kernels_in_process(root) as run:
        yield (lambda c, mode="on-failure": run(c, intermediates=mode)), str(root)


def rows_of(reply) -> dict[str, dict]:
    return {r["name"]: r for r in reply.metrics["intermediates"]["rows"]}


def test_a_flattened_dump_of_a_correct_kernel_is_compared_and_ok(env):
    run, _ = env
    reply = run(case("flat_dumps"), "always")
    rows = rows_of(reply)
    assert reply.outcome is Outcome.PASS
    assert rows["q_norm"]["verdict"] in ("ok", "bit-exact")
    assert "dumped as (4, 128), compared as (4, 4, 32)" in rows["q_norm"]["metrics"]["note"]
    assert reply.metrics["intermediates"]["problems"] == []


def test_a_flattened_dump_of_a_scale_bug_names_q_norm_and_keeps_the_mismatch(env):
    run, _ = env
    reply = run(case("norm_factor"))
    assert reply.outcome is Outcome.MISMATCH
    assert reply.metrics["intermediates"]["first_bad_intermediate"] == "q_norm"
    assert "first bad intermediate q_norm" in reply.summary and reply.summary.startswith("out:")


def test_a_refused_dump_upstream_keeps_the_outcome_and_says_the_error_may_start_there(env):
    run, _ = env
    reply = run(case("norm_factor_cut"))
    data = reply.metrics["intermediates"]
    assert reply.outcome is Outcome.MISMATCH and reply.summary.startswith("out:")
    assert rows_of(reply)["q_norm"]["verdict"] == "refused"
    assert data["problems"] == ["intermediate q_norm: shape (4, 3, 32), the contract says (4, 4, 32)"]
    assert "q_norm refused, so the error may start before it" in reply.summary
    assert "[CONTRACT] dump refused: intermediate q_norm" in reply.report


def _dump_into(folder: Path, c: Case) -> None:
    """What a run elsewhere leaves: ``flat_dumps`` writing its files for case ``c``."""
    sys.path.insert(0, str(OUTSIDE))
    from outside import tool_dumps
    folder.mkdir()
    os.environ[files.ENV_VAR] = str(folder)
    try:
        launch(tool_dumps.flat_dumps, generate(c, torch.device("cpu")), torch.device("cpu"), lambda: None)
    finally:
        del os.environ[files.ENV_VAR]


def test_offline_another_cases_dumps_are_called_so(env, tmp_path):
    _, cache = env
    mine, other = case("flat_dumps", seed=0), case("flat_dumps", seed=1)
    _dump_into(tmp_path / "d", other)
    found = compare_folder(mine, tmp_path / "d", cache)
    assert found["compared_with"]["case_id"] == mine.case_id
    assert any("likely not this case's" in w for w in found["warnings"]), found["warnings"]
    own = compare_folder(other, tmp_path / "d", cache)
    assert own["warnings"] == [] and own["first_bad_intermediate"] is None
    assert own["headline"].startswith("every dumped intermediate ok (last: attn)") and "store" not in own["headline"]


def test_offline_a_digest_beside_the_dumps_that_does_not_match_is_a_warning(env, tmp_path):
    _, cache = env
    c = case("flat_dumps", seed=0)
    _dump_into(tmp_path / "d", c)
    real = digest_inputs(*(lambda ci: (ci.op, {**ci.args, **ci.initial}))(generate(c, torch.device("cpu")))).digest
    (tmp_path / "d" / files.PROVENANCE).write_text(json.dumps({"case_id": c.case_id, "inputs_digest": real}))
    assert compare_folder(c, tmp_path / "d", cache)["warnings"] == []
    (tmp_path / "d" / files.PROVENANCE).write_text(json.dumps({"case_id": c.case_id, "inputs_digest": "0badc0de"}))
    warned = compare_folder(c, tmp_path / "d", cache)["warnings"]
    assert len(warned) == 1 and "inputs digest 0badc0de" in warned[0], warned


def test_offline_a_wrong_v_from_these_inputs_is_a_bug_not_another_case(env, tmp_path):
    """v taken from the k projection is uncorrelated too, but q_norm agrees: these inputs, no warning."""
    _, cache = env
    sys.path.insert(0, str(OUTSIDE))
    from outside import dumping
    c = case("flat_dumps", seed=0)
    launch(dumping.bug_v, generate(c, torch.device("cpu")), torch.device("cpu"), lambda: None,
           dump=lambda name, t: files.write(tmp_path / "d", name, t, ".npy"))
    found = compare_folder(c, tmp_path / "d", cache)
    assert found["first_bad_intermediate"] == "v" and found["warnings"] == []


def test_a_pure_scale_error_is_named_with_its_ratio(env):
    """The seeds' story: cosine 1.000000 and 100% bad say nothing; the ratio does."""
    run, _ = env
    reply = run(case("norm_factor"))
    row = rows_of(reply)["q_norm"]["metrics"]
    assert row["cosine"] > 0.9999 and abs(row["ratio"] - 32 ** 0.5) < 1e-3      # tiny: D = 32
    assert "hint: q_norm is 5.66× the golden in every row: a scale or normalisation factor" in reply.summary
    assert rows_of(reply)["v"]["metrics"]["ratio"] == pytest.approx(1.0, abs=1e-2)


def test_the_scale_hint_needs_every_row_to_share_the_ratio():
    from harness.worker.dumps_compare import measure, scale_hint
    from harness.intermediates.spec import intermediates
    item = intermediates("rope_kv_write")[0]
    golden = torch.randn(4, 4, 32, generator=torch.Generator().manual_seed(0))
    uniform = measure(item, golden * 20.3, golden, None, atol=1e-3, rtol=1e-3, max_error_ratio=0.0)
    assert scale_hint("q_norm", uniform.metrics) == "q_norm is 20.3× the golden in every row: a scale or normalisation factor"
    per_row = golden * torch.tensor([1.0, 20.3, 1.0, 1.0])[:, None, None]      # one row's factor only
    assert scale_hint("q_norm", measure(item, per_row, golden, None, atol=1e-3, rtol=1e-3,
                                        max_error_ratio=0.0).metrics) == ""
    noise = golden + torch.randn(4, 4, 32, generator=torch.Generator().manual_seed(1))
    assert scale_hint("q_norm", measure(item, noise, golden, None, atol=1e-3, rtol=1e-3,
                                        max_error_ratio=0.0).metrics) == ""
