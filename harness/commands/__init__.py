"""Command cases: any command (a downstream pytest suite, a repro script) run as a case (docs/commands.md).

``spec``: the command, its cwd and pass rule, and the placeholders.  ``casefile``: case files
with ``command:``.  ``process``: one command in a session of its own, its output captured
(head and tail), its timeout, the whole session killed.  ``junit``: the JUnit XML a command
wrote, one result per test.  ``runner``: one command case, start to results.
"""
