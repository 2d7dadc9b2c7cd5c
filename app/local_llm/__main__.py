import sys

from app.local_llm.cli import main

sys.exit(main())
