"""`make accuracy`: the module's sliding window counter against a fixed window and a
sliding log on a real server, judged against the exact true window (see run.py)."""
