"""`python3 -m slidingwindow.library <redis-url> [--cluster]`: see slidingwindow.library."""

import sys

from . import main

sys.exit(main())
