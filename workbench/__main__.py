from fgl_workbench.cli import main

raise SystemExit(main())
