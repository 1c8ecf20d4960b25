"""Root conftest: `pytest` here collects cases/*.yaml as test items.

The collection itself lives in the `harness.pytest_plugin` (registered through
the package's pytest11 entry point); this file keeps the project's own tests
and the shipped matrices apart: `pytest tests` runs the tests, `pytest cases`
(or plain `pytest`) runs the matrix on `--device` (default cpu).
"""
