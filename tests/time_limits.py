"""A stand-in for ``pad.checkpoint.Resumable.clock`` that makes a run reach its time limit on cue."""

from __future__ import annotations


class PassesAfter:
    """A clock at time 0 for its first ``after`` readings, past any time limit from the next on."""

    def __init__(self, after: int) -> None:
        self.calls, self.after = 0, after

    def __call__(self) -> float:
        self.calls += 1
        return 1e9 if self.calls > self.after else 0.0
