import sys

from pipeline.client.cli import main

sys.exit(main())
