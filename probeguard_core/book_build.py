"""Moved to :mod:`probeguard_core.book.build`; this old module path stays as an alias of it.

Importing ``probeguard_core.book_build`` gives the very module ``probeguard_core.book.build`` (same
object, so attributes and monkeypatches are shared).
"""

import sys

from probeguard_core.book import build as _impl

if __name__ == "__main__":  # `python -m probeguard_core.book_build` keeps working
    raise SystemExit(_impl.main())

sys.modules[__name__] = _impl
