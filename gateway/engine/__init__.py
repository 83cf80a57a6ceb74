"""Task execution: running agents outside the request, and waiting for their outcome."""
