"""Latency: timed samples of a case compared across refs, runs and commits (docs/latency.md).

``statistics``: the ratio of two refs' latencies with its interval, and the verdict;
``across``: a latency compare's verdicts from its results.  The compares and the latency
bisect that run these are in ``harness/refs/`` (``compare``, ``latency_bisect``), above this
package.  The worker side's timing loop is ``harness/worker/timing.py``; this package is the front end's.
"""
