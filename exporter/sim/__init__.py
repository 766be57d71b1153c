"""Simulated parts of a GPU cluster for tests, the demo and benchmarks: they speak the real
protocols (HTTP for the API server) so the code under test runs exactly as in a cluster."""
