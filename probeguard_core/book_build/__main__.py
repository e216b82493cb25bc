"""``python -m probeguard_core.book_build`` = ``python -m probeguard_core.book.build``."""

from probeguard_core.book.build import main

raise SystemExit(main())
