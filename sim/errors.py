"""Errors that mean "the user's input is wrong" (exit status 2), as opposed to bugs (exit 1)."""


class InputError(Exception):
    """Bad user input: a scenario field, a file, a CLI value.

    The message is shown to the user as is, without a traceback, so it must name the field path
    or file (and line) and say what would be valid.
    """


def did_you_mean(value: str, choices) -> str:
    """A short hint listing valid choices, leading with the closest match when there is one."""
    import difflib

    choices = sorted(choices)
    close = difflib.get_close_matches(str(value), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint} valid: {', '.join(choices)}"
