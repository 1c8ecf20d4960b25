"""``--golden-device`` and the host golden's thread count (issue 14, "Goldens at scale").

The accelerator paths themselves cannot run on this CPU-only machine; what is tested here is
what decides them: the cache key rule, the refusal of an absent or malformed device, the
precision switches, how the golden process is started, and what a resumed run reuses.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.cli import main
from harness.devices import DeviceError
from harness.goldens import GoldenInputError
from harness.goldens.cache import GoldenCache, GoldenStoreError
from harness.run import options
from harness.run.engine import Planned
from harness.run.golden_process import GoldenProcess, golden_env
from harness.run.spawn import WorkerOptions
from harness.run.session import recording
from harness.store import Store
from harness.worker import golden_serve, protocol
from harness.worker.inputs import generate, input_spec

TINY = Case(case_id="tiny", matrix="m", source="m.yaml:1", op="fused_rope_decode_attention", kernel="reference",
            geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (20,)), slot_mode=SlotMode("arange"), seed=1)
MID = replace(TINY, geometry=PRESETS["qwen3-14b"], seq_lens=SeqLens("uniform", (1, 3756)))
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


# -- the key rule ------------------------------------------------------------------------------

def test_a_host_golden_keeps_the_key_it_had_before_golden_devices():
    """The key written before ``--golden-device`` existed, computed here by its own formula."""
    spec = input_spec(TINY)
    document = {"op": TINY.op, "golden": goldens.source_hash(TINY.op), "spec": spec, "dtype": "float32"}
    before = hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    cache = GoldenCache(None)
    assert cache.key(TINY.op, spec, torch.float32) == before
    assert cache.key(TINY.op, spec, torch.float32, "cpu") == before


def test_an_accelerator_golden_has_a_key_of_its_own_per_device_kind():
    spec, cache = input_spec(TINY), GoldenCache(None)
    keys = {kind: cache.key(TINY.op, spec, torch.float32, kind) for kind in ("cpu", "cuda", "npu")}
    assert len(set(keys.values())) == 3


def test_a_file_written_for_one_device_kind_is_not_read_as_another(tmp_path):
    cache, spec = GoldenCache(tmp_path), input_spec(TINY)
    path, key, hit = cache.ensure(TINY.op, spec, lambda: generate(TINY).args, torch.float32, "cuda")
    assert not hit and key == cache.key(TINY.op, spec, torch.float32, "cuda")
    assert set(GoldenCache(tmp_path).read(TINY.op, spec, path, torch.float32, "cuda")) == set(goldens.golden_names(TINY.op))
    with pytest.raises(GoldenStoreError, match="does not hold the goldens of this case"):
        GoldenCache(tmp_path).read(TINY.op, spec, path, torch.float32)          # the host's key
    assert GoldenCache(tmp_path).ensure(TINY.op, spec, lambda: generate(TINY).args)[2] is False   # not shared


def test_a_golden_ref_says_where_its_golden_was_computed():
    ref = protocol.GoldenRef("/g/x.safetensors", "k" * 64, False, 1.5, 7, "cuda")
    assert protocol.GoldenRef.from_wire(ref.to_wire()) == ref
    older = {k: v for k, v in ref.to_wire().items() if k != "device"}       # a front end before the field
    assert protocol.GoldenRef.from_wire(older).device == "cpu"


def test_goldens_refuse_inputs_spread_over_two_devices():
    args = dict(generate(TINY).args)
    args["k_cache"] = args["k_cache"].to("meta")
    with pytest.raises(GoldenInputError, match="more than one device .*k_cache on meta"):
        goldens.compute(TINY.op, args)


# -- the host golden's threads -------------------------------------------------------------------

def test_small_goldens_run_on_one_thread_and_large_ones_on_every_core():
    small, large = golden_serve.input_bytes(TINY), golden_serve.input_bytes(MID)
    assert small < golden_serve.SMALL_GOLDEN_BYTES <= large
    assert golden_serve.golden_threads(small, 16) == 1
    assert golden_serve.golden_threads(large, 16) == 16
    assert golden_serve.golden_threads(golden_serve.SMALL_GOLDEN_BYTES - 1, 16) == 1
    assert golden_serve.golden_threads(golden_serve.SMALL_GOLDEN_BYTES, 16) == 16
    assert golden_serve.golden_threads(large, 0) == 1        # an affinity that says nothing: still one


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_golden_process_sets_the_thread_count_per_request(tmp_path, torch_threads, monkeypatch):
    cache = GoldenCache(tmp_path)
    torch.set_num_threads(2)
    reply = golden_serve.answer(protocol.GoldenRequest(TINY, "fp32", "n1"), cache, cores=3)
    assert reply.failure is None and torch.get_num_threads() == 1
    monkeypatch.setattr(golden_serve, "SMALL_GOLDEN_BYTES", 0)      # the same case counted as large
    reply = golden_serve.answer(protocol.GoldenRequest(TINY, "fp32", "n2"), cache, cores=3)
    assert reply.failure is None and torch.get_num_threads() == 3
    assert reply.golden.device == "cpu" and reply.golden.key == cache.key(TINY.op, input_spec(TINY))


# -- the accelerator's precision and process ---------------------------------------------------

def test_a_cuda_golden_device_turns_tf32_off():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        assert golden_serve.golden_device("cuda:1") == torch.device("cuda:1")
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def test_a_host_golden_device_changes_no_precision_switch():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        assert golden_serve.golden_device("cpu") == torch.device("cpu")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_an_accelerator_golden_process_is_spawned_with_the_device_runtime_loading(tmp_path):
    base = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "PATH": "/usr/bin"}
    host = WorkerOptions(log_dir=tmp_path, base_env=base)
    npu = WorkerOptions(log_dir=tmp_path, base_env=base, golden_device="npu:0")
    assert golden_env(host)["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    assert golden_env(npu)["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "1"
    assert GoldenProcess(host, fork=True).fork is True
    assert GoldenProcess(npu, fork=True).fork is False      # an accelerator runtime must not be forked


# -- the flag -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("", "--golden-device: invalid device ''"),
    ("gpu:0", "--golden-device: invalid device 'gpu:0'"),
    ("cpu:1", "--golden-device: invalid device 'cpu:1' (cpu takes no index)"),
])
def test_a_malformed_golden_device_names_the_flag(text, message):
    with pytest.raises(DeviceError) as raised:
        options.golden_device(text)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@NO_CUDA
def test_an_absent_golden_device_is_refused_naming_the_flag():
    with pytest.raises(DeviceError, match=r"^--golden-device cuda:0 not present: ") as raised:
        options.golden_device("cuda")
    assert "\n" not in str(raised.value)


def test_the_host_golden_device_needs_no_probe(monkeypatch):
    monkeypatch.setattr(options.subprocess, "run", lambda *a, **k: pytest.fail("probed the host"))
    assert options.golden_device("cpu") == "cpu"
    assert options.run_options(options.Settings(devices=(), golden_device="cpu")).worker.golden_device == "cpu"


@pytest.mark.parametrize("command", ["run", "flake", "compare", "bisect", "bisect-run", "audit"])
def test_every_executing_command_takes_the_flag(command):
    from harness.cli.parser import build_parser
    args = build_parser().parse_args([command, "--golden-device", "npu:3"])
    assert args.golden_device == "npu:3"
    assert build_parser().parse_args([command]).golden_device == "cpu"


# -- --resume ----------------------------------------------------------------------------------

def test_resume_options_carry_the_golden_device():
    kept = options.ResumeOptions(("/k",), "fp64", "all", "cuda:1")
    assert options.ResumeOptions.from_dict(kept.to_dict(), options.ResumeOptions()) == kept
    older = {k: v for k, v in kept.to_dict().items() if k != "golden_device"}   # a run stored before the flag
    assert options.ResumeOptions.from_dict(older, options.ResumeOptions()).golden_device == "cpu"


@NO_CUDA
def test_resume_reuses_the_recorded_golden_device(tmp_path, capsys):
    """A run recorded with ``--golden-device cuda:0``, resumed here without the flag: its device is
    checked again (absent here: exit 2 naming the flag) instead of falling back to the host."""
    store_path = tmp_path / "results.sqlite"
    run = options.run_options(options.Settings(devices=(), log_dir=str(tmp_path / "logs")))
    kept = options.ResumeOptions(golden_device="cuda:0")
    with Store(store_path) as store, recording(store, [Planned(0, TINY)], run,
                                               extra={"options": kept.to_dict()}) as recorded:
        pass
    code = main(["run", "--resume", recorded.run_id, "--store", str(store_path), "--no-progress",
                 "--log-dir", str(tmp_path / "logs2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--golden-device cuda:0 not present" in err[0]


def test_a_bisect_plan_keeps_its_golden_device(tmp_path):
    from harness.bisect.session import BisectPlan
    from harness.refs.runner import RefSetup
    plan = BisectPlan(setup=RefSetup(repo=tmp_path, build="make", cache_dir=None), devices=("cpu",), tier="ci",
                      kernel_paths=(), golden_dtype="fp32", cases=(TINY,), good="v1", bad="v2",
                      golden_device="npu:2")
    assert BisectPlan.from_dict(plan.to_dict()) == plan
    older = {k: v for k, v in plan.to_dict().items() if k != "golden_device"}   # a bisect stored before the flag
    assert BisectPlan.from_dict(older).golden_device == "cpu"
