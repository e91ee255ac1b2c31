"""Released upstream DSpark samplers, loaded from their installed packages, never copied."""
