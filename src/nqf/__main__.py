"""``python -m nqf`` runs the ``nqf`` command line (`nqf.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
