"""`python3 -m vllm.entrypoints.openai.api_server` inside the stand-in serving image: runs tests/standins/vllm.py."""

import sys

from tests.standins.vllm import main

if __name__ == "__main__":
    sys.exit(main())
