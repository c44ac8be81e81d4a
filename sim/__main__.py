import sys

from servesim.cli.main import main

sys.exit(main())
