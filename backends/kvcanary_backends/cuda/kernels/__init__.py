"""The CUDA C++ sources (``*.cu``: one per operation; ``*.cuh``: shared), read and compiled at run time."""
