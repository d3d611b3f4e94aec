import sys

from headwater.demo.flagship import main

sys.exit(main())
