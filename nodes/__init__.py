"""The nodes: one per file, each an async function that reads the state and returns a partial update."""
