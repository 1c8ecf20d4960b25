"""``harness ops``: each op's kernel arguments (the contract tables of docs/contracts.md)."""
from __future__ import annotations

import dataclasses

from harness.ops.abi import contract_rows, markdown_table, spec_layouts, text_table
from harness.case import GEOMETRY_FIELDS, PRESETS, Case, Geometry, SeqLens, SlotMode, shape_sizes
from harness.casefiles.located import did_you_mean
from harness.cli.common import EXIT_OK
from harness.errors import UsageError
from harness.memory_plan import human_bytes, plan
from harness.ops import OPS

# Which arguments follow a case's ``dtype`` (docs/contracts.md, "dtype"); the Markdown tables say it
# in the doc's column legend instead.
DTYPE_NOTE = ("bfloat16: the case's dtype (bf16 by default, fp16 with `dtype: fp16`): caches, stored outputs and "
              "bf16 inputs follow it; float32 and int32 arguments keep theirs")

# Not a Geometry field: every sequence this long, which sizes MB, max_pos, N and T.
SEQ_LEN = "seq_len"


def cmd_ops(args) -> int:
    if getattr(args, "spec", None) is not None:
        if args.op is not None:
            raise UsageError(f"--spec: give a module or an op ({args.op}), not both")
        return spec_tables(args)
    if getattr(args, "params", None) or getattr(args, "golden", None):
        raise UsageError(f"{'--params' if args.params else '--golden'}: only with --spec MODULE")
    if args.op is not None and args.op.endswith((".yaml", ".yml")):
        return spec_tables(args)
    if args.op is not None and args.op not in OPS:
        raise UsageError(f"unknown op '{args.op}'{did_you_mean(args.op, OPS)} (ops: {', '.join(OPS)})")
    sizes = parse_geometry(args.geometry) if args.geometry else None
    case = _sized_case(*_geometry(args.geometry)) if args.geometry else None
    for i, op in enumerate([args.op] if args.op else OPS):
        rows = contract_rows(op, sizes)
        if args.markdown:
            print(*([""] if i else []), f"### `{op}`", "", *markdown_table(rows), sep="\n")
        else:
            print(*([""] if i else []), op, *text_table(rows), sep="\n")
        if case is not None:
            print("", memory_line(dataclasses.replace(case, op=op)), sep="\n")
    if not args.markdown:
        print(f"\n{DTYPE_NOTE}")
    if sizes is not None and "T" not in sizes:
        print(f"\nMB, max_pos, N and T depend on the case's sequence lengths: add {SEQ_LEN}=N to size them "
              f"(and plan the memory) for sequences of N tokens (one chunk)")
    return EXIT_OK


def spec_tables(args) -> int:
    """``harness ops CASEFILE`` or ``harness ops --spec MODULE [--params K=V ...]``: the table of
    each spec op the cases run (docs/specs.md), one per distinct ``params``, shapes in numbers,
    with its memory plan and its INTERMEDIATES.  The module is read as a run reads it
    (``harness.worker.spec_check``): the front end imports no torch."""
    from pathlib import Path

    from harness.casefiles import load_paths
    from harness.run.options import kernel_paths

    if args.geometry:
        raise UsageError("--geometry: a spec op's shapes come from its params, not a geometry")
    paths = kernel_paths(getattr(args, "kernel_path", None) or ())
    if getattr(args, "spec", None) is not None:
        cases = _flag_cases(args, paths)       # always a spec op's
    elif not Path(args.op).is_file():
        raise UsageError(f"harness ops: {args.op}: no such case file")
    else:
        cases = load_paths([args.op], kernel_paths=paths)
    seen: dict[str, Case] = {}
    for case in cases:
        if case.spec is not None:
            params = ", ".join(f"{k}={v!r}" for k, v in case.spec["params"].items())
            seen.setdefault(f"{case.op} ({case.spec['module']}{f'; {params}' if params else ''})", case)
    if not seen:
        raise UsageError(f"harness ops: {args.op} holds no spec case (a builtin op's table: harness ops OP)")
    for i, (title, case) in enumerate(seen.items()):
        rows = contract_rows(case.op_spec, None, spec_layouts(case.spec["args"]))
        if args.markdown:
            print(*([""] if i else []), f"### `{case.op}`", "", title, "", *markdown_table(rows), sep="\n")
        else:
            print(*([""] if i else []), title, *text_table(rows), sep="\n")
        declared = case.spec.get("intermediates") or ()
        if declared:
            print("", "intermediates, in dataflow order: " + ", ".join(
                f"{name} (consumes {', '.join(up) or 'the inputs only'})" for name, up in declared), sep="\n")
        print("", memory_line(case), sep="\n")
    return EXIT_OK


