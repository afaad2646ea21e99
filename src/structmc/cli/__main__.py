"""``python -m structmc.cli ...``: the ``structmc`` command."""

import sys

from . import main

sys.exit(main())
