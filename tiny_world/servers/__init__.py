"""Loopback HTTP stand-ins for the services a real run calls (a model behind `vllm serve`, a grader)."""
