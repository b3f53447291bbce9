import sys

from jaxconv.cli import main

sys.exit(main())
