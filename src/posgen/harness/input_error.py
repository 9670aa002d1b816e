"""The error of input a command refuses before any work.

Every check of a command's arguments, its model's config and its output folder raises
:class:`InputError` (or a subclass: ``LoadError``, ``PlanError``, ``DocumentError``); the
command prints its one-line message on stderr and exits with status 2, before any
weights load and with nothing written.
"""

from __future__ import annotations


class InputError(ValueError):
    """Input a command refuses; the message (one line) says what to do."""
