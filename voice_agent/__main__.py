import sys

from .cli import main

# Guarded: vLLM's engine starts subprocesses that may import this module again.
if __name__ == "__main__":
    sys.exit(main())
