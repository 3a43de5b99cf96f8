from madengine.cli import main

raise SystemExit(main())
