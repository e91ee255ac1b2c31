"""A plug-in module interrupted at import: the harness must refuse it (exit 2)."""

raise KeyboardInterrupt
