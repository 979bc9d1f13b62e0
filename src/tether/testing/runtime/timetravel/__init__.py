"""Time travel: history, state at any point, diff, fork, rewind and replay."""
