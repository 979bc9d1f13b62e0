"""Sessions: conversations, windows, compaction, shapes, user state, the conversation inside a task."""
