"""``python -m exporter`` is the ``gangscope`` command."""

import sys

from .cli import main

sys.exit(main())
