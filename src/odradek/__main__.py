"""`python -m odradek`: how LocalCluster launches brokers with the same interpreter it runs on."""
import sys

from odradek.cli.main import main

sys.exit(main())
