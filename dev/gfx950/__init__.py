"""Host-side test support for the gfx950 kernel (no AMD GPU needed)."""
