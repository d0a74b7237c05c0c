"""LLaMA-Factory's own parser, asked in a helper process (the web process never imports it)."""
