"""Progress on stderr for the phases of a command that can take more than a couple of seconds
(report figures, validate-cost): a tqdm bar over named steps, silent when disabled (``--quiet``) or
when stderr is no terminal (``interactive``)."""

from __future__ import annotations

import sys


def interactive() -> bool:
    """Whether stderr is a terminal: progress bars are drawn only there. Redirected to a file or a
    CI log, a bar would write a line of carriage-return updates every half second; the command's
    results and errors are printed all the same."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # (no isatty, or closed)
        return False


class Phases:
    """``step(name)`` after each phase; ``total`` may grow (``add``) once the work is known."""

    def __init__(self, enabled: bool, desc: str, total: int = 1):
        self.bar = None
        if enabled and interactive():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)

    def add(self, n: int) -> None:
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def step(self, what: str = "") -> None:
        if self.bar is not None:
            if what:
                self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
