"""Test support shipped with the package: golden-vector replay, parity comparison, random scenarios.

Used by kvcanary's own tests and benchmarks, and usable by a third-party backend's test-suite.
"""
