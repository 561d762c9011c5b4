"""Per-kind validation and defaulting, with the real API server's field-error wording."""
