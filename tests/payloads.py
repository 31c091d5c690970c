"""What a crafted checkpoint would hold (importable without torch or Lightning)."""

from __future__ import annotations

import os


class Payload:
    """Unpickling it runs ``touch <path>``: what a crafted checkpoint would do."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))
