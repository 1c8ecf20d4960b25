"""Bitwise determinism across the iterations of a fixed-seed flake hunt (runs in the device worker).

With identical inputs, a deterministic kernel writes identical bits every time.
The first iteration that passes its checks saves every output and cache (as
they were after the kernel) to a *baseline* file; every later iteration compares its
buffers with it bit for bit, and a difference is localised like a mismatch
(per batch row, head, page...) with the greatest value difference, so "bits
differ but values are close" (a reduction order that changes) and "one head is
garbage now and then" (a race) look different.

The baseline lives in a file the front end names (one per case, seed and
device), so a worker replaced after a fault, or a second worker, picks it up;
a bounded copy kept on the buffers' device saves re-reading it on the next
iteration.  The comparison and the digests run on that device: a flake hunt of a
case with a 10 GB cache copies it to the host once, to write the baseline file,
not once per iteration.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import load_file, save_file

from harness.worker.input_digest import fold
from harness.worker.input_guard import bits, first_set
from harness.worker.ratio_allclose import summarise_localisation
from harness.ops import OpSpec

# Cache dims: the paged layout [N, P, Hkv, D].
CACHE_AXES = ("page", "offset", "head", None)
_MEMORY_BYTES = 512 * 2 ** 20


def digest(t: torch.Tensor) -> str:
    """16 hex digits fingerprinting ``t``'s bytes, summed where ``t`` lives (``input_digest.fold``):
    the same on every device.  It groups an iteration's buffers into variants; whether they are
    identical to the baseline is decided bit for bit, not by the digest."""
    h = hashlib.blake2b(digest_size=8)
    fold(h, t)
    return h.hexdigest()


def bit_diff(name: str, actual: torch.Tensor, baseline: torch.Tensor, axes: Sequence[str | None]) -> dict | None:
    """None when bit-identical; else counts, the first differing index, the greatest value
    difference and the share of differing elements per named axis."""
    if actual.shape != baseline.shape or actual.dtype != baseline.dtype:
        return {"name": name, "count": actual.numel(), "numel": actual.numel(),
                "shape_changed": f"{tuple(baseline.shape)} {baseline.dtype} -> {tuple(actual.shape)} {actual.dtype}"}
    if torch.equal(bits(actual.contiguous()), bits(baseline.contiguous())):   # no mask for the usual case
        return None
    differ = bits(actual.contiguous()) != bits(baseline.contiguous())
    count = int(differ.sum())
    first = first_set(differ)
    max_abs = None
    if actual.is_floating_point():
        a, b = actual[differ].double(), baseline[differ].double()
        finite = torch.isfinite(a) & torch.isfinite(b)
        if bool(finite.any()):
            max_abs = float((a[finite] - b[finite]).abs().max())
    localisation = {}
    for dim, axis in enumerate(axes):
        if axis is None or dim >= differ.dim() or differ.shape[dim] <= 1:
            continue
        other = [d for d in range(differ.dim()) if d != dim]
        per_index = differ.sum(dim=other) if other else differ.long()
        localisation[axis] = (per_index.double() / (differ.numel() // differ.shape[dim])).tolist()
    return {"name": name, "count": count, "numel": differ.numel(), "first": list(first),
            "max_abs_diff": max_abs, "localisation": localisation}


def render(diffs: list[dict], baseline_repeat: int | None) -> str:
    """The fixed-format determinism report: one block per buffer whose bits differ."""
    against = f"iteration {baseline_repeat}" if baseline_repeat is not None else "the baseline"
    lines = []
    for d in diffs:
        if "shape_changed" in d:
            lines.append(f"{d['name']}: shape/dtype changed from {against}: {d['shape_changed']}")
            continue
        pct = 100.0 * d["count"] / d["numel"]
        values = ("values not comparable (non-finite)" if d["max_abs_diff"] is None
                  else f"greatest value difference {d['max_abs_diff']:.6g}")
        lines.append(f"{d['name']}: {d['count']} / {d['numel']} elements ({pct:.3g}%) differ bitwise from "
                     f"{against}; first at index {tuple(d['first'])}; {values}")
        for axis, ratios in d["localisation"].items():
            lines.append(f"  {summarise_localisation(axis, ratios)}")
    return "\n".join(lines)


class Baselines:
    """Baseline buffers by file path: memory first (bounded), then the file."""

    def __init__(self, memory_bytes: int = _MEMORY_BYTES):
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[str, tuple[dict[str, torch.Tensor], int | None]] = OrderedDict()
        self._digests: dict[tuple[str, str], str] = {}

    def digest(self, path: str, name: str) -> str:
        """The digest of buffer ``name`` of the baseline at ``path`` (kept in memory), computed once:
        an iteration identical to the baseline has it without summing its own bytes."""
        if (path, name) not in self._digests:
            self._digests[(path, name)] = digest(self._memory[path][0][name])
        return self._digests[(path, name)]

    def _remember(self, path: str, tensors: dict[str, torch.Tensor], repeat: int | None) -> None:
        self._digests = {k: v for k, v in self._digests.items() if k[0] != path}   # a new copy: digest it anew
        self._memory[path] = (tensors, repeat)
        self._memory.move_to_end(path)
        while len(self._memory) > 1 and sum(
                t.numel() * t.element_size() for ts, _ in self._memory.values() for t in ts.values()
        ) > self.memory_bytes:
            self._memory.popitem(last=False)

    def get(self, path: str, device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], int | None] | None:
        """The baseline at ``path`` on ``device`` (read from the file once, then kept there)."""
        if path in self._memory:
            self._memory.move_to_end(path)
            tensors, repeat = self._memory[path]
            if all(t.device == torch.device(device) for t in tensors.values()):
                return tensors, repeat
            self._remember(path, {k: t.to(device) for k, t in tensors.items()}, repeat)
            return self._memory[path]
        if not os.path.exists(path):
            return None
        try:
            from safetensors import safe_open
            with safe_open(path, "pt") as fh:
                meta = fh.metadata() or {}
            tensors = load_file(path)
        except Exception:   # a torn or foreign file: start a new baseline
            return None
        repeat = int(meta["repeat"]) if meta.get("repeat", "").isdigit() else None
        tensors = {k: t.to(device) for k, t in tensors.items()}
        self._remember(path, tensors, repeat)
        return tensors, repeat

    def save(self, path: str, tensors: dict[str, torch.Tensor], repeat: int) -> None:
        """Atomically; if another process got there first, its file stands.  The copy kept in
        memory stays on the tensors' device; the file is written from host copies."""
        tensors = {k: v.detach().clone().contiguous() for k, v in tensors.items()}   # own memory: safetensors refuses shared storage
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        os.close(fd)
        try:
            save_file({k: v.cpu() for k, v in tensors.items()}, tmp, metadata={"repeat": str(repeat)})
            os.link(tmp, path)           # fails if the file exists: first writer wins
        except FileExistsError:
            return                       # the other writer's file is the baseline; get() reads it
        finally:
            os.unlink(tmp)
        self._remember(path, tensors, repeat)


