"""The Flower app's tests: flwr 1.42 needs Python 3.11 (the dev extra installs it there only),
and the app's folder goes on sys.path, as `flwr run` puts it for the app's own imports."""

from __future__ import annotations

import sys
from pathlib import Path

collect_ignore_glob = [] if sys.version_info >= (3, 11) else ["test_flower_*.py"]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "flower_cora"))
