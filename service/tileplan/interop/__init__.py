"""Exchange with other tools: Timeloop mapping/problem/architecture files."""
