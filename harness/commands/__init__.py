"""Command cases: any command (a downstream pytest suite, a repro script) run as a case (docs/commands.md).

What a command case is and its case files are read in ``harness.casefiles`` (``commandspec``,
``commandfile``).  Here, what runs them: ``process``: one command in a session of its own, its
output captured (head and tail), its timeout, the whole session killed.  ``junit``: the JUnit
XML a command wrote, one result per test.  ``runner``: one command case, start to results.
``selection``: which results decide once a ``--test`` / ``-k`` selection reached its tests.
"""
