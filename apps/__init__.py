"""Mini-apps built on pad."""
