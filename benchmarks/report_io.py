"""What every benchmark script does with its result: print it, and keep it as JSON on request."""

from __future__ import annotations

import json


def emit(report, json_path: str | None) -> None:
    """Print ``report`` as indented JSON; also write it to ``json_path`` if one was given."""
    text = json.dumps(report, indent=2)
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            f.write(text)
