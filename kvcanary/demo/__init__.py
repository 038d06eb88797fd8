"""``kvcanary demo``: a serving workload run clean, then once per fault class, with what the canary caught.

Every run drives the same shared-prefix workload through a small engine (hybrid full + sliding-window
attention, chunked prefill, radix prefix cache with eviction, graph padding, a PD prefill peer) with the
canary in log mode: real-KV fingerprints (partial), K and V halves, token checks and a sweep. The clean
run must report nothing; each fault run must be detected.

Nothing here is kvcanary's API: the engine (:mod:`kvcanary.demo.engine`) exists to show the canary at work,
in the demo, the tests and the benchmarks.
"""

from kvcanary.demo.outcome import RunOutcome
from kvcanary.demo.progress import ProgressBar
from kvcanary.demo.run import DEFAULT_STEPS, DemoSettings, run_demo, run_one

__all__ = ["DEFAULT_STEPS", "DemoSettings", "ProgressBar", "RunOutcome", "run_demo", "run_one"]
