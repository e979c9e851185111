"""Activity annotations of ``pad.autodiff``/``pad.fwddiff`` arguments (as in Enzyme).

They are plain values with no behaviour, at the bottom of the house: the tape reads them to set up shadows,
and ``pad.show`` reads them to choose which kernel arguments are active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Active", "Const", "Dup"]


@dataclass(frozen=True)
class Dup:
    """An array (or, in ``fwddiff``, a float) with its shadow: seed/gradient in reverse, tangent in forward."""

    value: Any
    shadow: Any


@dataclass(frozen=True)
class Const:
    """A value that is not differentiated."""

    value: Any


@dataclass(frozen=True)
class Active:
    """A float scalar whose derivative ``autodiff`` returns."""

    value: float
