"""A kernel that sets an environment variable when it is imported (a tuning switch, as
libraries read at import), then computes the right answer. The worker imports it once and
puts the environment back after its first case: later cases run without the variable."""
import os

from harness.kernels.reference import rope_kv_write as _reference

os.environ["HARNESS_HOSTILE_TUNING"] = "fast"


def rope_kv_write(**args):
    return _reference(**args)
