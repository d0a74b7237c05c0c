"""python app.py export ... (scaffold)"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    print("not built yet", file=sys.stderr)
    return 2
