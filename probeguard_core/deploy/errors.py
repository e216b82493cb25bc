"""The error of a bad deployment request (§5.3): every step of :mod:`probeguard_core.deploy`
raises :class:`DeployError` naming the input or parameter at fault, and the CLI turns it into one
line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["DeployError"]


class DeployError(ValueError):
    """A bad certification / application request (names the input or parameter)."""
