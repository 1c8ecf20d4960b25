"""The protocol reads only messages: garbage, impossible sizes, cut-short frames and non-plain
pickles are a ProtocolError (never a hang, a huge allocation or code run), and a CaseReply
carries its launch's nonce and whether the worker must be replaced."""
from __future__ import annotations

import enum
import os
import pickle
import struct
import time
from multiprocessing import Pipe

import pytest

from harness.outcomes import Outcome
from harness.worker import protocol


def test_a_reply_round_trips_with_its_nonce_and_replace_reason():
    a, b = Pipe()
    reply = protocol.CaseReply("c", 0.5, outcome=Outcome.CONTRACT, summary="s", nonce="n1",
                               replace_worker="the kernel left 1 thread(s) still running: t")
    protocol.send(a, reply)
    got, _ = protocol.receive(b, protocol.CaseReply, within_s=5)
    assert got == reply


@pytest.mark.parametrize("raw, says", [
    (b"garbage from a kernel\n", "impossible size"),
    (struct.pack("!i", -1) + b"\xff" * 8, "impossible size"),
    (struct.pack("!i", 5) + b"\x80\x05junk", "not a message"),
    (struct.pack("!i", 3) + b"abc", "not a message"),
])
def test_garbage_is_a_protocol_error(raw, says):
    a, b = Pipe()
    os.write(a.fileno(), raw)
    with pytest.raises(protocol.ProtocolError, match=says):
        protocol.receive(b, protocol.CaseReply, within_s=1)


def test_a_frame_cut_short_is_a_protocol_error_within_the_deadline_not_a_hang():
    a, b = Pipe()
    os.write(a.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    started = time.monotonic()
    with pytest.raises(protocol.ProtocolError, match="stopped short: 10 of 1000"):
        protocol.receive(b, protocol.CaseReply, within_s=0.3)
    assert time.monotonic() - started < 2


class Evil:
    def __reduce__(self):
        return (os.getpid, ())


def test_a_pickle_that_looks_up_anything_is_refused():
    a, b = Pipe()
    a.send_bytes(pickle.dumps({"message": "reply", "x": Evil()}))
    with pytest.raises(protocol.ProtocolError, match="not plain data"):
        protocol.receive(b, protocol.CaseReply, within_s=1)


class Colour(str, enum.Enum):
    RED = "red"


def test_plain_turns_subclasses_into_their_base_types():
    import torch
    value = protocol.plain({"v": torch.__version__, "c": Colour.RED, "n": [True, 2, 3.0, (1, Colour.RED)],
                            "t": torch.tensor(1.5), "o": object})
    assert type(value["v"]) is str and value["c"] == "red" and type(value["c"]) is str
    assert value["n"] == [True, 2, 3.0, (1, "red")] and value["t"] == 1.5 and value["o"] == str(object)
    assert pickle.loads(pickle.dumps(value)) == value


def test_the_end_of_the_pipe_is_eof():
    a, b = Pipe()
    a.close()
    with pytest.raises(EOFError):
        protocol.receive(b, protocol.CaseReply, within_s=1)
