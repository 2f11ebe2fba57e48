"""The developers' entry to ringfence's benchmarks: ``python -m benchmarks`` in a checkout.

The suite itself is the package ``ringfence.bench`` (it ships in the wheel, behind
``ringfence bench``); this directory keeps the results (``results/``) and their
write-up (``README.md``).
"""
