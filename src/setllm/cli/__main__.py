from setllm.cli import main

raise SystemExit(main())
