"""The golden process: computes and caches goldens where no kernel is ever imported.

One per run (``harness.run.golden_process`` starts it: forked from the CPU zygote, which
imported torch and ran nothing, or spawned fresh where the run has accelerators).  It
talks to the front end only: for each ``GoldenRequest`` it makes sure the case's goldens
are in the golden cache (``GoldenCache.ensure``: the file checked once, or the inputs
generated from the seed and the goldens computed and written) and answers with a
``GoldenRef`` to that file, which the front end passes to the device worker.  It is the
only writer of the golden cache, so what a kernel does to its own process (a changed
default dtype, a patched ``torch.rsqrt``) never reaches a golden.  It imports the
harness's goldens and input generator, never a kernel, and never touches a device.  A spec
op's golden is user code (its module, imported from the run's ``--kernel-path``): it runs
here too, on the host, and what goes wrong in it is the case's ``GOLDEN_ERROR``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection

from dataclasses import dataclass
from typing import Callable

from harness.case import Case
from harness.worker import protocol

# Inputs (read-only arguments and caches) below this run on one torch thread: starting a
# thread pool costs more than it saves on a golden this small (bench/bench_golden_scale.py).
SMALL_GOLDEN_BYTES = 16 << 20


def host_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:        # no affinity call on this platform
        return os.cpu_count() or 1


def golden_threads(input_bytes: int, cores: int) -> int:
    """Torch threads for a host golden whose inputs take ``input_bytes``: one when small, else every core."""
    return 1 if input_bytes < SMALL_GOLDEN_BYTES else max(1, cores)


def input_bytes(case: Case) -> int:
    """What ``case``'s inputs and caches take, from its memory plan (before anything is drawn)."""
    from harness.memory_plan import plan

    parts = plan(case)
    return parts.inputs + parts.caches


@dataclass(frozen=True)
class Accelerator:
    """What the golden process does on an accelerator kind: full fp32 matmuls, and giving memory back."""

    full_precision: Callable[[], None]     # before the first golden: no reduced-precision matmul inputs
    release: Callable[[], None]            # after each golden: cached blocks back to the device worker


def _cuda_full_precision() -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _cuda_release() -> None:
    import torch
    torch.cuda.empty_cache()


def _npu_full_precision() -> None:
    import torch_npu              # HF32 is Ascend's TF32: 11-bit mantissa matmul inputs
    torch_npu.npu.matmul.allow_hf32 = False
    torch_npu.npu.conv.allow_hf32 = False


def _npu_release() -> None:
    import torch
    import torch_npu  # noqa: F401  (registers torch.npu)
    torch.npu.empty_cache()


ACCELERATORS: dict[str, Accelerator] = {"cuda": Accelerator(_cuda_full_precision, _cuda_release),
                                        "npu": Accelerator(_npu_full_precision, _npu_release)}


def golden_device(text: str):
    """The torch device ``--golden-device`` names, set up for goldens (see ``Accelerator``)."""
    from harness.devices import backend, parse_device

    device = parse_device(text, "--golden-device")
    if device.kind in ACCELERATORS:
        ACCELERATORS[device.kind].full_precision()
    return backend(device).torch_device(device)


def answer(request: protocol.GoldenRequest, cache, device=None, cores: int | None = None) -> protocol.GoldenReply:
    """The goldens of one request, in ``cache`` (a ``GoldenCache`` with a root), computed on
    ``device`` (a torch device from ``golden_device``; None: the host, with ``cores`` threads at most)."""
    import torch

    from harness.worker import inputs
    from harness.worker.spec_module import SpecError

    started = time.perf_counter()
    case = request.case
    device = device if device is not None else torch.device("cpu")
    try:
        dtype = {"fp32": torch.float32, "fp64": torch.float64}[request.dtype]
        spec = inputs.input_spec(case)
        if device.type == "cpu":
            torch.set_num_threads(golden_threads(input_bytes(case), cores or host_cores()))

        def make_inputs():
            generated = inputs.generate(case, device)
            if generated.spec != spec:      # the key would not describe these inputs
                raise RuntimeError(f"input spec of {case.case_id} differs from its generated inputs' spec")
            return generated.args

        golden = case.op
        if case.spec is not None:        # a spec op: the user's golden, on the host (docs/specs.md)
            from harness.worker.spec_inputs import golden_for
            golden = golden_for(case)
            make_inputs = golden.make_inputs
        try:
            path, key, hit = cache.ensure(golden, spec, make_inputs, dtype,
                                          device.type if case.spec is None else "cpu")
        finally:
            if device.type in ACCELERATORS:
                ACCELERATORS[device.type].release()
    except SpecError as exc:        # the user's spec module or golden: GOLDEN_ERROR, not the harness's
        failure = protocol.Failure(protocol.Stage.SPEC, type(exc).__name__, str(exc),
                                   "".join(traceback.format_exception(exc)))
        return protocol.GoldenReply(case.case_id, request.nonce, failure=failure)
    except Exception as exc:       # a golden that fails is the harness's failure: HARNESS_ERROR
        failure = protocol.Failure(protocol.Stage.GOLDEN, type(exc).__name__, str(exc),
                                   "".join(traceback.format_exception(exc)))
        return protocol.GoldenReply(case.case_id, request.nonce, failure=failure)
    ref = protocol.GoldenRef(str(path), key, hit, time.perf_counter() - started, os.getpid(), device.type)
    return protocol.GoldenReply(case.case_id, request.nonce, golden=ref)


def serve(conn: Connection, cache_dir: str, device_text: str = "cpu") -> int:
    """Announce readiness, then answer ``GoldenRequest``s until ``Stop`` or the pipe closes."""
    from harness.goldens.cache import GoldenCache

    cache = GoldenCache(cache_dir)
    device = golden_device(device_text)
    cores = host_cores()
    protocol.send(conn, protocol.Ready(pid=os.getpid(), absent=None, info={"golden_device": str(device)}))
    while True:
        try:
            request, _ = protocol.receive(conn, protocol.GoldenRequest, protocol.Stop)
        except EOFError:
            return 0
        if isinstance(request, protocol.Stop):
            return 0
        protocol.send(conn, answer(request, cache, device, cores))


def forked_main(conn: Connection, cache_dir: str, env: dict[str, str], log_path: str, front_end_pid: int) -> None:
    """Entry point when forked from the CPU zygote: its own session, log, environment and lifeline."""
    from harness.worker.serve import become_forked_child

    become_forked_child(env, log_path, front_end_pid)
    sys.exit(serve(conn, cache_dir))


def main(argv: list[str] | None = None) -> int:
    from harness.worker.serve import lifeline

    parser = argparse.ArgumentParser(prog="harness.worker.golden_serve")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--golden-cache", required=True)
    parser.add_argument("--front-end-pid", type=int, required=True)
    parser.add_argument("--golden-device", default="cpu")
    args = parser.parse_args(argv)
    lifeline(args.front_end_pid)
    return serve(Connection(args.fd), args.golden_cache, args.golden_device)


if __name__ == "__main__":
    sys.exit(main())
