"""Latency: timed samples of a case compared across refs, runs and commits (docs/latency.md).

``statistics``: the ratio of two refs' latencies with its interval, and the verdict.
The worker side's timing loop is ``harness/worker/timing.py``; this package is the front end's.
"""
