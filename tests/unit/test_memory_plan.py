"""The memory plan (harness/memory_plan.py): its figures against a measured run, the skip and
the refusal it drives, and the available memory it is held against (harness/devices.py)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness import packs
from harness.devices import Device, Memory, host_memory, memory_probe_main
from harness.memory_plan import DTYPE_BYTES, MIN_GUARD_BYTES, fit_problem, human_bytes, plan
from harness.ops import OPS
from harness.packs.qwen3.memory import GOLDEN_LM_HEAD_ROWS, GOLDEN_QUERY_BLOCK, _EXACT_TWIN
from harness.run import engine as engine_module
from harness.run.engine import Engine, RunOptions
from harness.run.spawn import WorkerOptions

REPO = Path(__file__).resolve().parents[2]
GB = 10**9


def _case(op: str, seq: int, chunk: int | None = None, **geometry) -> Case:
    return Case(case_id="c", matrix="m", source="m.yaml:1", op=op, kernel="reference",
                geometry=dataclasses.replace(PRESETS["tiny"], **geometry), seq_lens=SeqLens("const", (seq,)),
                slot_mode=SlotMode("arange"), seed=1, chunk_size=chunk)


# One case, run the way the worker runs it (execute_case on cpu, the golden cache on), in a fresh
# interpreter: its peak RSS growth (VmHWM, reset after the warm-up through /proc/self/clear_refs).
# glibc is told to return every freed block over 64 kB, so the RSS follows the bytes allocated
# rather than what the allocator keeps.
_MEASURE = textwrap.dedent("""
    import dataclasses, json, sys, tempfile
    from harness.case import PRESETS, Case, SeqLens, SlotMode
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    op, geometry, seq, chunk = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    def case(geo, seq):
        return Case(case_id="c", matrix="m", source="m.yaml:1", op=op, kernel="reference", geometry=geo,
                    seq_lens=SeqLens("const", (seq,)), slot_mode=SlotMode("arange"), seed=1, chunk_size=chunk)
    device, loader, cache = Device("cpu"), KernelLoader(), GoldenCache(tempfile.mkdtemp())
    execute_case(case(PRESETS["tiny"], 20), device, backend(device), cache, loader)   # imports, lazy init
    with open("/proc/self/clear_refs", "w") as peak:
        peak.write("5")                          # the peak starts again from here
    before = status("VmRSS")
    reply = execute_case(case(dataclasses.replace(PRESETS["tiny"], **geometry), seq), device, backend(device),
                         cache, loader)
    print(json.dumps({"outcome": str(reply.outcome), "grown": status("VmHWM") - before}))
""")

# Each op at a few tens of MB, so the allocator's noise (a few hundred kB) does not count.
_MEASURED = [
    ("decode_layers", 1024, None, dict(batch=4, hidden=512, intermediate=1024, vocab=4096, num_layers=2,
                                       num_heads=8, num_kv_heads=2, head_dim=64)),
    ("fused_rope_decode_attention", 4096, None, dict(batch=8, num_heads=8, num_kv_heads=2, head_dim=64)),
    ("prefill_attention", 2048, 512, dict(batch=2, num_heads=8, num_kv_heads=2, head_dim=64)),
    ("paged_decode_attention", 4096, None, dict(batch=8, num_heads=8, num_kv_heads=2, head_dim=64)),
    ("rope_kv_write", 4096, None, dict(batch=16, num_heads=8, num_kv_heads=2, head_dim=64)),
]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures the peak RSS through /proc")
@pytest.mark.parametrize("op, seq, chunk, geometry", _MEASURED, ids=[m[0] for m in _MEASURED])
def test_plan_is_not_below_the_measured_peak_nor_twice_above_it(tmp_path, op, seq, chunk, geometry):
    script = tmp_path / "measure.py"
    script.write_text(_MEASURE)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536",
           "HARNESS_GOLDEN_CACHE": str(tmp_path / "goldens")}
    done = subprocess.run([sys.executable, str(script), op, json.dumps(geometry), str(seq), json.dumps(chunk)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["outcome"] == "Outcome.PASS"
    planned = plan(_case(op, seq, chunk, **geometry)).device_bytes("cpu")
    assert measured["grown"] > 10 * 2**20, measured          # big enough to mean something
    assert measured["grown"] <= planned <= 2 * measured["grown"], (planned, measured)


def test_the_planned_parts_are_the_buffers_the_worker_allocates():
    """inputs, caches, outputs: exactly the tensors the pack's generator makes."""
    from harness.worker import inputs
    case = _case("fused_rope_decode_attention", 100, num_heads=8, num_kv_heads=2, head_dim=64)
    ci = inputs.generate(case)
    p = plan(case)
    op = OPS[case.op]
    assert p.inputs == sum(ci.args[a.name].nbytes for a in op.by_role("input"))
    assert p.caches == sum(ci.args[a.name].nbytes for a in op.caches)
    assert p.outputs == sum(math.prod(ci.outputs[a.name][0]) * DTYPE_BYTES[a.dtype] for a in op.outputs)
    assert p.pristine == p.inputs


