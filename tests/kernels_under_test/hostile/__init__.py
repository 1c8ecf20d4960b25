"""Hostile kernels for the warm worker's hygiene (``hostile.kernels:<name>``, through --kernel-path).

Each computes ``rope_kv_write`` correctly with the reference and then does one thing a
kernel must not do to the process it shares with the harness and later cases: change
the environment or torch's settings, patch torch, leave a thread or a process running,
fork and crash, write into inherited file descriptors.
"""