def diff_against_baseline(baselines: Baselines, path: str, op: OpSpec, outputs: dict[str, torch.Tensor],
          caches: dict[str, torch.Tensor], repeat: int, passed: bool = True) -> dict[str, Any]:
    """Compare this iteration's buffers with the baseline at ``path``.

    The baseline is the first iteration that *passed* its checks (``passed``): a torn
    first run must not make every clean one look different.  Until there is one, an
    iteration is not compared (``identical`` None) but still leaves its ``digests``, so a
    hunt whose every iteration fails can still say whether the bits varied.

    Returns the ``determinism`` metrics: ``baseline`` (True when this iteration became the
    baseline), ``baseline_repeat``, ``identical``, ``digests`` per buffer, ``differs`` (the
    per-buffer diffs) and ``report``.
    """
    buffers = {**outputs, **caches}
    axes = {a.name: a.axes for a in op.outputs}
    axes.update({a.name: CACHE_AXES for a in op.caches})
    device = next(iter(buffers.values())).device
    found = baselines.get(path, device)
    if found is None and not passed:
        return {"baseline": False, "baseline_repeat": None, "identical": None,
                "digests": {name: digest(t) for name, t in buffers.items()}, "differs": [], "report": ""}
    if found is None:
        baselines.save(path, buffers, repeat)
        found = baselines.get(path, device)
        if found is None:  # could not write nor read it: say so, compare nothing
            return {"baseline": False, "identical": None,
                    "digests": {name: digest(t) for name, t in buffers.items()},
                    "report": f"no baseline: could not write {path}"}
    reference, baseline_repeat = found
    diffs, digests = [], {}
    for name, tensor in buffers.items():
        if name not in reference:
            diffs.append({"name": name, "count": tensor.numel(), "numel": tensor.numel(),
                          "shape_changed": "absent from the baseline"})
            digests[name] = digest(tensor)
            continue
        d = bit_diff(name, tensor, reference[name], axes.get(name, ()))
        if d is not None:
            diffs.append(d)
        digests[name] = digest(tensor) if d is not None else baselines.digest(path, name)
    if baseline_repeat == repeat:
        return {"baseline": True, "baseline_repeat": repeat, "identical": True, "digests": digests,
                "differs": [], "report": ""}
    return {"baseline": False, "baseline_repeat": baseline_repeat, "identical": not diffs, "digests": digests,
            "differs": diffs, "report": render(diffs, baseline_repeat)}
