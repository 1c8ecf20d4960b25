"""Peak host RSS of a device worker running the qwen3-14b ``decode_layers`` case with
``--intermediates always`` beside ``off`` (issue 24, item 7: always / off <= 1.2x).

    python bench/bench_intermediates_rss.py [--layers 1,2,4,8,40] [--context 256] [--batch 16]

The real case (qwen3-14b, batch 16, 40 layers, up to 3756 tokens a sequence in
cases/device/qwen3-14b-layers.yaml, 32k in the memory plan's worst case) needs hundreds of GB
on the host; this runs its geometry at a short context (``const(--context)`` tokens a
sequence), which keeps the layers' weights (the same whatever the layer count) and scales the
cache and the intermediates (linear in the layer count).  Per layer count, in fresh processes:

1. a golden process's step (``harness.worker.golden_serve.answer``): the goldens and their
   intermediates computed on the host and written to a golden cache in a temp folder;
2. for each mode (``off`` and ``always``, the order alternating with the layer count): a fresh
   process that does what a device worker does with a case (``execute_case`` with the golden
   process's file, ``GoldenCache(None)``, the reference kernel on the CPU, which dumps every
   intermediate) and exits.

The peak RSS of each worker process is its ``ru_maxrss`` as its parent collects it
(``os.wait4``), checked against the ``VmHWM`` it reads from ``/proc/self/status`` before it
exits; its RSS after the imports is printed too.  Prints each run, then per layer count the
two peaks and their ratio, and the load average before and after (the machine is shared).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ROOT / "cases" / "device" / "qwen3-14b-layers.yaml"


def layers_case(layers: int, context: int, batch: int):
    from harness.case import SeqLens
    from harness.casefiles import load_matrix
    case = next(c for c in load_matrix(LAYERS)
                if c.geometry.num_layers == 40 and str(c.slot_mode) == "arange" and c.block_value is None)
    return replace(case, case_id=f"qwen3-14b decode_layers L={layers} B={batch} ctx={context}",
                   geometry=replace(case.geometry, num_layers=layers, batch=batch),
                   seq_lens=SeqLens("const", (context,)))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


# -- the child processes ---------------------------------------------------------------------

def child_golden(args: argparse.Namespace) -> dict:
    from harness.goldens.cache import GoldenCache
    from harness.worker import golden_serve, protocol
    case = layers_case(args.layers_one, args.context, args.batch)
    reply = golden_serve.answer(protocol.GoldenRequest(case, "fp32"), GoldenCache(args.cache))
    if reply.failure is not None:
        raise RuntimeError(f"golden failed: {reply.failure.message}")
    return {"golden": reply.golden.to_wire(), "peak_kib": _status_kib("VmHWM")}


def child_worker(args: argparse.Namespace) -> dict:
    import torch  # noqa: F401  (imported before the baseline RSS is read, as a worker has it)

    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker import protocol
    from harness.worker.execute import KernelLoader, execute_case
    case = layers_case(args.layers_one, args.context, args.batch)
    golden = protocol.GoldenRef.from_wire(json.loads(args.golden))
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    loader.load(case.kernel, case.op)
    baseline = _status_kib("VmRSS")
    start = time.perf_counter()
    reply = execute_case(case, device, be, GoldenCache(None), loader, golden=golden, intermediates=args.mode)
    found = reply.metrics.get("intermediates", {})
    return {"outcome": reply.outcome.value if reply.outcome else f"failure: {reply.failure.message}",
            "seconds": time.perf_counter() - start, "baseline_kib": baseline, "peak_kib": _status_kib("VmHWM"),
            "dumped": found.get("dumped", 0), "first_bad": found.get("first_bad_intermediate")}


# -- the parent --------------------------------------------------------------------------------

def spawn(*argv: str) -> tuple[dict, int]:
    """Run this script as a child; its JSON line and its ``ru_maxrss`` (KiB) from ``wait4``."""
    proc = subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        out = proc.stdout.read()
    finally:
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child {argv} exited with {proc.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1]), usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="1,2,4,8,40")
    parser.add_argument("--context", type=int, default=256, help="tokens a sequence (const)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--child", choices=("golden", "worker"), help=argparse.SUPPRESS)
    parser.add_argument("--layers-one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--golden", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = (child_golden if args.child == "golden" else child_worker)(args)
        print(json.dumps(result))
        return 0

    mib = 1024.0
    common = ["--context", str(args.context), "--batch", str(args.batch)]
    print(f"load before: {os.getloadavg()}; qwen3-14b decode_layers, batch {args.batch}, "
          f"const({args.context}) tokens a sequence, reference kernel on the CPU")
    peaks: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as cache:
        for i, layers in enumerate(int(n) for n in args.layers.split(",")):
            started = time.perf_counter()
            golden, gold_peak = spawn("--child", "golden", "--layers-one", str(layers), "--cache", cache, *common)
            print(f"L={layers}: golden process {time.perf_counter() - started:.1f} s, peak RSS {gold_peak / mib:.0f} MiB")
            peaks[layers] = {}
            for mode in (("off", "always") if i % 2 == 0 else ("always", "off")):
                got, peak = spawn("--child", "worker", "--layers-one", str(layers), "--golden",
                                  json.dumps(golden["golden"]), "--mode", mode, *common)
                peaks[layers][mode] = peak / mib
                print(f"L={layers} {mode:>6}: peak RSS {peak / mib:.1f} MiB (VmHWM {got['peak_kib'] / mib:.1f}), "
                      f"after imports {got['baseline_kib'] / mib:.0f} MiB; case {got['seconds']:.1f} s, "
                      f"{got['outcome']}, {got['dumped']} intermediates dumped, first bad {got['first_bad']}",
                      flush=True)
    print("\nlayers | peak RSS off MiB | always MiB | always - off MiB | always / off")
    for layers, p in peaks.items():
        print(f"{layers:6d} | {p['off']:16.1f} | {p['always']:10.1f} | {p['always'] - p['off']:16.1f} | "
              f"{p['always'] / p['off']:.3f}")
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
