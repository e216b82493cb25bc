"""Moved to :mod:`probeguard_core.book.twins`; this old module path stays as an alias of it.

Importing ``probeguard_core.notebook_twins`` gives the very module ``probeguard_core.book.twins`` (same
object, so attributes and monkeypatches are shared).
"""

import sys

from probeguard_core.book import twins as _impl

if __name__ == "__main__":  # `python -m probeguard_core.notebook_twins` keeps working
    raise SystemExit(_impl.main())

sys.modules[__name__] = _impl
