"""The module's command names and the library function each one maps to: the one place
the clients' Python side spells them (conformance/commands.json pins the same words)."""

from __future__ import annotations

CHECK = "SLIDINGWINDOW.CHECK"
PEEK = "SLIDINGWINDOW.PEEK"
REFUND = "SLIDINGWINDOW.REFUND"
COUNTS = "SLIDINGWINDOW.COUNTS"

# The module's command -> (the library's function, read-only).
FUNCTIONS = {
    CHECK: ("slidingwindow_check", False),
    PEEK: ("slidingwindow_peek", True),
    REFUND: ("slidingwindow_refund", False),
    COUNTS: ("slidingwindow_counts", True),
}