def test_restated_constants_match_the_code_they_describe():
    import torch

    from harness import goldens
    from harness.goldens import common, decode_layers
    from harness.worker import launch
    assert GOLDEN_QUERY_BLOCK == common.QUERY_BLOCK
    assert GOLDEN_LM_HEAD_ROWS == decode_layers.LM_HEAD_ROWS
    assert MIN_GUARD_BYTES == launch._MIN_GUARD_BYTES
    qwen3 = packs.pack_of("rope_kv_write").ops          # the Qwen3 pack's plan restates its own ops only
    assert _EXACT_TWIN == {op for op in qwen3 if goldens.exact_names(op)}
    assert DTYPE_BYTES == {name: getattr(torch, name).itemsize for name in DTYPE_BYTES}


def test_the_measured_too_big_case_needs_its_caches_twice_on_cpu():
    """batch 64 x 32768 tokens of qwen3-14b decode_layers: 343 GB of caches (what issue 14 measured)."""
    g = dataclasses.replace(PRESETS["qwen3-14b"], batch=64)
    case = dataclasses.replace(_case("decode_layers", 32768), geometry=g)
    p = plan(case)
    assert 343 * GB < p.caches < 344 * GB
    assert p.device_bytes("cpu") > 2 * p.caches       # the generated caches and their guarded copy
    assert p.device_bytes("cuda") < p.device_bytes("cpu")


def test_fit_problem_names_the_figure_and_the_device():
    p = plan(_case("paged_decode_attention", 64))
    need = p.device_bytes("cpu")
    assert fit_problem(p, Device("cpu"), Memory(need, need), None) is None
    assert fit_problem(p, Device("cpu"), None, None) is None           # no figure: not held against it
    why = fit_problem(p, Device("cpu"), Memory(need - 1, 10 * need), None)
    assert why == f"needs {human_bytes(need)}; cpu has {human_bytes(need - 1)} available"
    gpu = Device("cuda", 0)
    why = fit_problem(p, gpu, Memory(1000, 2000), Memory(10**12, 10**12))
    assert why == f"needs {human_bytes(p.device_bytes('cuda'))} on cuda:0; cuda:0 has 1 kB available"
    why = fit_problem(p, gpu, Memory(10**12, 10**12), Memory(1000, 2000))
    assert why.endswith("on the host; the host has 1 kB available")



def test_a_golden_on_the_case_accelerator_is_counted_there_and_not_on_the_host():
    """--golden-device cuda:0 for a case on cuda:0: the golden process's draw, golden and working
    set move from the host's figure to the device's; on another device the host keeps only the
    golden's copy for the cache file."""
    p = plan(_case("decode_layers", 3000))
    gpu = Device("cuda", 0)
    assert p.device_bytes("cuda", golden_here=True) == p.device_bytes("cuda") + p.golden_share
    assert p.host_bytes("cuda", golden_on_host=False) == p.golden < p.host_bytes("cuda")
    just = Memory(p.device_bytes("cuda"), 10**15)        # the case alone fits, with its golden it does not
    roomy = Memory(10**15, 10**15)
    assert fit_problem(p, gpu, just, roomy) is None
    why = fit_problem(p, gpu, just, roomy, golden_device="cuda:0")
    assert why == (f"needs {human_bytes(p.device_bytes('cuda', golden_here=True))} on cuda:0; "
                   f"cuda:0 has {human_bytes(just.available)} available")
    host_only_golden = Memory(p.golden, 10**15)
    assert fit_problem(p, gpu, roomy, host_only_golden, golden_device="cuda:1") is None
    assert fit_problem(p, gpu, roomy, host_only_golden).endswith("on the host; the host has "
                                                                f"{human_bytes(p.golden)} available")

def test_human_bytes_takes_any_int():
    assert human_bytes(0) == "0 B"
    assert human_bytes(343_500_000_000) == "344 GB"
    assert human_bytes(2**40) == "1.1 TB"
    assert human_bytes(10**400) == "1.00e382 EB"      # past float range: no OverflowError


def test_host_memory_reads_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n")
    assert host_memory(meminfo) == Memory(available=20000000 * 1024, total=24000000 * 1024)
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert host_memory(meminfo) is None
    assert host_memory(tmp_path / "absent") is None


def test_memory_probe_reports_the_cpu(capsys):
    memory_probe_main(["cpu"])
    found = json.loads(capsys.readouterr().out)
    assert found["cpu"] is None or found["cpu"][0] <= found["cpu"][1]


