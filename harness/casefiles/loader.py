"""The one way in for case files: read a file, hand it to the loader of its kind, check the load.

A file's top level says its kind, and ``LOADERS`` holds each kind's loader, asked in order
(the first that claims a file loads it): command files (``command``, ``cwd`` or ``pass``;
``commandfile``), spec files (``spec``; ``specfile``), kernel matrices (``op``; ``matrix``,
which also takes whatever the others leave and refuses it with a located error).  What
every load shares is here: the file read safely (a regular file, at most
``MAX_CASE_FILE_BYTES``), directories walked, the ``--max-cases`` cap across files, the
same id in two files refused, and the spec files' modules checked in one interpreter.
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

from harness.case import Case
from harness.casefiles import specfile
from harness.casefiles.commandfile import is_command_file, load_command_matrix
from harness.casefiles.located import Node, load
from harness.casefiles.matrix import load_kernel_matrix
from harness.casefiles.values import CaseFileError
from harness.path_kinds import link_loop, mode_kind, special_kind

__all__ = ["LOADERS", "MAX_CASE_FILE_BYTES", "MAX_CASES", "CaseFileKind", "load_matrix", "load_paths"]

# A matrix is counted (the product of its axes, plus its includes) before it is expanded, against
# what is left of the cap after the files before it: a typo (an axis of 10^4 values times another) is
# refused in a second instead of filling memory.  Under the cap a matrix is built whole (each case is
# validated as a whole), about 0.1 ms of CPU and 2.5 KB per case (docs/cases.md), so the default keeps
# that near 10 s and 250 MB at worst; --max-cases raises it.
MAX_CASES = 100_000
# A case file is read whole, and no real one is near this (the shipped ones are a few KiB): a
# file that names /dev/zero through a symlink, or a generated monster, stops here (docs/cases.md).
MAX_CASE_FILE_BYTES = 4 << 20


class CaseFileKind(NamedTuple):
    """One kind of case file: whether a file's top level is of it, and its loader."""

    name: str
    claims: Callable[[Node], bool]      # the file's top level is of this kind
    load: Callable[[Node, str, int, tuple[str, ...]], list[Case]]   # (root, path, max_cases, kernel_paths)


LOADERS: tuple[CaseFileKind, ...] = (
    CaseFileKind("command", is_command_file,
                 lambda root, path, max_cases, kernel_paths: load_command_matrix(root, path, max_cases)),
    CaseFileKind("spec", specfile.is_spec_file, specfile.load_spec_matrix),
    # last: every file the others leave, which its loader refuses unless it is a kernel matrix
    CaseFileKind("kernel matrix", lambda root: True,
                 lambda root, path, max_cases, kernel_paths: load_kernel_matrix(root, path, max_cases)),
)


