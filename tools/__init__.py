"""kvcanary's development tooling: never installed, never imported by the runtime package.

The docs generator (:mod:`tools.docsgen`, run by ``kvcanary docs`` and the mkdocs hook), the random parity
scenarios and benchmark workloads of the tests and benchmarks (:mod:`tools.scenarios`,
:mod:`tools.workloads`, :mod:`tools.step_world`), the launchers' stub writer (:mod:`tools.launcher_stubs`) and the
GPU-session scripts. Importable from a checkout (the
repository root on ``sys.path``, as pytest, the benchmarks and ``kvcanary docs`` put it).
"""
