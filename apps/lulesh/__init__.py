"""LULESH 2.0 (Sedov blast, Lagrangian hydrodynamics) on pad: ``python -m apps.lulesh``."""
