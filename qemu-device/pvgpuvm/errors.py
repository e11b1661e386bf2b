"""The two kinds of failure the CLI turns into exit codes (DESIGN §8):
a UsageError is the caller's mistake (exit 2), a Failure is something that
went wrong while doing what was asked (exit 1).  Both carry the one line
that is printed on stderr, so every module raises them with that line
already written for a person to read.
"""


class Failure(Exception):
    """A runtime failure: exit status 1."""


class UsageError(Exception):
    """Bad arguments: exit status 2."""
