"""``python -m benchmarks [SCENARIO…] [--quick]``: the same suite as ``ringfence bench``."""

import sys

from ringfence.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
