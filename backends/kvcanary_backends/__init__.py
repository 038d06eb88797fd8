"""Kernel backends for kvcanary, each registered through the ``kvcanary.backends`` entry points.

``torch_ref`` is the executable specification (any device); ``triton`` and ``cuda`` must match it byte
for byte. Each backend is one folder with one file per operation.
"""
