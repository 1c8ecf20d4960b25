"""``harness dumps CASE_ID DIR``: compare a folder of dumps with the goldens of that case (docs/intermediates.md)."""
from __future__ import annotations

import json
from pathlib import Path

from harness.casefiles.matrix import load_paths
from harness.errors import UsageError
from harness.files import atomic_path
from harness.formats import printable
from harness.intermediates import table
from harness.run import options
from harness.summary import strict_json


def cmd_dumps(args) -> int:
    """Exit 0 when every dumped intermediate is ok, 1 when one is bad or a file breaks the ABI, 2 for usage."""
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"harness dumps: {args.folder}: not a directory")
    args.paths = args.paths or ["cases"]
    by_id = {c.case_id: c for c in load_paths(args.paths)}
    case = by_id.get(args.case_id)
    if case is None:
        near = [i for i in by_id if args.case_id.split("[")[0] in i][:3]
        hint = f"; cases of {', '.join(args.paths)} include {', '.join(near or list(by_id)[:3])}" if by_id else ""
        raise UsageError(f"harness dumps: no case {args.case_id!r}{hint}")
    cache = options.golden_cache(args.golden_cache, args.no_golden_cache)
    if cache is None:
        cache = str(options.default_cache_dir())
    found = _compare(case, folder, cache, args.golden_dtype)
    print(printable(table.text(found, limit=10_000)))
    for line in found["problems"]:
        print(printable(f"CONTRACT {line}"))
    if args.json:
        with atomic_path(args.json) as tmp, open(tmp, "w") as fh:
            json.dump(strict_json({"case_id": case.case_id, "folder": str(folder), **found}), fh, indent=1,
                      default=str, allow_nan=False)
    return 1 if found["first_bad_intermediate"] or found["problems"] else 0


def _compare(case, folder: Path, cache: str, golden_dtype: str) -> dict:
    from harness.intermediates.offline import compare_folder

    return compare_folder(case, folder, cache, golden_dtype)
