"""What gloocy-bench shows while it runs: a progress bar over its jobs
(tqdm, when installed and wanted) and its messages on stderr."""

from __future__ import annotations

import sys

__all__ = ["Progress", "say"]


def say(message: str) -> None:
    print(f"gloocy-bench: {message}", file=sys.stderr, flush=True)


class Progress:
    """tqdm over the jobs when available and wanted, else nothing."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.bar = None
        if not quiet:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="job", dynamic_ncols=True)
            except ImportError:
                say("tqdm is not installed: no progress bar")

    def status(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            say(text)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
