"""Moved to :mod:`probeguard_core.book.twins`; this old path forwards to it
(:func:`probeguard_core.book.aliases.alias_module`)."""

from probeguard_core.book.aliases import alias_module

alias_module(__name__, "probeguard_core.book.twins")
