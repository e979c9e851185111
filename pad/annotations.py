"""Activity annotations of ``pad.autodiff``/``pad.fwddiff`` arguments (as in Enzyme).

They are plain values with no behaviour, at the bottom of the house: the tape reads them to set up shadows,
and ``pad.show`` reads them to choose which kernel arguments are active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Active", "Const", "Dup", "DupNoNeed"]


@dataclass(frozen=True)
class Dup:
    """An array (or, in ``fwddiff``, a float) with its shadow: seed/gradient in reverse, tangent in forward."""

    value: Any
    shadow: Any


@dataclass(frozen=True)
class DupNoNeed(Dup):
    """A ``Dup`` array whose values when ``f`` returns are not needed (Enzyme's ``DuplicatedNoNeed``): the
    shadow is as a ``Dup``'s, the array's contents afterwards are unspecified. With ``autodiff(...,
    fuse=True)``, a last launch that writes only such arrays runs only its adjoint, which need not make
    them."""


@dataclass(frozen=True)
class Const:
    """A value that is not differentiated."""

    value: Any


@dataclass(frozen=True)
class Active:
    """A float scalar whose derivative ``autodiff`` returns."""

    value: float
