"""`python -m odradek.cli`, as `python -m odradek`."""
import sys

from odradek.cli.main import main

sys.exit(main())