def load_matrix(path: "str | os.PathLike[str]", max_cases: int = MAX_CASES,
                kernel_paths: "Iterable[str]" = ()) -> list[Case]:
    """One YAML case file -> its expanded, validated cases, in file order (at most ``max_cases``).
    ``kernel_paths``: where a spec case file's module is found (``--kernel-path``; docs/specs.md)."""
    shown = os.fspath(path)
    try:
        text = _read_case_file(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaseFileError(shown, None, None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CaseFileError(shown, None, None, "", f"cannot read: {exc.strerror or exc}") from None
    root = load(text, shown, CaseFileError)
    if root is None:
        raise CaseFileError(shown, None, None, "", "empty case file (expected a mapping with at least `op`)")
    kind = next(kind for kind in LOADERS if kind.claims(root))
    return kind.load(root, shown, max_cases, tuple(kernel_paths))


def _read_case_file(path: "str | os.PathLike[str]") -> bytes:
    """The file's bytes, at most ``MAX_CASE_FILE_BYTES``.  Opened without blocking and checked to be
    a regular file before a byte is read: a FIFO swapped in after the listing neither hangs nor
    streams forever."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CaseFileError(os.fspath(path), None, None, "",
                                f"is {mode_kind(mode) or 'not a regular file'}, not a case file")
        data = f.read(MAX_CASE_FILE_BYTES + 1)
    if len(data) > MAX_CASE_FILE_BYTES:
        raise CaseFileError(os.fspath(path), None, None, "",
                            f"larger than {MAX_CASE_FILE_BYTES >> 20} MiB: not a case file (case files are read whole)")
    return data


def _case_files(path: Path) -> list[Path]:
    """Checked with ``stat`` only: a FIFO or a device (or a symlink to one) is refused by what it is,
    never opened (opening a FIFO blocks; ``/dev/zero`` never ends)."""
    if path.is_dir():
        found = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            found += [Path(dirpath) / f for f in filenames
                      if not f.startswith(".") and f.endswith((".yaml", ".yml"))]
        if not found:
            raise CaseFileError(os.fspath(path), None, None, "", "no case files (*.yaml, *.yml) in this directory")
        for f in found:
            _refuse_special(f)
        return sorted(found)
    _refuse_special(path)
    if path.is_file():
        return [path]
    raise CaseFileError(os.fspath(path), None, None, "", "no such file or directory")


def _refuse_special(path: Path) -> None:
    if link_loop(path):      # a -> b -> a: stat says ELOOP, Path.resolve raises RuntimeError
        raise CaseFileError(os.fspath(path), None, None, "", "is a symlink loop (it never reaches a file), not a case file")
    kind = special_kind(path)
    if kind:
        via = f" (a symlink to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise CaseFileError(os.fspath(path), None, None, "", f"is {kind}{via}, not a case file")


def load_paths(paths: "Iterable[str | os.PathLike[str]] | str | os.PathLike[str]",
               max_cases: int = MAX_CASES, kernel_paths: "Iterable[str]" = ()) -> list[Case]:
    """Files and directories (``*.yaml``/``*.yml``, recursively, sorted) -> all their cases, in order.

    A file reached twice is loaded once; the same case id in two files is an error; more than
    ``max_cases`` cases in all is an error.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        for f in _case_files(Path(p)):
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(f)
    with _spec_modules_checked_together(files, max_cases, tuple(kernel_paths)):
        return _load_files(files, max_cases, tuple(kernel_paths))


@contextlib.contextmanager
def _spec_modules_checked_together(files: list[Path], max_cases: int, kernel_paths: tuple[str, ...]) -> Iterator[None]:
    """Within the block, the modules of the spec files among ``files`` are checked already, by one
    interpreter for every request the cache lacks: a first pass loads each spec file until its
    request is known (``specfile.collecting``), the real load then reads the answers."""
    with specfile.collecting() as collected:
        for f in files:
            if not specfile.may_be_spec_file(f):
                continue
            try:
                load_matrix(f, max_cases, kernel_paths)
            except (specfile.Collected, CaseFileError):   # a bad file is found again, in order, by the real load
                pass
    with specfile.answered(collected):
        yield


def _load_files(files: list[Path], max_cases: int, kernel_paths: tuple[str, ...]) -> list[Case]:
    cases: list[Case] = []
    first: dict[str, Case] = {}
    for f in files:
        # counted against what is left: a file past it is refused before its matrix is built
        left = max_cases - len(cases)
        try:
            loaded = load_matrix(f, max(left, 1), kernel_paths)
        except CaseFileError as exc:
            if left < max_cases and "more than the cap of" in exc.message:
                raise CaseFileError(exc.path, exc.line, exc.column, exc.field,
                                    f"{exc.message.split(', more than the cap')[0]}, more than the {left} left of the "
                                    f"cap of {max_cases} after {len(cases)} cases of the files before it "
                                    f"(--max-cases)") from None
            raise
        if len(cases) + len(loaded) > max_cases:
            raise CaseFileError(os.fspath(f), None, None, "",
                                f"brings the cases to {len(cases) + len(loaded)}, more than the cap of {max_cases} "
                                f"(--max-cases)")
        for case in loaded:
            if case.case_id in first:
                path, _, line = case.source.rpartition(":")
                raise CaseFileError(path, int(line), None, "",
                                    f"duplicate case id '{case.case_id}' (also defined at {first[case.case_id].source}; "
                                    f"set `name:` to tell the files apart)")
            first[case.case_id] = case
            cases.append(case)
    return cases
