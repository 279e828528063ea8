"""`python -m torchferry` is the `ferry` command."""

import sys

from torchferry.cli import main

if __name__ == "__main__":
    sys.exit(main())
