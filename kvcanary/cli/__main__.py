"""``python -m kvcanary.cli``: the ``kvcanary`` command."""

from __future__ import annotations

import sys

from kvcanary.cli import main

sys.exit(main())
