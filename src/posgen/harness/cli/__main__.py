"""``python -m posgen.harness.cli``: the ``posgen`` command."""

import sys

from posgen.harness.cli import main

sys.exit(main())
