"""The decision core: pure data in, decisions out (no I/O)."""
