"""See docs/architecture.md for what this package holds."""
