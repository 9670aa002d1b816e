"""``python -m posgen``: the ``posgen`` command (also ``accelerate launch -m posgen run``)."""

import sys

from posgen.harness.cli import main

sys.exit(main())
