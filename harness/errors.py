"""The root of rollcheck's own errors: a user can hit each one, and its message is one
line fit to print as it is (what was wrong, where, what to do)."""

from __future__ import annotations


class RollcheckError(Exception):
    """An error a user can act on; `main` and the pytest plugin print it as one line."""
