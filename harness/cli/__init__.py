"""The command line: ``harness list|run|flake|compare|bisect|bisect-run|report|history``."""
from harness.cli.commands import main

__all__ = ["main"]
