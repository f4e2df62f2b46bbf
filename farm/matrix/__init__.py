"""The matrix a user writes: its schema, flags, and expansion into job specs (pure)."""
