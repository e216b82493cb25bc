"""The tables and figures of the paper, one module per part of the paper (replacing ``analysis``).

Submodules are imported on use; importing this package imports none of them.
"""
