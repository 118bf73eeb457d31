"""Errors for user mistakes: one line each, turned into exit code 2 by the CLI."""


class UserError(Exception):
    """A problem with what the user asked for or supplied (not a bug). Its message is one line."""


class DataError(UserError):
    """Bad data: the message names the file (and line where there is one)."""


class DataWarning(UserWarning):
    """Data that works but not as intended (e.g. a class too small for its dev rows); the CLI prints one line."""
