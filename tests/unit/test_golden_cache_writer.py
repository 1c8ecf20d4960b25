"""The golden cache's two sides: ``ensure`` (the golden process, the one writer) and ``read``
(the device worker, which never writes); and the golden process's answer to one request."""
from __future__ import annotations

import os

import pytest
import torch
from safetensors import safe_open

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.goldens.cache import GoldenCache, GoldenStoreError
from harness.worker import protocol
from harness.worker.golden_serve import answer
from harness.worker.inputs import generate

OP = "fused_rope_decode_attention"


def make_case(seed: int = 1) -> Case:
    return Case(f"{OP}[seed={seed}]", "unit", "tests/unit/test_golden_cache_writer.py", OP, "reference",
                PRESETS["tiny"], SeqLens("uniform", (1, 40)), SlotMode("arange"), seed)


def test_ensure_computes_once_writes_its_pid_and_then_hits_without_inputs(tmp_path, counted):
    ci = generate(make_case())
    cache = GoldenCache(tmp_path)
    path, key, hit = cache.ensure(OP, ci.spec, lambda: ci.args)
    assert not hit and len(counted) == 1 and path == cache.path(OP, key)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["writer_pid"] == str(os.getpid())

    def no_inputs():
        raise AssertionError("a hit needs no inputs")

    assert cache.ensure(OP, ci.spec, no_inputs) == (path, key, True)
    assert GoldenCache(tmp_path).ensure(OP, ci.spec, no_inputs) == (path, key, True)   # another process: reads it
    assert len(counted) == 1


def test_ensure_recomputes_a_file_changed_since_it_was_checked(tmp_path, counted):
    ci = generate(make_case())
    cache = GoldenCache(tmp_path)
    path, _, _ = cache.ensure(OP, ci.spec, lambda: ci.args)
    path.write_bytes(path.read_bytes()[:100])
    _, _, hit = cache.ensure(OP, ci.spec, lambda: ci.args)
    assert not hit and len(counted) == 2 and cache.unreadable == 1


def test_ensure_raises_when_the_file_cannot_be_written(tmp_path):
    (tmp_path / "root").write_text("a file, not a directory")
    ci = generate(make_case())
    with pytest.raises(GoldenStoreError, match="could not write"):
        GoldenCache(tmp_path / "root").ensure(OP, ci.spec, lambda: ci.args)


def test_read_gives_the_goldens_bit_for_bit_and_writes_nothing(tmp_path, monkeypatch):
    ci = generate(make_case())
    path, _, _ = GoldenCache(tmp_path).ensure(OP, ci.spec, lambda: ci.args)
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.setattr("harness.goldens.cache.save_file", lambda *a, **k: pytest.fail("the reader wrote"))
    reader = GoldenCache(None)
    got = reader.read(OP, ci.spec, path)
    expected = goldens.compute(OP, ci.args, torch.float32, exact=True)
    assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)
    got["out"].fill_(0)                                       # a caller's copy: the next read is intact
    assert torch.equal(reader.read(OP, ci.spec, path)["out"], expected["out"])
    assert sorted(tmp_path.rglob("*")) == before


def test_read_refuses_a_file_that_holds_another_cases_goldens(tmp_path):
    ci, other = generate(make_case(1)), generate(make_case(2))
    path, _, _ = GoldenCache(tmp_path).ensure(OP, other.spec, lambda: other.args)
    with pytest.raises(GoldenStoreError, match="does not hold the goldens of this case"):
        GoldenCache(None).read(OP, ci.spec, path)


def test_the_golden_process_answers_with_its_file_and_pid(tmp_path):
    reply = answer(protocol.GoldenRequest(make_case(), "fp64", nonce="n1"), GoldenCache(tmp_path))
    assert reply.failure is None and reply.nonce == "n1" and reply.golden.pid == os.getpid()
    assert not reply.golden.hit and reply.golden.seconds > 0
    with safe_open(reply.golden.path, framework="pt") as f:
        assert f.metadata()["key"] == reply.golden.key and f.metadata()["dtype"] == "float64"
    again = answer(protocol.GoldenRequest(make_case(), "fp64", nonce="n2"), GoldenCache(tmp_path))
    assert again.golden.hit and again.golden.path == reply.golden.path


def test_a_golden_that_fails_is_a_golden_stage_failure(tmp_path):
    reply = answer(protocol.GoldenRequest(make_case(), "fp16", nonce="n"), GoldenCache(tmp_path))
    assert reply.golden is None and reply.failure.stage is protocol.Stage.GOLDEN
    assert reply.failure.exc_type == "KeyError"


def test_golden_messages_round_trip_as_plain_data():
    ref = protocol.GoldenRef("/x/y.safetensors", "k" * 64, True, 0.25, 123)
    for message in (protocol.GoldenRequest(make_case(), "fp32", nonce="n"),
                    protocol.GoldenReply("c", "n", golden=ref),
                    protocol.GoldenReply("c", "n", failure=protocol.Failure(protocol.Stage.GOLDEN, "E", "m", "tb")),
                    protocol.RunRequest(make_case(), "/log", golden=ref)):
        assert type(message).from_wire(protocol.plain(message.to_wire())) == message
