#!/usr/bin/env python3
"""Writes a long CSV trace for timing `tollgate simulate` (not kept in the
repository: 27 MB).

One million requests over about an hour from 10,000 keys, half of them from
five hot keys; sorted by time, integer milliseconds, cost 2 for one request
in 16. Deterministic (a fixed linear congruential generator):

    python3 examples/traces/make_long_trace.py > /tmp/1m.csv
"""

import sys

state = 1


def below(m):
    """A number in range(m) from a 64-bit LCG (the constants of Knuth's MMIX)."""
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return (state >> 33) % m


t = 1714564800000
lines = ["time,key,cost\n"]
for _ in range(1_000_000):
    t += below(8)  # 3.5 ms apart on average
    k = below(5) if below(2) == 0 else below(10_000)
    lines.append(f"{t},10.{k // 65536}.{(k // 256) % 256}.{k % 256},{1 if below(16) else 2}\n")
sys.stdout.write("".join(lines))
