"""``launch_canary_write_kernel``: stamp the records of the tokens a step writes."""

from __future__ import annotations

from kvcanary.contract.write import WriteLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_canary_write_kernel = launcher(
    WriteLaunch, Op.WRITE, __name__,
    """Write one record per token with ``out_cache_loc >= 0``, chained per request from its seed slot.""",
)
