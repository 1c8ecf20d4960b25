"""The worker protocol: every message survives its wire form and the pipe, and a receiver refuses the unexpected."""
from __future__ import annotations

import math
import multiprocessing
import subprocess
import sys

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.outcomes import Outcome
from harness.worker import protocol
from harness.worker.protocol import CaseReply, Failure, Ready, RunRequest, Stage, Stop

CASE = Case(case_id="rope[tiny]", matrix="t", source="t", op="rope_kv_write", kernel="reference",
            geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("padded", 0.5),
            seed=7, env={"FLAG": "1"}, params={"note": [1, 2]})

MESSAGES = [
    Ready(pid=42, absent=None, info={"name": "cpu"}),
    Ready(pid=43, absent="torch-npu is not installed"),
    RunRequest(CASE, "/tmp/x.log", repeat=3, baseline="/tmp/b.safetensors"),
    RunRequest(CASE, "/tmp/y.log"),
    Stop(),
    CaseReply("rope[tiny]", 0.25, outcome=Outcome.MISMATCH, summary="out: 3 bad", report="...",
              metrics={"compare": {"out": {"max_rel_error": math.inf}}, "timings": {"check_s": 0.1}}),
    CaseReply("rope[tiny]", 0.5, failure=Failure(Stage.IMPORT, "ImportError", "no module x\nmore", "Traceback ...")),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.brief())
def test_wire_form_round_trips(message):
    assert type(message).from_wire(message.to_wire()) == message


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.brief())
def test_messages_cross_a_pipe_with_their_size(message):
    here, there = multiprocessing.Pipe()
    try:
        size = protocol.send(here, message)
        received, received_size = protocol.receive(there, type(message))
    finally:
        here.close()
        there.close()
    assert received == message and received_size == size > 0


def test_an_unexpected_message_is_refused():
    here, there = multiprocessing.Pipe()
    try:
        protocol.send(here, Stop())
        with pytest.raises(protocol.ProtocolError, match="expected reply, got 'stop'"):
            protocol.receive(there, CaseReply)
    finally:
        here.close()
        there.close()


def test_brief_names_the_case_never_the_payload():
    assert MESSAGES[2].brief() == "run case=rope[tiny] repeat=3 bitwise"
    assert MESSAGES[5].brief() == "reply case=rope[tiny] MISMATCH 0.250s"
    assert MESSAGES[6].brief() == "reply case=rope[tiny] ImportError in import 0.500s"


def test_stages_that_are_the_harness_own_failures():
    assert {s for s in Stage if s.harness_side} == {Stage.INPUTS, Stage.GOLDEN, Stage.CHECK, Stage.DETERMINISM}
    assert MESSAGES[6].failure.first_line == "no module x"


def test_the_worker_side_imports_nothing_of_the_front_end():
    code = ("import sys, harness.worker.serve, harness.worker.execute; "
            "print(sorted(m for m in sys.modules if m.startswith(('harness.run', 'harness.reports', "
            "'harness.cli', 'harness.classify', 'harness.store'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
