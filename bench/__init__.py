"""The speed-and-cost benchmark suite (issue 7): `python -m bench [--quick] [--json]`.

Every benchmark drives the real product code against the fake Messages API in tests/, answered by
the scripted model in tests/scripted.py, so the numbers hold everything the product does except
the model's own thinking, which the fake replaces with a fixed, known latency. One module per
benchmark; harness.py holds what they share.

Importing the package puts the checkout (as `agentgod`, through its .pkg link) and tests/ on
sys.path first, so every module below imports this checkout's product and the test fakes.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
IMPORT_ROOT = ROOT / ".pkg"
"""The folder in which this checkout is the package `agentgod`; PYTHONPATH for the product."""
for _folder in (TESTS, IMPORT_ROOT):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
