"""Moved to :mod:`probeguard_core.book.sphinx_ext`; this old module path stays as an alias of it.

Importing ``probeguard_core.sphinx_ext`` gives the very module ``probeguard_core.book.sphinx_ext`` (same
object, so attributes and monkeypatches are shared).
"""

import sys

from probeguard_core.book import sphinx_ext as _impl

sys.modules[__name__] = _impl
