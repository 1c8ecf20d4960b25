"""The golden cache: computed goldens kept on disk, keyed by what determines them.

A key is the sha256 of the canonical JSON of ``{op, golden: source_hash(op),
spec, dtype}``, plus ``device`` (the device kind, ``cuda`` or ``npu``) for a golden
computed on an accelerator (``--golden-device``); ``spec`` is ``CaseInputs.spec``
(the canonical input description: geometry, modes, seed and a hash of the input
generator).  So a change to the inputs, the generator or the golden's source is a
new key, and old entries are simply never read again.  A host golden's key has no
``device`` entry (it is what it was before accelerator goldens existed); an
accelerator sums in another order than the host, so its goldens are kept apart.

One safetensors file per key, ``<root>/<op>/<key>.safetensors``, written to a
temp file in the same folder and moved into place with ``os.replace``: readers
in other worker processes see the whole file or none.  A file that cannot be
read, or does not hold what the key promises (names, dtype, the key itself
and a sha256 of the payload are checked), is a miss: the golden is
recomputed and the file overwritten.  Failing to write is not an error either
(the computed goldens are still returned); it is logged.

A small in-memory LRU in front of the disk serves repeated identical cases in
one process.  Every caller gets its own copy of the tensors, so writing
to a result never changes what the cache serves next.

In a run the cache has one writer: the golden process (``harness.worker.golden_serve``),
which never imports code under test.  It calls ``ensure`` (the file of a key, checked or
computed and written, with its pid in the metadata) and hands the path on; the device
worker only ``read``s that file, checking its key and digest, and never writes.
``get_or_compute`` is the in-process path (a benchmark's loop, and a device worker whose
golden process could not start, which computes without storing).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import struct
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from harness import goldens, packs
from harness.files import atomic_path

log = logging.getLogger(__name__)

MEMORY_ENTRIES = 4
_SUFFIX = ".safetensors"
_INTERMEDIATES_SUFFIX = ".intermediates.safetensors"
_DIGEST_PREFIX = "digest:"


class GoldenCache:
    """Goldens by key, from memory, then disk, else computed.  ``root=None`` disables caching."""

    def __init__(self, root: Path | str | None, memory_entries: int = MEMORY_ENTRIES):
        self.root = Path(root) if root is not None else None
        self.memory_entries = memory_entries
        self._memory: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()
        self.hits = 0            # served from memory or disk
        self.memory_hits = 0     # of which from memory
        self.computed = 0        # computed by the golden
        self.unreadable = 0      # files found but not usable (corrupt, wrong content): recomputed
        self.write_errors = 0    # results that could not be stored
        self._checked: dict[str, tuple[int, int, int]] = {}   # key -> (inode, size, mtime_ns) of a file read whole
        self.last_intermediates: dict[str, torch.Tensor] = {}   # what the last get_or_compute recorded

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def key(self, op: "str | Golden", spec: Mapping[str, Any], dtype: torch.dtype = torch.float32, device: str = "cpu") -> str:
        """``device``: the kind of device the golden is computed on (``cpu``, ``cuda``, ``npu``).
        ``op``: a builtin op's name, or a ``Golden`` (a spec op's: its module's source in its hash)."""
        g = golden_of(op)
        document = {"op": g.op, "golden": g.source_hash(), "spec": spec, "dtype": _dtype_name(dtype)}
        if device != "cpu":     # host keys stay as they were, so existing caches stay valid
            document["device"] = device
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_not_json)
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, op: "str | Golden", key: str) -> Path:
        if self.root is None:
            raise ValueError("the golden cache is disabled (root=None): it has no files")
        return self.root / golden_of(op).op / (key + _SUFFIX)

    def get_or_compute(self, op: str, spec: Mapping[str, Any], inputs: Mapping[str, Any],
                       dtype: torch.dtype = torch.float32) -> tuple[dict[str, torch.Tensor], bool]:
        """``(goldens, hit)``: the cached goldens of this case, or freshly computed and stored."""
        self.last_intermediates = {}
        if not self.enabled:
            self.computed += 1
            self.last_intermediates = {}
            return golden_of(op).compute(inputs, dtype, intermediates=self.last_intermediates), False
        key = self.key(op, spec, dtype)
        cached = self._from_memory(key)
        if cached is not None:
            self.hits += 1
            self.memory_hits += 1
            return _copy(cached), True
        cached = self._from_disk(op, key, dtype)
        if cached is not None and self._intermediates_ok(op, key):
            self.hits += 1
            self._remember(key, cached)
            return _copy(cached), True
        self.last_intermediates = {}
        result = golden_of(op).compute(inputs, dtype, intermediates=self.last_intermediates)
        self.computed += 1
        if self._store(op, key, dtype, result):
            self._store_intermediates(op, key, dtype, self.last_intermediates)
        self._remember(key, _copy(result))
        return result, False

    def ensure(self, op: str, spec: Mapping[str, Any], make_inputs: Callable[[], Mapping[str, Any]],
               dtype: torch.dtype = torch.float32, device: str = "cpu") -> tuple[Path, str, bool]:
        """``(path, key, hit)``: the file holding this case's goldens, checked, or computed from
        ``make_inputs()`` (on the device of kind ``device`` they are on) and written.  Raises
        ``GoldenStoreError`` when it cannot be written (the file is how the goldens reach the
        device worker)."""
        key = self.key(op, spec, dtype, device)
        path = self.path(op, key)
        seen = self._checked.get(key)
        if seen is not None and seen == _identity(path):    # read whole once; unchanged since
            self.hits += 1
            return path, key, True
        if self._from_disk(op, key, dtype) is not None and self._intermediates_ok(op, key):
            self.hits += 1
            self._checked[key] = _identity(path)
            return path, key, True
        recorded: dict[str, torch.Tensor] = {}
        result = golden_of(op).compute(make_inputs(), dtype, intermediates=recorded)
        self.computed += 1
        # the intermediates first: a reader that finds the outputs' file finds its sibling too
        if not (self._store_intermediates(op, key, dtype, recorded) and self._store(op, key, dtype, result)):
            raise GoldenStoreError(f"golden cache: could not write {path} (see the log above)")
        self._checked[key] = _identity(path)
        return path, key, False

    def read(self, op: str, spec: Mapping[str, Any], path: Path | str,
             dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict[str, torch.Tensor]:
        """The goldens in ``path``, which must hold this case's key (``ensure``'s file, its goldens
        computed on a ``device`` kind): never writes."""
        key = self.key(op, spec, dtype, device)
        cached = self._from_memory(key)
        if cached is None:
            cached = self._load(Path(path), op, key, dtype)
            if cached is None:
                raise GoldenStoreError(f"golden cache: {path} does not hold the goldens of this case ({op}, key {key})")
            self._remember(key, cached)
        return _copy(cached)

    # -- intermediates (docs/intermediates.md) ----------------------------------------------
    # Recorded by the same ``goldens.compute`` call as the outputs, kept beside their file under
    # the same key (``<key>.intermediates.safetensors``), each tensor with its own digest so a
    # reader takes one at a time (a 40-layer case's are never all in memory at once).

    def intermediates_path(self, op: str, key: str) -> Path:
        return self.path(op, key).with_name(key + _INTERMEDIATES_SUFFIX)

    def intermediates(self, op: str, spec: Mapping[str, Any], path: Path | str | None,
                      dtype: torch.dtype = torch.float32, device: str = "cpu") -> "IntermediateGoldens":
        """The golden intermediates of this case: beside ``path`` (``ensure``'s file, read one at a
        time), or with ``path`` None those the last ``get_or_compute`` computed or found."""
        key = self.key(op, spec, dtype, device)
        if path is None:
            if self.enabled and not self.last_intermediates:
                return IntermediateGoldens.from_file(self.intermediates_path(op, key), key)
            return IntermediateGoldens(dict(self.last_intermediates))
        return IntermediateGoldens.from_file(Path(path).with_name(key + _INTERMEDIATES_SUFFIX), key)

    def _intermediates_ok(self, op: str, key: str) -> bool:
        try:
            f = _TensorFile(self.intermediates_path(op, key))
        except (OSError, ValueError):
            return False
        try:
            return f.metadata.get("key") == key
        finally:
            f.close()

    def _store_intermediates(self, op: str, key: str, dtype: torch.dtype,
                             recorded: Mapping[str, torch.Tensor]) -> bool:
        path = self.intermediates_path(op, key)
        tensors = {name: t.detach().contiguous() for name, t in recorded.items()}
        metadata = {"op": golden_of(op).op, "key": key, "dtype": _dtype_name(dtype),
                    "writer_pid": str(os.getpid()),      # as the goldens' file: only the golden process writes
                    **{_DIGEST_PREFIX + name: _digest({name: t}) for name, t in tensors.items()}}
        try:
            with atomic_path(path) as tmp:
                save_file(tensors, str(tmp), metadata=metadata)
        except (OSError, SafetensorError) as exc:
            self.write_errors += 1
            log.warning("golden cache: could not store %s (%s)", path, exc)
            return False
        return True

    # -- memory ----------------------------------------------------------------------------
    def _from_memory(self, key: str) -> dict[str, torch.Tensor] | None:
        if key not in self._memory:
            return None
        self._memory.move_to_end(key)
        return self._memory[key]

    def _remember(self, key: str, result: dict[str, torch.Tensor]) -> None:
        if self.memory_entries <= 0:
            return
        self._memory[key] = result
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_entries:
            self._memory.popitem(last=False)

    # -- disk ------------------------------------------------------------------------------
    def _from_disk(self, op: str, key: str, dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
        return self._load(self.path(op, key), op, key, dtype)

    def _load(self, path: Path, op: str, key: str, dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
        if not path.exists():
            return None
        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except (OSError, SafetensorError) as exc:
            return self._unusable(path, f"{type(exc).__name__}: {exc}")
        g = golden_of(op)
        if set(tensors) != set(g.names()):
            return self._unusable(path, f"holds {sorted(tensors)}, not the outputs of {g.op}")
        if any(t.dtype != g.dtype(name, dtype) for name, t in tensors.items()):
            return self._unusable(path, f"holds tensors that are not the golden's dtypes ({dtype} for a builtin op)")
        if metadata.get("key") != key or metadata.get("digest") != _digest(tensors):
            return self._unusable(path, "its key or content digest does not match")
        return tensors

    def _unusable(self, path: Path, why: str) -> None:
        log.warning("golden cache: %s is unusable (%s); recomputing", path, why)
        self.unreadable += 1
        return None

    def _store(self, op: str, key: str, dtype: torch.dtype, result: Mapping[str, torch.Tensor]) -> bool:
        path = self.path(op, key)
        tensors = {name: t.detach().contiguous().clone() for name, t in result.items()}
        metadata = {"op": golden_of(op).op, "key": key, "dtype": _dtype_name(dtype), "digest": _digest(tensors),
                    "writer_pid": str(os.getpid()), **golden_of(op).metadata()}      # which process wrote it (only the golden process should)
        try:
            with atomic_path(path) as tmp:
                save_file(tensors, str(tmp), metadata=metadata)
        except (OSError, SafetensorError) as exc:     # a full or read-only disk: keep going uncached
            self.write_errors += 1
            log.warning("golden cache: could not store %s (%s)", path, exc)
            return False
        return True


class IntermediateGoldens:
    """A case's golden intermediates by name: ``get(name)`` is the golden and, where the rounding
    of q/k/v before attention changes it, its ``@exact`` twin (else None); None when the name
    has no golden.  From a file, each tensor is read (and its digest checked) when asked for."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], path: Path | None = None, key: str = ""):
        self._tensors = dict(tensors)
        self.path, self._key = path, key
        self.problem = ""          # why the file could not be used ("" when it could)
        self._file: _TensorFile | None = None
        self._names: set[str] = set()
        self._metadata: dict[str, str] = {}

    @classmethod
    def from_file(cls, path: Path, key: str) -> "IntermediateGoldens":
        made = cls({}, path, key)
        try:
            # kept open while the case runs (one open per launch, not one per intermediate), and
            # read with plain reads: nothing of it stays in memory but the tensor last asked for
            made._file = f = _TensorFile(path)
        except (OSError, ValueError) as exc:
            made.problem = f"{path}: {type(exc).__name__}: {exc}"
            return made
        if f.metadata.get("key") != key:
            made.problem = f"{path} does not hold this case's golden intermediates"
            f.close()
            return made
        made._names, made._metadata = set(f.names), f.metadata
        return made

    def close(self) -> None:
        """Close the file now (it is closed anyway when this object is collected)."""
        if self._file is not None:
            self._file.close()

    def names(self) -> set[str]:
        return set(self._tensors) if self.path is None else set(self._names)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of golden intermediate ``name`` without reading it (None: it has none): a
        spec op's intermediates have the shapes its golden dumped."""
        if self.path is None:
            t = self._tensors.get(name)
            return None if t is None else tuple(t.shape)
        return self._file.shape(name) if name in self._names else None

    def _read(self, name: str) -> torch.Tensor | None:
        if self.path is None:
            return self._tensors.get(name)
        if name not in self._names:
            return None
        try:
            t = self._file.get_tensor(name)
        except (OSError, ValueError) as exc:
            raise GoldenStoreError(f"golden cache: {self.path}: intermediate {name} could not be read "
                                   f"({type(exc).__name__}: {exc})") from exc
        if self._metadata.get(_DIGEST_PREFIX + name) != _digest({name: t}):
            raise GoldenStoreError(f"golden cache: {self.path}: intermediate {name} does not match its digest")
        return t

    def get(self, name: str) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        golden = self._read(name)
        if golden is None:
            return None
        return golden, self._read(name + goldens.EXACT_SUFFIX)


# safetensors' dtype names (https://github.com/huggingface/safetensors, the file format)
_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


class _TensorFile:
    """A safetensors file read with plain reads: its header parsed once, each tensor read on
    request (``readinto`` straight into a new tensor's buffer).

    Not ``safe_open``: it maps the file, and every page a read touched stays resident, counted
    in the process's RSS, until the mapping closes; kept open for a launch, a 40-layer case's
    golden intermediates all ended up resident (bench/bench_intermediates_rss.py).  Bad headers,
    offsets outside the file and truncated payloads raise ``ValueError``; the caller decides.
    """

    def __init__(self, path: Path | str):
        self._file = open(path, "rb", buffering=0)
        self._closer = weakref.finalize(self, self._file.close)   # closes once: by close(), or when collected
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._closer()

    def _parse(self) -> None:
        head = self._read_exactly(0, 8)
        (size,) = struct.unpack("<Q", head)
        total = os.fstat(self._file.fileno()).st_size
        if size > total - 8:
            raise ValueError(f"header of {size} bytes in a file of {total}")
        try:
            header = json.loads(self._read_exactly(8, size))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"header is not JSON ({exc})") from None
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        self.metadata: dict[str, str] = metadata if isinstance(metadata, dict) else {}
        self._start, self._entries = 8 + size, {}
        for name, entry in header.items():
            try:
                dtype, shape = _SAFETENSORS_DTYPES[entry["dtype"]], tuple(int(n) for n in entry["shape"])
                begin, end = (int(n) for n in entry["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"tensor {name!r}: not a known dtype, shape and offsets: {entry!r}") from None
            nbytes = math.prod(shape) * dtype.itemsize
            if min(shape, default=0) < 0 or begin < 0 or end - begin != nbytes or self._start + end > total:
                raise ValueError(f"tensor {name!r}: offsets {begin}..{end} do not hold {entry['dtype']} {list(shape)} "
                                 f"in a file of {total} bytes")
            self._entries[name] = (dtype, shape, self._start + begin)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def get_tensor(self, name: str) -> torch.Tensor:
        dtype, shape, offset = self._entries[name]
        t = torch.empty(shape, dtype=dtype)
        if t.numel():
            self._read_into(offset, memoryview(t.reshape(-1).view(torch.uint8).numpy()))
        return t

    def _read_exactly(self, offset: int, n: int) -> bytes:
        buf = bytearray(n)
        self._read_into(offset, memoryview(buf))
        return bytes(buf)

    def _read_into(self, offset: int, buf: memoryview) -> None:
        self._file.seek(offset)
        done = 0
        while done < len(buf):
            got = self._file.readinto(buf[done:])
            if not got:
                raise ValueError(f"file ends {len(buf) - done} bytes short of a read at offset {offset}")
            done += got


class GoldenStoreError(RuntimeError):
    """A golden cache file that could not be written, or that does not hold what the reader expects."""


class Golden:
    """What the cache needs of a golden: the folder it keeps files in (``op``), the hash of its
    source (part of every key), the names and dtypes of what it returns, and ``compute``.
    ``BuiltinGolden`` is a builtin op's (``harness.goldens``); a spec op's is
    ``harness.worker.spec_golden.SpecGolden`` (its module's source hash, its outputs in their own dtypes)."""

    op: str

    def source_hash(self) -> str:
        raise NotImplementedError

    def names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def dtype(self, name: str, golden_dtype: torch.dtype) -> torch.dtype:
        """The dtype the file holds ``name`` in (a builtin golden: the golden dtype)."""
        return golden_dtype

    def compute(self, inputs: Mapping[str, Any], dtype: torch.dtype,
                intermediates: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def metadata(self) -> dict[str, str]:
        """Extra text the goldens' file records beside the key (a spec golden: its inputs' digest)."""
        return {}


class BuiltinGolden(Golden):
    """An op's golden as its pack declares it (``OpEntry.golden``), with its ``@exact`` twins.
    ``harness.goldens`` (goldens/) runs it: the shipped packs keep their goldens there, a user's pack
    anywhere on the path (its module taken into the table ``harness.goldens`` starts with, where
    every op is ``harness.goldens.<op>``)."""

    def __init__(self, op: str) -> None:
        self.op = op
        module = packs.entry(op).golden
        if goldens._MODULES.get(op) != module:
            goldens._MODULES[op] = module
        self._own = module == f"harness.goldens.{op}"

    def source_hash(self) -> str:
        if self._own:
            return goldens.source_hash(self.op)
        return _module_hash(goldens._MODULES[self.op])

    def names(self) -> tuple[str, ...]:
        return goldens.golden_names(self.op)

    def compute(self, inputs, dtype, intermediates=None):
        return goldens.compute(self.op, inputs, dtype, exact=True, intermediates=intermediates)


@lru_cache(maxsize=None)
def _module_hash(module: str) -> str:
    """sha256 (16 hex) of a pack's golden module's source, read once per process (what it loaded)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise KeyError(f"golden module {module} is not on the path")
    return hashlib.sha256(module.encode() + b"\0" + Path(spec.origin).read_bytes()).hexdigest()[:16]


def golden_of(op: "str | Golden") -> Golden:
    return BuiltinGolden(op) if isinstance(op, str) else op


def file_metadata(path: Path | str) -> dict[str, str]:
    """The text metadata of a goldens' file (``{}`` when it cannot be read)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except (OSError, SafetensorError):
        return {}


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _copy(result: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in result.items()}


def _digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 of names, dtypes, shapes and bytes: a file whose payload was damaged is a miss."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(f"{name}:{_dtype_name(t.dtype)}:{tuple(t.shape)}\0".encode())
        digest.update(t.view(torch.uint8).numpy() if t.numel() else b"")    # its buffer: no copy
    return digest.hexdigest()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _not_json(value: Any) -> Any:
    raise TypeError(f"golden cache spec holds {type(value).__name__} {value!r}, which has no canonical JSON form")
