"""The ``HARNESS_DUMP_DIR`` formats: one file per intermediate, read one at a time.

- ``<name>.pt``: a tensor saved with ``torch.save`` (read with ``weights_only=True``);
- ``<name>.npy``: a NumPy array (``numpy.save``; no pickles; NumPy has no bf16: save bf16 as fp32);
- ``<name>.bin`` + ``<name>.json``: raw little-endian bytes, row-major, and a manifest
  ``{"dtype": "bfloat16" | "float16" | "float32" | "float64", "shape": [...]}``.

``<name>`` is the intermediate's name (``k_rope``, ``layers.3.attn``).  A file that cannot be
read, a manifest without its ``.bin`` (or the reverse), an unknown suffix, or a file far larger
than its intermediate (checked before reading it) is a ``Problem`` naming the file; the caller
turns it into a finding.  Nothing here raises on bad files.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

ENV_VAR = "HARNESS_DUMP_DIR"
SUFFIXES = (".pt", ".npy", ".bin")
# Beside the dumps, optionally: which case and inputs made them ({"case_id", "inputs_digest"}: a
# run's result carries both), so ``harness dumps`` can tell another case's dumps from this one's.
PROVENANCE = "harness-case.json"
MANIFEST = ".json"
BIN_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
              "float64": torch.float64}
# a file may hold its intermediate in fp64 plus this much framing (headers, pickling)
_FRAMING = 64 << 10


@dataclass(frozen=True)
class Problem:
    file: str
    message: str

    def line(self) -> str:
        return f"dump file {self.file}: {self.message}"


def entries(folder: Path) -> tuple[dict[str, Path], list[Problem]]:
    """``{name: file}`` of the dumps in ``folder`` (the ``.bin`` for raw ones), and the files that are none."""
    found: dict[str, Path] = {}
    problems: list[Problem] = []
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    for fname in names:
        path = folder / fname
        if fname == PROVENANCE:
            continue
        stem, suffix = os.path.splitext(fname)
        if suffix == MANIFEST:
            if stem + ".bin" not in names:
                problems.append(Problem(fname, "a manifest without its .bin"))
            continue
        if suffix not in SUFFIXES or not path.is_file():
            problems.append(Problem(fname, f"not a dump (expected <name>{', <name>'.join(SUFFIXES)})"))
            continue
        if stem in found:
            problems.append(Problem(fname, f"intermediate {stem} dumped twice ({found[stem].name} and {fname})"))
            continue
        found[stem] = path
    return found, problems


def read(path: Path, max_bytes: int) -> torch.Tensor | Problem:
    """The tensor in ``path``, or why not; ``max_bytes``: what its intermediate may take, framing aside."""
    try:
        size = path.stat().st_size
        if size > max_bytes + _FRAMING:
            return Problem(path.name, f"{size} bytes, far more than its intermediate ({max_bytes} bytes in fp64)")
        return _READERS[path.suffix](path)
    except Exception as exc:     # a corrupt file is a finding, never a crash of the caller
        return Problem(path.name, f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")


def _read_pt(path: Path) -> torch.Tensor | Problem:
    try:
        t = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        # torch's own text advises weights_only=False, which runs any code a pickle holds: never
        # repeated for a file of unknown origin; a dump is a plain tensor, which weights_only reads
        return Problem(path.name, f"unreadable ({type(exc).__name__}): not a tensor torch.load(weights_only=True) "
                                  f"reads; a .pt dump is one tensor saved with torch.save")
    if not isinstance(t, torch.Tensor):
        return Problem(path.name, f"holds a {type(t).__name__}, not a tensor")
    return t


def _read_npy(path: Path) -> torch.Tensor | Problem:
    import numpy

    return torch.from_numpy(numpy.load(path, allow_pickle=False).copy())


def _read_bin(path: Path) -> torch.Tensor | Problem:
    manifest_path = path.with_suffix(MANIFEST)
    if not manifest_path.is_file():
        return Problem(path.name, f"no manifest {manifest_path.name} (dtype and shape)")
    manifest = json.loads(manifest_path.read_text())
    dtype = BIN_DTYPES.get(manifest.get("dtype")) if isinstance(manifest, dict) else None
    shape = manifest.get("shape") if isinstance(manifest, dict) else None
    if dtype is None or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return Problem(manifest_path.name, f"expected {{\"dtype\": one of {', '.join(BIN_DTYPES)}, "
                                           f"\"shape\": [ints]}}")
    data = path.read_bytes()
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for n in shape:
        numel *= n
    if len(data) != numel * itemsize:
        return Problem(path.name, f"{len(data)} bytes, but {manifest['dtype']} {shape} takes {numel * itemsize}")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


_READERS: dict[str, Callable[[Path], torch.Tensor | Problem]] = {".pt": _read_pt, ".npy": _read_npy,
                                                                  ".bin": _read_bin}


def write(folder: Path, name: str, tensor: torch.Tensor, fmt: str = ".pt") -> Path:
    """One dump as a kernel (or a device-side tool) would write it: for tests and examples."""
    folder.mkdir(parents=True, exist_ok=True)
    t = tensor.detach().cpu().contiguous()
    if fmt == ".pt":
        torch.save(t, folder / f"{name}.pt")
    elif fmt == ".npy":
        import numpy
        numpy.save(folder / f"{name}.npy", (t.float() if t.dtype == torch.bfloat16 else t).numpy())  # numpy has no bf16
    elif fmt == ".bin":
        (folder / f"{name}.json").write_text(json.dumps({"dtype": str(t.dtype).removeprefix("torch."),
                                                         "shape": list(t.shape)}))
        (folder / f"{name}.bin").write_bytes(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    else:
        raise ValueError(f"unknown dump format {fmt!r}; expected one of {SUFFIXES}")
    return folder / f"{name}{fmt}"


def iterate(folder: Path, max_bytes: Callable[[str], int]) -> Iterator[tuple[str, torch.Tensor | Problem]]:
    """Each dump in ``folder`` as ``(name, tensor or Problem)``, read one at a time; problems of
    files that are no dump come as ``("", Problem)``.  ``max_bytes(name)``: the cap of a known name."""
    found, problems = entries(folder)
    for p in problems:
        yield "", p
    for name, path in found.items():
        yield name, read(path, max_bytes(name))
