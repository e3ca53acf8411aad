"""Figures: one module per paper figure, plain functions from files in ``results/`` to images."""
