"""Files and jobs: reading user text and JSONL records, row-to-row jobs that resume, and run
directories that are locked and left clean."""
