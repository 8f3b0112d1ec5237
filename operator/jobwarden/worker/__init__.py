"""The worker process: claims jobs, runs them, heartbeats, records fenced outcomes."""
