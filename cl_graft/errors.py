"""Errors for user mistakes: one line each, turned into exit code 2 by the CLI."""


class UserError(Exception):
    """A problem with what the user asked for or supplied (not a bug). Its message is one line."""


class DataError(UserError):
    """Bad data: the message names the file (and line where there is one)."""