def test_engine_skips_a_case_the_device_cannot_hold_before_sending_it(tmp_path, monkeypatch):
    small = _case("paged_decode_attention", 64)
    need = plan(small).device_bytes("cpu")
    monkeypatch.setattr(engine_module, "host_memory", lambda: Memory(need - 1, 10**12))
    monkeypatch.setattr(engine_module, "HOST_MEMORY_AGE_S", -1.0)      # read at every case
    with Engine(RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=tmp_path))) as engine:
        result = engine.run_one(small)
        assert result.outcome.name == "SKIPPED"
        assert result.summary == f"needs {human_bytes(need)}; cpu has {human_bytes(need - 1)} available"
        assert engine.memory_skip_reason(small, Device("cpu")) == result.summary
        monkeypatch.setattr(engine_module, "host_memory", lambda: Memory(need, 10**12))
        assert engine.memory_skip_reason(small, Device("cpu")) is None


def test_engine_reads_host_memory_at_most_once_per_age(tmp_path, monkeypatch):
    small = _case("paged_decode_attention", 64)
    reads = []
    monkeypatch.setattr(engine_module, "host_memory", lambda: reads.append(1) or Memory(10**12, 10**12))
    monkeypatch.setattr(engine_module, "HOST_MEMORY_AGE_S", 3600.0)
    with Engine(RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=tmp_path))) as engine:
        for _ in range(5):
            assert engine.memory_skip_reason(small, Device("cpu")) is None
    assert len(reads) == 1


def test_engine_asks_an_accelerator_once_per_run(tmp_path, monkeypatch):
    small = _case("paged_decode_attention", 64)
    asked = []

    def accelerator_memory(devices, env):
        asked.append(list(devices))
        return {Device("npu", 0): Memory(1, 1), Device("npu", 1): None}

    monkeypatch.setattr(engine_module, "accelerator_memory", accelerator_memory)
    monkeypatch.setattr(engine_module, "host_memory", lambda: None)
    options = RunOptions(devices=[Device("npu", 0), Device("npu", 1)], worker=WorkerOptions(log_dir=tmp_path))
    engine = Engine(options)
    try:
        assert engine.memory_skip_reason(small, Device("npu", 0)).endswith("on npu:0; npu:0 has 1 B available")
        assert engine.memory_skip_reason(small, Device("npu", 1)) is None
        assert len(asked) == 1
    finally:
        engine.close()



def test_engine_counts_a_golden_device_on_the_case_device(tmp_path, monkeypatch):
    case = _case("paged_decode_attention", 64)
    p = plan(case)
    exactly = Memory(p.device_bytes("npu"), 10**15)
    monkeypatch.setattr(engine_module, "accelerator_memory", lambda devices, env: {Device("npu", 0): exactly})
    monkeypatch.setattr(engine_module, "host_memory", lambda: Memory(10**15, 10**15))
    for golden_device, fits in (("cpu", True), ("npu:0", False)):
        options = RunOptions(devices=[Device("npu", 0)],
                             worker=WorkerOptions(log_dir=tmp_path, golden_device=golden_device))
        engine = Engine(options)
        try:
            why = engine.memory_skip_reason(case, Device("npu", 0))
        finally:
            engine.close()
        assert (why is None) == fits, why
    assert why.startswith(f"needs {human_bytes(p.device_bytes('npu', golden_here=True))} on npu:0")

def test_harness_ops_prints_the_plan_when_sequences_are_sized(capsys):
    from harness.cli import main
    assert main(["ops", "decode_layers", "--geometry", "qwen3-14b,batch=64,seq_len=32768"]) == 0
    out = capsys.readouterr().out
    assert "memory plan: 782 GB on cpu; on an accelerator 695 GB on the device and 393 GB on the host" in out   # 393: with the golden intermediates (docs/intermediates.md)
    assert main(["ops", "decode_layers", "--geometry", "qwen3-14b"]) == 0
    assert "memory plan" not in capsys.readouterr().out


def test_a_pack_without_a_memory_plan_gets_the_one_its_contract_gives(monkeypatch):
    """A pack that declares no ``memory_plan`` gets ``contract_plan``: the same parts the worker
    sizes for any op, the golden's share bounded from above."""
    from harness import memory_plan, packs
    case = _case("decode_layers", 37)
    own = plan(case)
    pack = packs.pack_of(case.op)
    monkeypatch.setattr(memory_plan.packs, "pack_of", lambda op: dataclasses.replace(pack, memory_plan=None))
    generic = plan(case)
    assert generic == memory_plan.contract_plan(case)
    for part in ("inputs", "caches", "outputs", "guard_bands", "pristine", "generation", "checks",
                 "golden_intermediates"):
        assert getattr(generic, part) == getattr(own, part), part
    assert generic.golden >= own.golden
