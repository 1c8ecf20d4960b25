"""The classifier on real failure logs from public issues (tests/fixtures/logs/public), each
labelled by hand with what it is, and the rules for issue 22's log families against false alarms."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.classify import builtin_rules, classify_exit, classify_text, match_rules, read_log
from harness.outcomes import Outcome, label
from helpers import classify_collected

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "public"
COLLECTION: dict = yaml.safe_load((PUBLIC / "collection.yaml").read_text())


def _classify(name: str, spec: dict):
    return classify_collected(PUBLIC, name, spec)


def test_every_log_has_a_label_and_a_source_and_there_are_enough():
    assert {p.name for p in PUBLIC.glob("*.log")} == set(COLLECTION)
    assert len(COLLECTION) >= 30
    for name, spec in COLLECTION.items():
        assert spec.get("source"), name
        assert {"outcome", "label", "code"} <= set(spec), name
        assert spec["label"] == label(spec["outcome"], spec["code"]), name    # the hand labels are consistent


@pytest.mark.parametrize("name", sorted(COLLECTION))
def test_public_log_is_labelled_as_a_reader_would(name):
    spec = COLLECTION[name]
    c = _classify(name, spec)
    assert (c.outcome.value, label(c.outcome, c.code), c.code) == (spec["outcome"], spec["label"], spec["code"]), \
        c.summary
    for key, value in spec.get("fields", {}).items():
        assert c.fields.get(key) == value, (key, c.fields)
    assert "\n" not in c.summary and len(c.summary) < 600


# -- the families, one by one: what each rule reads, and what it must leave alone ---------------

def test_scheduler_timeout_is_the_root_cause_of_a_507018_printed_before_or_after_it():
    status = "PTO2 runtime failed: orch_error_code=0 sched_error_code=100 runtime_status=-100"
    wrapper = "RuntimeError: run_prepared failed with code 507018"
    for text in (f"{wrapper}\n{status}", f"{status}\n{wrapper}"):
        c = classify_text(text)
        assert (c.outcome, c.code, c.fields["cause"], c.fields["cause_code"]) == \
            (Outcome.ORCH_ERROR, 507018, "SCHEDULER_TIMEOUT", 100), c.summary


def test_a_stall_sub_class_refines_the_scheduler_timeout_whichever_line_comes_first():
    status = "PTO2 runtime failed: orch_error_code=0 sched_error_code=100 runtime_status=-100"
    stall = "PTO2 scheduler timeout sub_class=S4:dependency-deadlock stuck_task_id=9"
    for text in (f"{status}\n{stall}", f"{stall}\n{status}"):
        c = classify_text(text)
        assert (c.rule, c.code, c.name) == ("pto2_scheduler_stall", 100, "SCHEDULER_TIMEOUT/S4:dependency-deadlock")
        assert "set_dependencies" in c.hint
    # an orchestrator code on the same status line stays the root cause (TENSOR_WAIT_TIMEOUT)
    c = classify_text("orch_error_code=8 sched_error_code=100 runtime_status=-8\nsub_class=S1:running-stalled")
    assert (c.rule, c.code) == ("pto2_orch_error", 8)


def test_the_allocator_banner_names_which_ring_resource_ran_out():
    heap = classify_text("FATAL: Task Allocator Deadlock - Heap Exhausted! ring=1")
    ring = classify_text("report_deadlock: FATAL: Task Allocator Deadlock - Task Ring Full! (ring=2)")
    assert (heap.outcome, heap.code, heap.fields["ring"], heap.name) == (Outcome.ORCH_ERROR, 2, 1, "HEAP_RING_DEADLOCK")
    assert (ring.code, ring.fields["ring"], ring.name) == (3, 2, "FLOW_CONTROL_DEADLOCK")
    assert "PTO2_RING_HEAP" in heap.hint and "PTO2_RING_TASK_WINDOW" in ring.hint


def test_cann_name_and_id_form():
    oom = classify_text("[PID: 7] 2026-01-01-00:00:00.000.000 Memory_Allocation_Failure(EL0004): Failed to allocate memory.")
    assert (oom.outcome, oom.code, oom.fields["error_name"]) == (Outcome.OOM, "EL0004", "Memory_Allocation_Failure")
    bad_arg = classify_text("Invalid_Argument(EE1001): The argument is invalid.")
    assert (bad_arg.outcome, bad_arg.code) == (Outcome.CRASH, "EE1001")
    inner = classify_text("EE9999[PID: 1] 2026-06-06-13:56:40.031.249 (EE9999):\n  rtMemcpyAsync execution failed")
    assert (inner.outcome, inner.code) == (Outcome.DEVICE_FAULT, "EE9999")
    # a printed runtime number stays the label; the name still gives the class
    c = classify_text("Memory_Allocation_Failure(EL0004): Failed to allocate memory\n"
                      "alloc device memory failed, runtime result = 207001")
    assert (c.outcome, c.code) == (Outcome.OOM, 207001)


def test_oom_wordings_and_the_absurd_request():
    for text in ("NPU out of memory. Tried to allocate more than 1EB memory",
                 "CUDA out of memory. Tried to allocate more than 1EB memory."):
        c = classify_text(text)
        assert (c.outcome, c.rule) == (Outcome.OOM, "oom_absurd_request") and "garbage" in c.summary
        assert "out-of-bounds" in c.hint
    for text, requested in (("NPU out of memory. NPUWorkspaceAllocator tried to allocate 180.00 MiB(NPU 1; ...)",
                             "180.00 MiB"),
                            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0", "20.00 MiB")):
        c = classify_text(text)
        assert (c.outcome, c.fields.get("requested")) == (Outcome.OOM, requested), c.summary
    assert classify_text("torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory.").outcome \
        is Outcome.OOM


def test_collective_watchdog_timeout_is_a_hang_not_the_abort_that_follows():
    line = ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
            "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")
    c = classify_exit(-6, line)
    assert (c.outcome, c.code, c.sticky) == (Outcome.HANG, None, True)
    assert c.fields["op_type"] == "BROADCAST" and c.fields["ran_ms"] == 600081 and "FAIL_SIGABRT" in c.secondary


def test_hccl_error_ids_that_name_a_hang_or_the_environment():
    notify = classify_text("AclrtSynchronizeDeviceWithTimeout, error code is 507048\n"
                           "EI0002: [PID: 1] 2025-06-25-10:45:23.586.187 The wait execution of the Notify register times out.")
    assert (notify.outcome, notify.code, notify.sticky) == (Outcome.HANG, "EI0002", True), notify.summary
    assert "FAIL_507048" in notify.secondary and "HCCL_EXEC_TIMEOUT" in notify.hint
    socket = classify_text("Communication_Error_Get_Socket(EI0006)")
    assert (socket.outcome, socket.code) == (Outcome.ENV_ERROR, "EI0006") and "HCCL_CONNECT_TIMEOUT" in socket.hint
    # 507048 alone is still a device fault: a task timed out, and nothing says what it waited on
    assert classify_text("error code is 507048").outcome is Outcome.DEVICE_FAULT


def test_the_heartbeat_monitor_ending_a_stuck_watchdog_is_a_hang():
    c = classify_exit(-6, "[PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL's watchdog got stuck for 480 "
                          "seconds without making progress in monitoring enqueued collectives.")
    assert (c.outcome, c.fields["stuck_s"], c.fields["backend"]) == (Outcome.HANG, 480, "NCCL")


def test_ptxas_failures_are_build_errors():
    for text in ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
                 "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error",
                 "RuntimeError: `ptxas` failed with error code 255"):
        c = classify_text(text)
        assert (c.outcome, c.sticky) == (Outcome.BUILD_ERROR, False), text
    assert "TRITON_PTXAS_PATH" in classify_text("ptxas fatal   : Unresolved extern function 'f'").hint


def test_aclinit_failure_is_the_environment_whatever_the_code():
    for text, code in (("aclInit failed. ERROR: 500000", 500000), ("[ERROR] aclInit(nullptr) failed: 507008", 507008),
                       ("auto ret = aclInit(nullptr); ... aclInit failed, error code is 100002", 100002),
                       ("RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:217 NPU function "
                        "error: at_npu::native::AclSetCompileopt(...), error code is 500001", 500001)):
        c = classify_text(text)
        assert (c.outcome, c.code, c.rule) == (Outcome.ENV_ERROR, code, "acl_init_failure"), c.summary


@pytest.mark.parametrize("text", [
    "ptxas info    : Used 64 registers, 384 bytes cmem[0]",                       # ptxas -v chatter
    "ptxas warning : Registers are spilled to local memory",
    "aclInit(nullptr) ok, ret = 0",                                               # aclInit that worked
    "[INFO] aclInit success",
    "NCCL INFO Channel 00/0 : 7[7] -> 6[6] via P2P/IPC",                          # NCCL chatter
    "[INFO] TaskAllocator: heap=1024/4096 task window 12/16384",                   # no deadlock
    "PTO2 runtime: orch_error_code=0 sched_error_code=0 runtime_status=0",        # a clean status
    "def check(self, x): return x",                                                # '): ' with no CANN id
    "see Invalid_Argument(EE1001) in the CANN docs for the list",                  # a mention, not a report
    "Initialize: NPU 0 ready",                                                     # torch-npu start-up that worked
    "torch.cuda.OutOfMemoryError is raised when the allocator fails",              # prose, no ':' after it
])
def test_no_false_alarm_from_lines_that_only_look_alike(text):
    assert classify_text(text) is None, [h.rule.name for h in match_rules(text)]


def test_every_new_rule_is_exercised_by_a_public_log():
    hit = set()
    for name, spec in COLLECTION.items():
        text = read_log(PUBLIC / name)
        if spec.get("via") == "exit":
            text += "\n[harness] worker killed by SIGABRT (signal 6) while running the kernel"
        hit |= {h.rule.name for h in match_rules(text)}
    new = {"acl_init_failure", "acl_host_failure", "oom_absurd_request", "cann_error_name", "pto2_allocator_deadlock",
           "collective_watchdog_timeout", "collective_watchdog_stuck", "ptxas_failure", "torch_oom_error"}
    assert new <= {r.name for r in builtin_rules()}
    assert new <= hit, new - hit
