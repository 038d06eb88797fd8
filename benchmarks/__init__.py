"""Benchmarks: each prints its figure beside the hardware floor it is measured against, and the ratio."""
