import sys

from computedomain.cli import main

sys.exit(main())
