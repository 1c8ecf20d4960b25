"""The golden process's goldens are the in-process goldens, bit for bit, over the shipped
matrix (every case of cases/*.yaml that runs on the CPU; the device tier's qwen3-14b
geometry is not computed twice here).  In process they are computed with the torch thread
count the golden process takes for the case: on some CPUs MKL splits an fp32 product's sums
between threads, so one thread and two differ in the last bit (decode_layers' hidden)."""
from __future__ import annotations

import torch
from safetensors import safe_open

from helpers import ROOT
from harness import goldens
from harness.casefiles import load_paths
from harness.run.golden_process import GoldenProcess
from harness.run.spawn import WorkerOptions
from harness.worker.golden_serve import golden_threads, host_cores, input_bytes
from harness.worker.inputs import generate


def test_goldens_from_the_golden_process_equal_in_process_goldens_bit_for_bit(tmp_path):
    # builtin ops (a spec op's golden is its module's: tests/unit/test_spec_ops.py)
    cases = [c for c in load_paths(sorted((ROOT / "cases").glob("*.yaml"))) if c.tier != "device" and c.spec is None]
    assert len({c.op for c in cases}) == len(goldens.ops())          # every op is in it
    process = GoldenProcess(WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")), fork=True)
    try:
        for case in cases:
            reply = process.request(case)
            assert reply is not None and reply.failure is None, (case.case_id, reply)
            threads = torch.get_num_threads()
            torch.set_num_threads(golden_threads(input_bytes(case), host_cores()))
            try:
                expected = goldens.compute(case.op, generate(case).args, torch.float32, exact=True)
            finally:
                torch.set_num_threads(threads)
            with safe_open(reply.golden.path, framework="pt") as f:
                stored = {name: f.get_tensor(name) for name in f.keys()}
            assert set(stored) == set(expected), case.case_id
            for name, tensor in expected.items():
                assert stored[name].dtype == tensor.dtype and torch.equal(stored[name], tensor), (case.case_id, name)
    finally:
        process.close()
