import os

# Tests never reach the network: the hub is unreachable here and must not be waited on.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
