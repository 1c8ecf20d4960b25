"""``--kernel``'s check, run before any case in a short-lived interpreter with the workers'
PYTHONPATH: ``python -m harness.worker.kernel_check KERNEL OP...`` (a spec op as ``OP=arg,arg,...``).

For each op it imports the kernel's callable as a worker would (``registry.target``)
and binds the op's argument names to its signature with the launcher's rule
(``launch.verify_signature``).  Its last line of output is one JSON object, op → ``{"state", "detail"}``:
``ok``; ``absent`` (the kernel has no callable for the op); ``import`` (its module
does not import, or a named callable is missing); ``signature`` (the op's arguments
do not bind).  It runs apart from the front end so the code under test never loads there.
"""
from __future__ import annotations

import importlib
import json
import sys

from harness.ops import OPS
from harness.ops.registry import target
from harness.worker.launch import ContractError, verify_signature

OK, ABSENT, IMPORT, SIGNATURE = "ok", "absent", "import", "signature"


def check(kernel: str, op: str, arg_names: tuple[str, ...] | None = None) -> dict[str, str]:
    """``arg_names``: a spec op's (``OP=a,b,c`` on the command line); else the builtin op's."""
    try:
        module_name, _, attr = target(kernel, op).partition(":")
    except KeyError:
        return {"state": ABSENT, "detail": ""}
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a kernel may raise anything, even SystemExit, at import
        return {"state": IMPORT, "detail": f"module {module_name} does not import: {type(exc).__name__}: {exc}"}
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        # A kernel module lacks the op; a named callable that is not there is a typo.
        state = ABSENT if ":" not in kernel and kernel == module_name else IMPORT
        return {"state": state, "detail": f"{module_name} has no callable {attr!r}"}
    try:
        verify_signature(fn, dict.fromkeys(arg_names if arg_names is not None else OPS[op].arg_names), op)
    except ContractError as exc:
        return {"state": SIGNATURE, "detail": str(exc)}
    return {"state": OK, "detail": ""}


def main(argv: list[str]) -> int:
    kernel, *ops = argv
    states = {}
    for token in ops:
        op, sep, names = token.partition("=")
        states[op] = check(kernel, op, tuple(filter(None, names.split(","))) if sep else None)
    print(json.dumps(states), flush=True)   # last: a kernel may print while it imports
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
