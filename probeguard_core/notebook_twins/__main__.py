"""``python -m probeguard_core.notebook_twins`` = ``python -m probeguard_core.book.twins``."""

from probeguard_core.book.twins import main

raise SystemExit(main())
