"""The validation path: one GPU, N GPUs, a fault drill, several nodes, proven step by step.

report.py holds the typed, JSON-round-trippable records (a report per path, kept under
`<runs>/validation/`), the machine fingerprint and the comparison of two reports; view.py
renders them at the edge from message ids. No gradio, no torch here.
"""
