"""Backends executing lowered tables: `cpu` (numpy interpreter with virtual SMs)."""
