"""Errors a user can act on: each renders as one line naming the bad value and the valid choices."""


class HpcbenchError(Exception):
    """Base class for errors reported as a single line, without a traceback."""


class UsageError(HpcbenchError):
    """Bad input: unknown names, impossible sizes, missing data, malformed config."""


class RuntimeFailure(HpcbenchError):
    """A run that cannot go on: a timeout, a torn read, a rank that failed."""


def one_of(kind: str, name: object, valid: list[str] | tuple[str, ...]) -> UsageError:
    """The standard "unknown X" error listing the valid choices."""
    return UsageError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
