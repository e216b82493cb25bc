"""The book machinery: executing the notebooks and rendering the Jupyter Book.

* :mod:`probeguard_core.book.paths`: the repository root and the one release-path resolver.
* :mod:`probeguard_core.book.build`: run every registered notebook with papermill, then
  ``jupyter-book build`` (``python -m probeguard_core.book.build``).
* :mod:`probeguard_core.book.twins`: the unexecuted ``.ipynb`` twins for Colab and Binder.
* :mod:`probeguard_core.book.sphinx_ext`: the book's small Sphinx extension.
* :mod:`probeguard_core.book.outputs`: what a notebook writes (``Outputs``) and its banner.

Submodules are imported on use; importing this package imports none of them.
"""
