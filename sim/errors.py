"""Errors that mean "the user's input is wrong" (exit status 2), as opposed to bugs (exit 1)."""


class InputError(Exception):
    """Bad user input: a scenario field, a file, a CLI value.

    The message is shown to the user as is, without a traceback, so it must name the field path
    or file (and line) and say what would be valid.
    """


# what people call the policies in papers and servers -> our names
ALIASES = {"sarathi": "chunked_prefill", "sarathi-serve": "chunked_prefill", "chunked": "chunked_prefill",
           "orca": "continuous", "vllm": "continuous", "iteration": "continuous", "distserve": "pd_split",
           "splitwise": "pd_split", "disaggregated": "pd_split", "pd": "pd_split"}


def did_you_mean(value: str, choices) -> str:
    """A short hint listing valid choices, leading with the closest match when there is one."""
    import difflib

    choices = sorted(choices)
    alias = ALIASES.get(str(value).lower())
    if alias in choices:
        return f" (did you mean {alias!r}?) valid: {', '.join(choices)}"
    # a choice the value begins (h100 -> h100-pcie, h100-sxm) beats the closest spelling (h200)
    starts = [c for c in choices if str(value) and str(c).startswith(str(value))]
    close = starts[:2] if 1 <= len(starts) <= 3 else difflib.get_close_matches(str(value), choices, n=1)
    if len(close) == 2:
        return f" (did you mean {close[0]!r} or {close[1]!r}?) valid: {', '.join(choices)}"
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint} valid: {', '.join(choices)}"
