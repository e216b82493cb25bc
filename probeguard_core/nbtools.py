"""Moved to :mod:`probeguard_core.book.nbtools`; this old module path stays as an alias of it.

Importing ``probeguard_core.nbtools`` gives the very module ``probeguard_core.book.nbtools`` (same
object, so attributes and monkeypatches are shared).
"""

import sys

from probeguard_core.book import nbtools as _impl

sys.modules[__name__] = _impl
