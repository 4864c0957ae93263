from fgl_workbench.interface.cli import main

raise SystemExit(main())