def _flag_cases(args, paths) -> list[Case]:
    """The cases of ``--spec MODULE --golden NAME --params K=V ...`` as a case file holding them
    would give: each flag's values are checked as that file's keys are, and a bad one is named
    by its flag.  No kernel runs, so the kernel key is a placeholder never imported."""
    from harness.casefiles.loader import MAX_CASES
    from harness.casefiles.located import Node, Where, load, wrap
    from harness.casefiles.specfile import load_spec_matrix
    from harness.casefiles.values import CaseFileError

    # each value read as a case file's is (depth, integer size and tags refused, one line each)
    params: dict[str, Node] = {}
    for item in args.params:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--params {item}: expected NAME=VALUE (e.g. --params rows=4; a list rows=[2,4] "
                             f"gives a table per value)")
        if key in params:
            raise UsageError(f"--params {item}: {key} is given twice")
        value = load(text, f"--params {key}", CaseFileError)
        if value is None:
            raise UsageError(f"--params {item}: no value after '='")
        params[key] = value
    top = {"name": "spec", "spec": wrap(args.spec, Where("--spec"), CaseFileError),
           "kernel": wrap(f"{args.spec}:build_tensor_specs", Where("--spec"), CaseFileError)}
    if args.golden is not None:
        top["golden"] = wrap(args.golden, Where("--golden"), CaseFileError)
    if params:
        top["params"] = Node("map", params, Where("--params"), {k: Where("--params", field=k) for k in params})
    root = wrap(top, Where("harness ops"), CaseFileError)
    return load_spec_matrix(root, "--spec", MAX_CASES, tuple(paths))


def parse_geometry(text: str) -> dict[str, int]:
    """``PRESET[,field=value...][,seq_len=N]`` → the shape sizes a case of that geometry gets (``Case.sizes``)."""
    geo, seq_len = _geometry(text)
    if seq_len is None:
        return shape_sizes(geo, num_pages=geo.num_pages)
    return _sized_case(geo, seq_len).sizes(rows=geo.batch * seq_len)


def memory_line(case: Case) -> str:
    """The case's memory plan in one line (docs/cases.md, "Memory plan")."""
    p = plan(case)
    return (f"memory plan: {human_bytes(p.device_bytes('cpu'))} on cpu; on an accelerator "
            f"{human_bytes(p.device_bytes('cuda'))} on the device and {human_bytes(p.host_bytes('cuda'))} on the host "
            f"(caches {human_bytes(p.caches)}, inputs {human_bytes(p.inputs)}, "
            f"golden {human_bytes(p.golden + p.golden_working)})")


def _sized_case(geo: Geometry, seq_len: int | None) -> Case | None:
    """A case whose every sequence is seq_len tokens, prefilled in one chunk; None without seq_len."""
    if seq_len is None:
        return None
    return Case(case_id="", matrix="", source="", op="", kernel="", geometry=geo,
                seq_lens=SeqLens("const", (int(seq_len),)), slot_mode=SlotMode("arange"), seed=0)


def _geometry(text: str) -> tuple[Geometry, int | None]:
    name, *overrides = [part.strip() for part in text.split(",")]
    if name not in PRESETS:
        raise UsageError(f"--geometry: unknown geometry '{name}'{did_you_mean(name, PRESETS)} "
                         f"(presets: {', '.join(PRESETS)})")
    fields = {f.name: f.type for f in dataclasses.fields(Geometry)}
    values: dict[str, float | int] = {}
    for part in overrides:
        key, sep, raw = part.partition("=")
        valid = (*GEOMETRY_FIELDS, SEQ_LEN)
        if not sep or key not in valid:
            raise UsageError(f"--geometry: '{part}' is not FIELD=VALUE with a field of {', '.join(valid)}"
                             f"{did_you_mean(key, valid)}")
        number = float if fields.get(key) == "float" else int
        try:
            values[key] = number(raw)
        except ValueError:
            raise UsageError(f"--geometry: {key} takes {'a number' if number is float else 'a whole number'}, "
                             f"got {raw!r}") from None
        if values[key] <= 0:
            raise UsageError(f"--geometry: {key} must be positive, got {raw}")
    seq_len = values.pop(SEQ_LEN, None)
    return dataclasses.replace(PRESETS[name], **values), None if seq_len is None else int(seq_len)
