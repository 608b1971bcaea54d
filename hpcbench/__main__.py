"""``python -m hpcbench`` is the same as the ``hpcbench`` command."""
from hpcbench.cli import main

raise SystemExit(main())
