"""Make the synthetic-run helper importable by the results tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
