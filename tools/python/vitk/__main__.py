"""python3 -m vitk WORDS...: the `vitk` command, run in this interpreter."""

import sys

from . import main

sys.exit(main(sys.argv[1:]))
