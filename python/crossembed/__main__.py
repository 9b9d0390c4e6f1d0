from crossembed.cli import main

raise SystemExit(main())
