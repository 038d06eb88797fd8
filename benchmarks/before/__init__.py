"""Benchmark-only copies of kernels as they were before a change, timed beside the current ones."""
