"""Make the repository root importable so ``bench.sim`` resolves (bench/ is not an installed package).

The standard library's ``operator`` is imported long before this runs, so the repo's ``operator/``
folder on the path cannot shadow it.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[3])
if ROOT not in sys.path:
    sys.path.append(ROOT)
