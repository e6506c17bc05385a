"""User-facing errors: the CLI prints their message and exits with code 2."""


class UserError(Exception):
    """A problem the user can fix (bad name, bad value, bad file); the message says what and how."""
