"""Exceptions that map onto the exit-code contract (0 good, 1 problem found, 2 bad usage or input)."""

from __future__ import annotations


class BadInput(Exception):
    """Bad usage or bad input. The message names the offending flag, key, file or value. Exit 2."""

    exit_code = 2


class ProblemFound(Exception):
    """The command ran and found a problem (a failed check, a failed run). Exit 1."""

    exit_code = 1
