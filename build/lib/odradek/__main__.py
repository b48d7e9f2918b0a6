"""`python -m odradek`: how LocalCluster launches brokers with the same interpreter it runs on."""
import sys

from odradek.cli import main

sys.exit(main())
