"""Inputs and scripts for the real programs the harness runs (see
harness/real_programs.py and harness/redis_server.py)."""
