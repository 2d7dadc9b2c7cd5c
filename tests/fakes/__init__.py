"""Test doubles for what is outside the product (an upstream LLM), as real servers."""
