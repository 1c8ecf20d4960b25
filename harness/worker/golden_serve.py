"""The golden process: computes and caches goldens where no kernel is ever imported.

One per run (``harness.run.golden_process`` starts it: forked from the CPU zygote, which
imported torch and ran nothing, or spawned fresh where the run has accelerators).  It
talks to the front end only: for each ``GoldenRequest`` it makes sure the case's goldens
are in the golden cache (``GoldenCache.ensure``: the file checked once, or the inputs
generated from the seed and the goldens computed and written) and answers with a
``GoldenRef`` to that file, which the front end passes to the device worker.  It is the
only writer of the golden cache, so what a kernel does to its own process (a changed
default dtype, a patched ``torch.rsqrt``) never reaches a golden.  It imports the
harness's goldens and input generator, never a kernel, and never touches a device.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection

from harness.worker import protocol


def answer(request: protocol.GoldenRequest, cache) -> protocol.GoldenReply:
    """The goldens of one request, in ``cache`` (a ``GoldenCache`` with a root)."""
    import torch

    from harness.worker import inputs

    started = time.perf_counter()
    case = request.case
    try:
        dtype = {"fp32": torch.float32, "fp64": torch.float64}[request.dtype]
        spec = inputs.input_spec(case)

        def make_inputs():
            generated = inputs.generate(case)
            if generated.spec != spec:      # the key would not describe these inputs
                raise RuntimeError(f"input spec of {case.case_id} differs from its generated inputs' spec")
            return generated.args

        path, key, hit = cache.ensure(case.op, spec, make_inputs, dtype)
    except Exception as exc:       # a golden that fails is the harness's failure: HARNESS_ERROR
        failure = protocol.Failure(protocol.Stage.GOLDEN, type(exc).__name__, str(exc),
                                   "".join(traceback.format_exception(exc)))
        return protocol.GoldenReply(case.case_id, request.nonce, failure=failure)
    ref = protocol.GoldenRef(str(path), key, hit, time.perf_counter() - started, os.getpid())
    return protocol.GoldenReply(case.case_id, request.nonce, golden=ref)


def serve(conn: Connection, cache_dir: str) -> int:
    """Announce readiness, then answer ``GoldenRequest``s until ``Stop`` or the pipe closes."""
    from harness.goldens.cache import GoldenCache

    cache = GoldenCache(cache_dir)
    protocol.send(conn, protocol.Ready(pid=os.getpid(), absent=None, info={}))
    while True:
        try:
            request, _ = protocol.receive(conn, protocol.GoldenRequest, protocol.Stop)
        except EOFError:
            return 0
        if isinstance(request, protocol.Stop):
            return 0
        protocol.send(conn, answer(request, cache))


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
    args = parser.parse_args(argv)
    lifeline(args.front_end_pid)
    return serve(Connection(args.fd), args.golden_cache)


if __name__ == "__main__":
    sys.exit(main())
