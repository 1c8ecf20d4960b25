"""``harness dumps CASE_ID DIR``: compare a folder of dumps with the goldens of that case (docs/intermediates.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from harness.casefiles import load_paths
from harness.errors import UsageError
from harness.files import atomic_path
from harness.formats import printable
from harness.intermediates import table
from harness.run import options
from harness.document.summary import strict_json


def cmd_dumps(args) -> int:
    """Exit 0 when every dumped intermediate is ok, 1 when one is bad or a file breaks the ABI, 2 for usage."""
    from harness.intermediates import files      # imports torch: not at the front end's start-up
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"harness dumps: {args.folder}: not a directory")
    if not any(p.name != files.PROVENANCE for p in folder.iterdir()):
        raise UsageError(f"harness dumps: {args.folder}: no dump files in it (expected <name>.pt, <name>.npy "
                         f"or <name>.bin + <name>.json)")
    args.paths = args.paths or ["cases"]
    paths = options.kernel_paths(getattr(args, "kernel_path", None) or ())
    by_id = {c.case_id: c for c in load_paths(args.paths, kernel_paths=paths)}
    case = by_id.get(args.case_id)
    if case is None:
        near = [i for i in by_id if args.case_id.split("[")[0] in i][:3]
        hint = f"; cases of {', '.join(args.paths)} include {', '.join(near or list(by_id)[:3])}" if by_id else ""
        raise UsageError(f"harness dumps: no case {args.case_id!r}{hint}")
    cache = options.golden_cache(args.golden_cache, args.no_golden_cache)
    if cache is None:
        cache = str(options.default_cache_dir())
    found = _compare(case, folder, cache, args.golden_dtype, paths)
    said = found["compared_with"]
    print(printable(f"compared with case {said['case_id']} (seed {said['seed']}, inputs digest "
                    f"{said['inputs_digest']}, {said['golden_dtype']} golden)"))
    for line in found["warnings"]:
        print(printable(f"warning: {line}"))
    print(printable(table.text(found, limit=10_000)))
    for line in found["problems"]:
        print(printable(f"CONTRACT {line}"))
    if args.json:
        with atomic_path(args.json) as tmp, open(tmp, "w") as fh:
            json.dump(strict_json({"case_id": case.case_id, "folder": str(folder), **found}), fh, indent=1,
                      default=str, allow_nan=False)
    return 1 if found["first_bad_intermediate"] or found["problems"] else 0


def _compare(case, folder: Path, cache: str, golden_dtype: str, kernel_paths: tuple[str, ...] = ()) -> dict:
    from harness.worker.dumps_offline import compare_folder
    from harness.worker.spec_module import SPEC_PATH_VAR

    if kernel_paths:      # a spec op's module (and its comparators) are imported here, as in the golden process
        os.environ[SPEC_PATH_VAR] = os.pathsep.join(kernel_paths)
    return compare_folder(case, folder, cache, golden_dtype)
