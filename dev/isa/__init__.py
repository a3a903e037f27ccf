"""Compile each GPU source with the JIT's own flags and check the generated ISA (CI runs these)."""
