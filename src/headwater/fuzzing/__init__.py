"""Hostile-input harness: valid requests from our codec, mutated, thrown at a real broker."""
