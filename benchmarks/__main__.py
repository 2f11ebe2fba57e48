"""``python -m benchmarks [SCENARIO…] [--quick] …``: exactly ``ringfence bench …`` (a shim)."""

import sys

from ringfence.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
