import sys

from prompttune.cli import main

sys.exit(main())
