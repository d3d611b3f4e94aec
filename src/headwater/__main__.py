import sys

from headwater.cli.main import main

sys.exit(main(exiting=True))
