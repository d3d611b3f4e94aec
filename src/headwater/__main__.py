import gc
import sys

from headwater.cli.main import main

status = main()
# The process ends here and the system frees its memory: frozen, the objects are not walked by the
# interpreter's collections at exit (0.1-0.6 s a command or broker stop, numba's objects the most).
gc.freeze()
sys.exit(status)
