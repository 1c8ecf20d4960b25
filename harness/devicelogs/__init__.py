"""Device logs: what the device runtime writes to files, read back for the case that failed.

On an Ascend host torch-npu's exception often carries only a wrapper ("The Inner error is
reported as above ..."), while the runtime's detail (the aicore exception block, ``ERROR``
lines with the code) goes to CANN's application logs (plog) under
``ASCEND_PROCESS_LOG_PATH``.  Each worker gets its own such directory under the run's log
directory (``worker_env``), the front end notes the files' sizes when a case starts
(``mark``: a directory listing, no read) and, only when the case fails, reads what was
appended since (``since``): error lines and exception blocks first, capped.  Front-end side;
no torch (docs/ascend.md).
"""
from harness.devicelogs.capture import (  # noqa: F401
    LOG_PATH_ENV,
    DeviceLog,
    Mark,
    log_env,
    mark,
    prune,
    since,
)
