"""Replay: sum tree, prioritized sequence replay and the sequence adder."""
