"""Test helpers: a trained "parrot" judge and an OpenAI-compatible server on loopback."""
