"""Test support shipped with the package: parity comparison, random scenarios, call builders.

The golden-vector loader is test tooling of the repository (``tests/golden/loader.py``), beside its data.

Used by kvcanary's own tests and benchmarks, and usable by a third-party backend's test-suite.
"""
