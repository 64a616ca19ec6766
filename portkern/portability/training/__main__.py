"""``python -m portkern.portability.training derive-mixes ...``: see :func:`.mixes.main`."""

from .mixes import main

raise SystemExit(main())
