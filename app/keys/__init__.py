"""Issued API keys of the data plane: their records, their spend, and the gate both front
doors ask (docs/security.md "Keys and budgets")."""
