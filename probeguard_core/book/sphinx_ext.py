"""Moved to :mod:`probeguard_core.book.sphinx_ext`; this old module path stays as an alias of it.

<<<<<<<< HEAD:probeguard_core/book/sphinx_ext.py
* Removes duplicate ``<script>`` entries: sphinx-thebe registers its inline configuration
  (``const THEBE_JS_URL = ...``) once per environment read, and a second copy is a JavaScript
  error (a ``const`` declared twice) on every page.
* Points the launch buttons (Colab, Binder) of executed notebooks
  (``book/_generated/<name>.ipynb``, built, not committed) at the committed, unexecuted twin
  ``notebooks/ipynb/<name>.ipynb`` of their source ``notebooks/<name>.md``
  (:mod:`probeguard_core.book.twins`): Colab cannot open a jupytext ``.md``, and the twin's
  first cell tells the reader how to install the repository (Binder installs it from
  ``binder/requirements.txt``).
========
Importing ``probeguard_core.sphinx_ext`` gives the very module ``probeguard_core.book.sphinx_ext`` (same
object, so attributes and monkeypatches are shared).
>>>>>>>> c-deploy:probeguard_core/sphinx_ext.py
"""

import sys

from probeguard_core.book import sphinx_ext as _impl

sys.modules[__name__] = _impl
