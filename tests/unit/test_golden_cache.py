"""The golden cache: keys, hits, misses, bad files, atomic writes."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
import torch

from harness import goldens
import harness.goldens.cache as cache_module
from harness.goldens.cache import GoldenCache
from harness.run.options import default_cache_dir
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import generate

OP = "fused_rope_decode_attention"


def case_inputs(seed: int = 1, op: str = OP):
    return generate(Case(f"{op}[seed={seed}]", "unit", "tests/unit/test_golden_cache.py", op, "reference",
                         PRESETS["tiny"], SeqLens("uniform", (1, 40)), SlotMode("arange"), seed))


def assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b) or set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


def entry_files(root: Path) -> list[Path]:
    """The outputs' files (each has its intermediates' file beside it: docs/intermediates.md)."""
    return sorted(p for p in root.rglob("*.safetensors") if not p.name.endswith(".intermediates.safetensors"))


# -- hits and misses --------------------------------------------------------------------------

def test_second_call_is_a_hit_with_identical_tensors(tmp_path, counted):
    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    first, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert not hit and cache.computed == 1 and cache.hits == 0 and len(counted) == 1
    second, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert hit and cache.computed == 1 and cache.hits == 1 and len(counted) == 1
    assert_same(first, second)
    assert_same(first, goldens.compute(OP, inputs.args, exact=True))


def test_another_process_reads_the_file_without_computing(tmp_path, counted):
    inputs = case_inputs()
    first, _ = GoldenCache(tmp_path).get_or_compute(OP, inputs.spec, inputs.args, torch.float64)
    assert len(entry_files(tmp_path)) == 1
    fresh = GoldenCache(tmp_path)                     # a new worker: empty memory, same disk
    second, hit = fresh.get_or_compute(OP, inputs.spec, inputs.args, torch.float64)
    assert hit and fresh.computed == 0 and fresh.memory_hits == 0 and len(counted) == 1
    assert_same(first, second)
    assert all(t.dtype == torch.float64 for t in second.values())


def test_memory_hit_does_not_touch_the_disk(tmp_path, counted):
    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    first, _ = cache.get_or_compute(OP, inputs.spec, inputs.args)
    for path in entry_files(tmp_path):
        path.unlink()
    second, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert hit and cache.memory_hits == 1 and len(counted) == 1
    assert_same(first, second)


def test_memory_keeps_only_the_most_recent_entries(tmp_path):
    a, b = case_inputs(1), case_inputs(2)
    cache = GoldenCache(tmp_path, memory_entries=1)
    cache.get_or_compute(OP, a.spec, a.args)
    cache.get_or_compute(OP, b.spec, b.args)
    _, hit = cache.get_or_compute(OP, a.spec, a.args)      # evicted from memory, still on disk
    assert hit and cache.memory_hits == 0 and cache.computed == 2


def test_callers_get_their_own_copies(tmp_path):
    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    first, _ = cache.get_or_compute(OP, inputs.spec, inputs.args)
    expected = {name: t.clone() for name, t in first.items()}
    first["out"].fill_(0.0)
    second, _ = cache.get_or_compute(OP, inputs.spec, inputs.args)
    second["query"].fill_(0.0)
    third, _ = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert_same(third, expected)


def test_disabled_cache_always_computes_and_writes_nothing(tmp_path, counted, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = case_inputs()
    cache = GoldenCache(None)
    assert not cache.enabled
    for _ in range(2):
        _, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
        assert not hit
    assert cache.computed == 2 and cache.hits == 0 and len(counted) == 2
    assert list(tmp_path.iterdir()) == []


def test_the_directory_is_created_lazily(tmp_path):
    root = tmp_path / "a" / "b"
    cache = GoldenCache(root)
    assert not root.exists()
    inputs = case_inputs()
    cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert len(entry_files(root)) == 1


# -- keys ----------------------------------------------------------------------------------

def test_key_depends_on_everything_that_determines_the_goldens():
    cache = GoldenCache(None)
    spec = case_inputs(1).spec
    base = cache.key(OP, spec)
    assert re.fullmatch("[0-9a-f]{64}", base), base
    assert cache.key(OP, dict(reversed(list(spec.items())))) == base       # canonical: order does not matter
    assert GoldenCache("/elsewhere").key(OP, spec) == base                 # and not the root
    variants = {
        "seed": cache.key(OP, case_inputs(2).spec),
        "spec": cache.key(OP, dict(spec, slot_mode="random")),
        "generator": cache.key(OP, dict(spec, generator="0" * 16)),
        "dtype": cache.key(OP, spec, torch.float64),
        "op": cache.key("rope_kv_write", spec),
    }
    assert len(set(variants.values()) | {base}) == len(variants) + 1, variants


def test_a_change_to_the_golden_source_is_a_new_key(tmp_path, monkeypatch, counted):
    inputs = case_inputs()
    cache = GoldenCache(tmp_path, memory_entries=0)
    old = cache.key(OP, inputs.spec)
    cache.get_or_compute(OP, inputs.spec, inputs.args)
    monkeypatch.setattr(goldens, "source_hash", lambda op: "0123456789abcdef")
    assert cache.key(OP, inputs.spec) != old
    _, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert not hit and len(counted) == 2 and len(entry_files(tmp_path)) == 2


def test_a_spec_without_a_json_form_is_refused():
    with pytest.raises(TypeError, match="canonical JSON"):
        GoldenCache(None).key(OP, {"seed": object()})


# -- bad files ---------------------------------------------------------------------------

def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garbage(path: Path) -> None:
    path.write_bytes(b"not a safetensors file at all")


def empty(path: Path) -> None:
    path.write_bytes(b"")


def flip_a_payload_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40                      # inside the last tensor's bytes; the header still parses
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncate, garbage, empty, flip_a_payload_byte])
def test_a_damaged_file_is_a_miss_recomputed_and_overwritten(tmp_path, counted, damage):
    inputs = case_inputs()
    first, _ = GoldenCache(tmp_path).get_or_compute(OP, inputs.spec, inputs.args)
    (path,) = entry_files(tmp_path)
    damage(path)
    cache = GoldenCache(tmp_path)
    second, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert not hit and cache.computed == 1 and cache.unreadable == 1 and len(counted) == 2
    assert_same(first, second)
    third, hit = GoldenCache(tmp_path).get_or_compute(OP, inputs.spec, inputs.args)   # repaired on disk
    assert hit
    assert_same(first, third)


def test_a_file_with_the_wrong_content_is_a_miss(tmp_path):
    """A file under the right name holding other tensors (another op, another dtype) is not served."""
    from safetensors.torch import save_file

    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    path = cache.path(OP, cache.key(OP, inputs.spec))
    path.parent.mkdir(parents=True)
    save_file({"out": torch.zeros(2, dtype=torch.float64)}, str(path))
    result, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert not hit and cache.unreadable == 1
    assert set(result) == set(goldens.golden_names(OP))


def test_a_failed_write_still_returns_the_goldens(tmp_path):
    root = tmp_path / "not-a-dir"
    root.write_text("a file where the cache folder should be")
    inputs = case_inputs()
    cache = GoldenCache(root)
    result, hit = cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert not hit and cache.write_errors == 1
    assert_same(result, goldens.compute(OP, inputs.args, exact=True))


# -- atomic writes ------------------------------------------------------------------------

def test_writes_go_to_a_temp_file_in_the_same_folder_then_replace(tmp_path, monkeypatch):
    moves = []
    real_replace = os.replace

    def replace(src, dst):
        moves.append((Path(src), Path(dst), Path(dst).exists(), Path(src).stat().st_size))
        real_replace(src, dst)

    monkeypatch.setattr(cache_module.os, "replace", replace)
    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    cache.get_or_compute(OP, inputs.spec, inputs.args)
    # the outputs' file, then its intermediates' beside it (docs/intermediates.md)
    key = cache.key(OP, inputs.spec)
    assert [dst for _, dst, _, _ in moves] == [cache.path(OP, key), cache.intermediates_path(OP, key)]
    for src, dst, existed, size in moves:
        assert src.parent == dst.parent and src != dst and not existed and size > 0
    assert sorted(p.name for p in dst.parent.iterdir()) == sorted(d.name for _, d, _, _ in moves)   # no temp file left


def test_a_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache_module.os, "replace", failing_replace)
    inputs = case_inputs()
    cache = GoldenCache(tmp_path)
    cache.get_or_compute(OP, inputs.spec, inputs.args)
    assert cache.write_errors == 1
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_concurrent_writers_and_readers_never_see_half_a_file(tmp_path):
    """Workers writing the same key while others read: every read is a whole file or a miss."""
    inputs = case_inputs()
    expected = goldens.compute(OP, inputs.args, exact=True)
    caches = [GoldenCache(tmp_path, memory_entries=0) for _ in range(6)]
    results, errors = [], []

    def work(cache: GoldenCache) -> None:
        try:
            for _ in range(5):
                results.append(cache.get_or_compute(OP, inputs.spec, inputs.args)[0])
        except Exception as exc:             # surfaced below with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(cache,)) for cache in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(results) == 30
    assert sum(cache.unreadable for cache in caches) == 0
    for result in results:
        assert_same(result, expected)
    assert {p.suffix for p in (tmp_path / OP).iterdir()} == {".safetensors"}


# -- where the cache lives ----------------------------------------------------------------

def test_default_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_GOLDEN_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.setenv("HARNESS_GOLDEN_CACHE", "")
    assert default_cache_dir() == tmp_path / "xdg" / "fused-kernel-harness" / "goldens"
    monkeypatch.delenv("HARNESS_GOLDEN_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fused-kernel-harness" / "goldens"


# -- the golden intermediates' file: plain reads, no mapping (bench/bench_intermediates_rss.py) ----

def _odd_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {"a": torch.randn(3, 5, generator=g),                        # 60 bytes
            "b": torch.randn(7, generator=g).to(torch.bfloat16),       # 14: every later offset odd-aligned
            "c": torch.arange(5, dtype=torch.int8),                    # 5
            "d": torch.randn(2, 3, generator=g, dtype=torch.float64),
            "empty": torch.empty(0, 4), "scalar": torch.tensor(2.5), "flags": torch.tensor([True, False, True])}


def test_tensor_file_reads_back_every_tensor_bit_for_bit(tmp_path):
    from safetensors.torch import save_file
    tensors = _odd_tensors()
    path = tmp_path / "t.safetensors"
    save_file(tensors, str(path), metadata={"key": "k", "digest:a": "x"})
    f = cache_module._TensorFile(path)
    try:
        assert f.metadata == {"key": "k", "digest:a": "x"} and set(f.names) == set(tensors)
        for name in ("d", "b", "scalar", "a", "empty", "c", "flags", "b"):     # any order, twice
            got = f.get_tensor(name)
            assert got.dtype == tensors[name].dtype and got.shape == tensors[name].shape, name
            assert torch.equal(got.reshape(-1).view(torch.uint8), tensors[name].reshape(-1).view(torch.uint8)), name
    finally:
        f.close()


def test_tensor_file_keeps_no_mapping_and_closes(tmp_path):
    from safetensors.torch import save_file
    path = tmp_path / "t.safetensors"
    save_file(_odd_tensors(), str(path))
    f = cache_module._TensorFile(path)
    f.get_tensor("a")
    assert str(path) not in Path("/proc/self/maps").read_text()
    f.close()
    f.close()                                    # closing twice is fine
    with pytest.raises(ValueError):              # a closed file: ValueError, as any unusable file
        f.get_tensor("a")


@pytest.mark.parametrize("damage", ["short header", "not json", "payload cut short", "cut after the header",
                                    "cut after it was opened"])
def test_tensor_file_refuses_a_damaged_file_with_value_error(tmp_path, damage):
    from safetensors.torch import save_file
    path = tmp_path / "t.safetensors"
    save_file(_odd_tensors(), str(path))
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    if damage == "short header":
        path.write_bytes(data[:5])
    elif damage == "not json":
        path.write_bytes(data[:8] + b"{" * size + data[8 + size:])
    elif damage == "payload cut short":
        path.write_bytes(data[:-3])
    elif damage == "cut after the header":
        path.write_bytes(data[:8 + size + 10])
    else:                                         # the file shrinks under an open reader: a short read
        f = cache_module._TensorFile(path)
        os.truncate(path, 8 + size + 10)
        with pytest.raises(ValueError, match="bytes short"):
            for name in f.names:
                f.get_tensor(name)
        return
    with pytest.raises(ValueError):
        cache_module._TensorFile(path)
