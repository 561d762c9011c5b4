"""The error hierarchy of gangq: one root, a few kinds a caller can act on differently."""

from __future__ import annotations


class GangqError(Exception):
    """Root of every error gangq raises on purpose."""


class InvalidInputError(GangqError):
    """User or cluster input that cannot be used as given; the message says what to fix."""


class SelectorError(InvalidInputError):
    """A CEL selector that does not compile or cannot be evaluated."""

    def __init__(self, expression: str, problem: str) -> None:
        super().__init__(f"CEL selector {expression!r}: {problem}")
        self.expression = expression
        self.problem = problem
