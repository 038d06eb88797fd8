"""``python -m kvcanary``: the ``kvcanary`` command (the same as the installed script)."""

from __future__ import annotations

import sys

from kvcanary.cli import main

sys.exit(main())
