"""Reports: renderers and writers of the report document (terminal, JSON, JUnit, Markdown, HTML), and
``history``, past runs read back from the store for ``harness report RUN_ID`` and ``harness history``."""
