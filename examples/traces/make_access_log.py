#!/usr/bin/env python3
"""Writes access.log: two minutes of nginx combined-format traffic.

Deterministic (a fixed linear congruential generator, no `random`), so
running it again reproduces the committed file byte for byte:

    python3 examples/traces/make_access_log.py > examples/traces/access.log

Clients use the documentation address ranges (RFC 5737 and RFC 3849):
- 203.0.113.9 scrapes /api/search in bursts across every 10-second boundary;
- 198.51.100.23 retries POST /api/login a few times a second;
- five browsers (one IPv6) fetch /, /static/app.css and /api/search at a
  human pace;
- one line has the request "-" (a connection closed before its request
  line), which nginx logs with status 400.
"""

import datetime

START = datetime.datetime(2024, 5, 1, 14, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
SECONDS = 120

state = 20240501


def below(m):
    """A number in range(m) from a 64-bit LCG (the constants of Knuth's MMIX)."""
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return (state >> 33) % m


BROWSER_UA = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
]
WORDS = ["rate", "limit", "token", "bucket", "window", "redis", "tollgate"]

events = []  # (milliseconds since START, client, method, target, status, size, referer, agent)

# The scraper: a burst of 8 in the half second before each 10 s boundary and
# 8 in the half second after it, and one request a second in between.
for boundary in range(10, SECONDS, 10):
    for i in range(8):
        for ms in (boundary * 1000 - 500 + i * 60, boundary * 1000 + 20 + i * 60):
            q = WORDS[below(len(WORDS))]
            events.append((ms, "203.0.113.9", "GET", f"/api/search?q={q}&page={below(5) + 1}", 200, 900 + below(400), "-", "python-requests/2.31"))
for second in range(SECONDS):
    if second % 10 not in (0, 9):
        q = WORDS[below(len(WORDS))]
        events.append((second * 1000 + below(1000), "203.0.113.9", "GET", f"/api/search?q={q}", 200, 900 + below(400), "-", "python-requests/2.31"))

# The login retrier: two to four attempts a second from 30 s to 90 s.
for second in range(30, 90):
    for _ in range(2 + below(3)):
        events.append((second * 1000 + below(1000), "198.51.100.23", "POST", "/api/login", 401, 33, "-", "curl/8.5.0"))

# Browsers: a page view every few seconds, with its stylesheet and a search.
browsers = ["192.0.2.10", "192.0.2.11", "192.0.2.57", "198.51.100.4", "2001:db8::7"]
for n, client in enumerate(browsers):
    ua = BROWSER_UA[n % len(BROWSER_UA)]
    ms = below(3000)
    while ms < SECONDS * 1000:
        events.append((ms, client, "GET", "/", 200, 5120 + below(200), "-", ua))
        events.append((ms + 40 + below(60), client, "GET", "/static/app.css", 304 if below(3) else 200, 0, "https://shop.example/", ua))
        if below(2):
            q = WORDS[below(len(WORDS))]
            events.append((ms + 900 + below(2000), client, "GET", f"/api/search?q={q}", 200, 900 + below(400), "https://shop.example/", ua))
        ms += 2000 + below(6000)

# A connection closed before its request line arrived: no method or path.
events.append((61_234, "192.0.2.99", None, None, 400, 0, "-", "-"))

events.sort(key=lambda e: (e[0], e[1]))
for ms, client, method, target, status, size, referer, agent in events:
    if ms >= SECONDS * 1000:
        continue
    when = (START + datetime.timedelta(milliseconds=ms)).strftime("%d/%b/%Y:%H:%M:%S %z")
    request = "-" if method is None else f"{method} {target} HTTP/1.1"
    print(f'{client} - - [{when}] "{request}" {status} {size} "{referer}" "{agent}"')
