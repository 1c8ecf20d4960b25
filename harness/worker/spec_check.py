"""``python -m harness.worker.spec_check``: a spec case file's module checked in a short-lived
interpreter (the front end imports no torch and never the code under test).

Reads one JSON request on stdin: ``{"module", "golden", "params": [dict, ...], "seed", "compare"}``
and prints one JSON line: ``{"golden": name, "tables": [table per params entry], "intermediates":
[[name, upstream], ...]}`` (the module's ``INTERMEDIATES``), or
``{"error": {"field": "spec" | "golden" | "params" | "compare", "index": i, "name": output, "message"}}``.
Or a batch, ``{"requests": [request, ...]}`` (every spec file of one load, one interpreter), answered
``{"answers": [{"answer": ..., "sources": [file, ...]}, ...]}``: the user source files imported up
to that answer, which the load-time cache (``harness.casefiles.spec_cache``) keys on.
For each params entry the specs are built, checked and created once (seeded as a case is), so a
bad init_value is found before any case runs.  Comparators are parsed and their names checked
against the specs; ``package.module:function`` ones are imported.
"""
from __future__ import annotations

import json
import os
import sys


def check(request: dict) -> dict:
    from harness.comparators import parse_comparator
    from harness.intermediates.spec import declares_dump
    from harness.worker import spec_module
    from harness.worker.spec_module import SpecError

    def error(field: str, message: str, **extra) -> dict:
        return {"error": {"field": field, "message": message, **extra}}

    try:
        module = spec_module.import_module(request["module"])
    except SpecError as exc:
        return error("spec", str(exc))
    try:
        golden, fn = spec_module.golden_function(module, request.get("golden"))
    except SpecError as exc:
        return error("golden" if request.get("golden") else "spec", str(exc))
    try:
        intermediates = spec_module.declared_intermediates(module)
    except SpecError as exc:
        return error("spec", str(exc))
    if intermediates and not declares_dump(fn):    # nothing to compare the kernel's dumps with
        return error("golden" if request.get("golden") else "spec",
                     f"spec module {request['module']}: it lists INTERMEDIATES but {golden} takes no `dump` "
                     f"parameter (def {golden}(tensors, dump=None) and call dump(name, tensor))")
    tables = []
    for i, params in enumerate(request["params"]):
        try:
            spec_module.seed_all(request.get("seed", 0))
            entries = spec_module.build(module, params)
            spec_module.create(entries, request.get("seed", 0))
        except SpecError as exc:
            return error("params" if "parameter" in str(exc) else "spec", str(exc), index=i)
        table = spec_module.table(entries)
        if intermediates and any(row["name"] == "dump" for row in table):
            return error("spec", f"spec module {request['module']}: a spec is named 'dump', the parameter a "
                                 f"kernel dumps its INTERMEDIATES through", index=i)
        tables.append(table)
        names = {row["name"]: row for row in table}
        outputs = [row["name"] for row in table if row["role"] == "output"]
        for name, text in (request.get("compare") or {}).items():
            if name not in outputs:
                return error("compare", f"the spec has no output {name!r} (outputs: {', '.join(outputs)})",
                             name=name, key=True)
            comparator = parse_comparator(text)
            if comparator.kind == "function":
                try:
                    spec_module.resolve_callable(comparator.arg, f"comparator for {name}")
                except SpecError as exc:
                    return error("compare", str(exc), name=name)
            elif comparator.kind != "ulp" and (comparator.arg not in names or names[comparator.arg]["role"] == "scalar"):
                return error("compare", f"{comparator.kind}({comparator.arg}): the spec has no tensor "
                                        f"{comparator.arg!r}", name=name)
    return {"golden": golden, "tables": tables, "intermediates": intermediates}


def _user_sources(before: set[str]) -> list[str]:
    """The files of the modules imported since ``before`` that are not the stdlib's, torch's or
    numpy's: what a cached answer depends on (``harness.casefiles.spec_cache``)."""
    import sysconfig

    import numpy
    import torch
    skip = tuple(str(p) + os.sep for p in {sysconfig.get_paths()["stdlib"], os.path.dirname(torch.__file__),
                                            os.path.dirname(numpy.__file__)})
    found = []
    for name in sorted(set(sys.modules) - before):
        path = getattr(sys.modules[name], "__file__", None)
        if isinstance(path, str) and os.path.isfile(path) and not os.path.abspath(path).startswith(skip):
            found.append(os.path.abspath(path))
    return sorted(set(found))


def _one(request: dict) -> dict:
    try:
        return check(request)
    except Exception as exc:  # noqa: BLE001 (one line for the front end, whatever the module did)
        return {"error": {"field": "spec", "message": f"spec module {request.get('module')}: "
                                                     f"{type(exc).__name__}: {exc}"}}


def main() -> int:
    request = json.loads(sys.stdin.read())
    if "requests" not in request:
        print(json.dumps(_one(request), default=repr))
        return 0
    # a batch (every spec file of one load): one interpreter, one torch import; each answer with the
    # user files imported so far (a superset of what it read: a helper the first module imported
    # may serve the second)
    from harness import comparators  # noqa: F401  (imported before the snapshot: not a user source)
    from harness.worker import spec_module  # noqa: F401
    before = set(sys.modules)
    answers = []
    for one in request["requests"]:
        answer = _one(one)
        answers.append({"answer": answer, "sources": _user_sources(before)})
    print(json.dumps({"answers": answers}, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
