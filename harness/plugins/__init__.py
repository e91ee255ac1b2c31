"""Which samplers take part, and how other people's samplers are loaded."""
