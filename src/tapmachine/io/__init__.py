"""Datasets and model files: fetching, verifying, deriving and storing data; checkpoints."""
