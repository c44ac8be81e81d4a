"""Progress on stderr for the phases of a command that can take more than a couple of seconds
(report figures, validate-cost): a tqdm bar over named steps, silent when disabled (``--quiet``)."""

from __future__ import annotations

import sys


class Phases:
    """``step(name)`` after each phase; ``total`` may grow (``add``) once the work is known."""

    def __init__(self, enabled: bool, desc: str, total: int = 1):
        self.bar = None
        if enabled:
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
