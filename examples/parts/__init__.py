"""Three parts written outside modformer, used by import path (examples/README.md)."""
