"""Memory sizes as users write them (``512MB``, ``4GB``, ``1.5GiB``) and as pad prints them."""

from __future__ import annotations

import re

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
    "T": 2**40,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes of a size: an integer, or a number with a unit. ``KB``, ``MB``, ``GB``, ``TB`` are powers of
    1000; ``KiB`` ... ``TiB`` and Slurm's single letters ``K``, ``M``, ``G``, ``T`` powers of 1024.

    Raises ``ValueError`` naming the text for anything else (a negative number, an unknown unit).
    """
    if isinstance(text, bool):
        raise ValueError(f"not a memory size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"not a memory size: {text!r} (negative)")
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (expected a number and a unit: 512MB, 4GB, 2GiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(nbytes: float) -> str:
    """``nbytes`` in the largest decimal unit that keeps it at least 1 (``3.4 MB``)."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"
