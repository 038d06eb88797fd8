"""``python -m kvcanary.launch [--check]``: write (or check) the launchers' typed stubs from the contracts."""

from __future__ import annotations

import sys

from kvcanary.launch.stubs import main

sys.exit(main(sys.argv[1:]))
