"""``python -m tether.cli``: the ``tether`` command."""

from tether.cli import main

main()
