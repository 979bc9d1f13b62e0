"""``python -m tether``: the ``tether`` command."""

from tether.cli import main

main(prog_name="tether")
