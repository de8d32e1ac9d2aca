"""Browser tests: the web client in Debian's chromium, driven by Playwright."""
