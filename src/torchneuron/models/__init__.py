"""Small reference models used by tests and benchmarks."""
